"""A mixture of experts under tensor parallelism: the runtime's refusal of tp without sequence
parallelism (Megatron-Core's MoELayer.forward raises on it), and the rows the dispatch and combine
all-to-alls carry when sequence parallelism is off (the same rows both ways, hand-computed).

The model is the small Mixtral-style MoE of test_expert_parallel (2 layers, hidden 256, 8 experts of
ffn 512, top-2, bf16, seq 128) on DGX H100s."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe import Parallel, PlanError
from narrowpipe.costmodel.planner.planner import Planner
from narrowpipe.costmodel.planner.search import candidates

L, H, F, E, K, V, SEQ, BATCH = 2, 256, 512, 8, 2, 1000, 128, 32


@pytest.fixture(scope="module")
def moe() -> narrowpipe.Graph:
    return narrowpipe.transformer(L, H, 4, V, ffn=F, kv_heads=4, gated_mlp=True, experts=E, top_k=K, seq=SEQ,
                                  name="tiny-moe")


def test_megatron_core_never_picks_and_refuses_moe_with_tp_but_no_sequence_parallelism(moe):
    planner = Planner(moe, "dgx-h100", 16, global_batch=BATCH, seq=SEQ)
    assert planner.runtime.name == "megatron-core"
    cands = list(candidates(planner, {"pp": 1, "microbatch": 1, "recompute": "none", "zero": 1}))
    assert any(p.tp > 1 for p in cands)
    assert all(p.sequence_parallel for p in cands if p.tp > 1)
    with pytest.raises(PlanError, match="only with sequence parallelism.*moe_layer.py"):
        narrowpipe.plan(moe, "dgx-h100", 16, global_batch=BATCH, seq=SEQ,
                        parallel={"tp": 2, "pp": 1, "ep": 4, "sequence_parallel": False})
    with pytest.raises(PlanError, match="only with sequence parallelism"):
        planner.evaluate(Parallel(tp=2, dp=8, ep=4, global_batch=BATCH, microbatch=1))
    # a dense model is not refused: the check is MoELayer's
    dense = narrowpipe.transformer(L, H, 4, V, ffn=F, kv_heads=4, gated_mlp=True, seq=SEQ)
    Planner(dense, "dgx-h100", 16, global_batch=BATCH, seq=SEQ).evaluate(
        Parallel(tp=2, dp=8, global_batch=BATCH, microbatch=1))


def test_without_sequence_parallelism_dispatch_and_combine_carry_the_same_rows(moe):
    """MaxText allows tp without sequence parallelism. tp=2, ep=4 (dp=8), microbatch 1: a device
    routes 128 tokens x top-2 = 256 rows of 256 bf16 values; each tensor-parallel rank exchanges its
    half (128 rows, 65,536 bytes) and an all-to-all over 4 keeps 1/4 of it: 3/4 x 65,536 = 49,152
    bytes leave each rank, dispatch and combine alike (the dispatch used to send all 256 rows)."""
    planner = Planner(moe, "dgx-h100", 16, global_batch=BATCH, seq=SEQ, runtime="maxtext")
    layer = planner.cost(planner.blocks.layers[0], Parallel(tp=2, dp=8, ep=4, global_batch=BATCH, microbatch=1))
    sent = {u.purpose.split()[1]: u.comm_bytes for u in layer.collectives
            if u.phase == "forward" and u.purpose.startswith("expert-parallel")}
    assert sent == {"dispatch": 3 * (SEQ * K // 2) * H * 2 // 4, "combine": 3 * (SEQ * K // 2) * H * 2 // 4}
    assert sent["dispatch"] == 49_152
