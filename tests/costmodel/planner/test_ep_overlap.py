"""Megatron-Core's batch-level all-to-all overlap (--overlap-moe-expert-parallel-comm): what it hides,
what the passes with no partner expose, and where Megatron-Core asserts it off. Hand computations on
a made-up block and on the warmup counts of schedules.py's get_pp_rank_microbatches.

The plans use the small Mixtral-style MoE of test_expert_parallel (2 layers, hidden 256, 8 experts,
top-2, seq 128) on 16 DGX H100 GPUs."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe import Parallel
from narrowpipe.costmodel.planner.block_cost import BlockCost, CollectiveUse
from narrowpipe.costmodel.planner.ep_overlap import block_hidden, unpaired_passes, why_not
from narrowpipe.costmodel.planner.runtime import RUNTIMES

L, H, F, E, K, V, SEQ = 2, 256, 512, 8, 2, 1000, 128


def _block(forward: float, backward: float, a2a_f: float, a2a_b: float) -> BlockCost:
    uses = tuple(CollectiveUse("expert-parallel dispatch all-to-all", "all_to_all", phase, "ep", 8, 1, 0, t, t)
                 for phase, t in (("forward", a2a_f), ("backward", a2a_b)))
    return BlockCost("b", "layer", {"forward": forward, "backward": backward}, a2a_f + a2a_b, 0.0, {}, 0, 0, 0, 0, 0,
                     {}, uses)


def test_each_pass_hides_behind_the_partners_compute_at_most():
    """forward 5 ms with 2 ms of all-to-all (3 ms compute), backward 10 ms with 4 ms (6 ms compute):
    the forward's 2 ms hide under the backward's 6 ms, the backward's 4 ms under the forward's 3 ms
    only 3 ms."""
    hid_f, hid_b = block_hidden(_block(5e-3, 10e-3, 2e-3, 4e-3))
    assert hid_f == pytest.approx(2e-3) and hid_b == pytest.approx(3e-3)
    assert block_hidden(_block(5e-3, 10e-3, 0.0, 0.0)) == (0.0, 0.0)


def test_unpaired_passes_are_megatrons_warmup_count():
    """No pipeline: the first forward (and last backward) alone. Interleaved pp=4, v=2, 8
    microbatches: (pp - rank - 1) x 2 + (v - 1) x pp + 1 = 11 on rank 0, 5 on rank 3; capped at m v."""
    assert unpaired_passes(Parallel(dp=16, ep=8, global_batch=64, microbatch=1), 0) == 1
    p = Parallel(pp=4, dp=4, ep=4, interleave=2, global_batch=32, microbatch=1)
    assert p.microbatches == 8
    assert [unpaired_passes(p, r) for r in range(4)] == [11, 9, 7, 5]
    small = Parallel(pp=4, dp=4, ep=4, interleave=2, global_batch=16, microbatch=1)
    assert small.microbatches == 4 and unpaired_passes(small, 0) == 8 and unpaired_passes(small, 3) == 5


def test_megatron_core_refuses_it_where_transformer_config_asserts():
    rt = RUNTIMES["megatron-core"]
    assert why_not(Parallel(dp=16, ep=8, global_batch=16), rt) is None
    assert "full recomputation" in why_not(Parallel(dp=16, ep=8, global_batch=16, recompute="full"), rt)
    assert "without interleaving" in why_not(Parallel(pp=2, dp=8, ep=8, global_batch=16), rt)
    assert why_not(Parallel(pp=2, dp=8, ep=8, interleave=2, global_batch=16), rt) is None
    assert why_not(Parallel(dp=16, global_batch=16), rt) == "no expert parallelism"
    assert "has no batch-level" in why_not(Parallel(dp=16, ep=8, global_batch=16), RUNTIMES["maxtext"])


@pytest.fixture(scope="module")
def moe() -> narrowpipe.Graph:
    return narrowpipe.transformer(L, H, 4, V, ffn=F, kv_heads=4, gated_mlp=True, experts=E, top_k=K, seq=SEQ,
                                  name="tiny-moe")


def test_four_microbatches_expose_a_quarter_of_the_all_to_alls(moe):
    """pp=1, 4 microbatches: 3 of 4 forwards (and backwards) have a partner; each layer's compute
    outlasts its all-to-alls, so 3/4 of them hide and the step is that much shorter than under a
    runtime without the overlap (MaxText's profile; everything else equal: same Megatron-Core runtime
    with the field off)."""
    import dataclasses
    fixed = {"tp": 1, "pp": 1, "ep": 8, "microbatch": 1, "recompute": "none", "zero": 1}
    on = narrowpipe.plan(moe, "dgx-h100", 16, global_batch=64, seq=SEQ, parallel=fixed, top=0)
    off = narrowpipe.plan(moe, "dgx-h100", 16, global_batch=64, seq=SEQ, parallel=fixed, top=0,
                          runtime=dataclasses.replace(RUNTIMES["megatron-core"], overlap_ep_comm=False))
    assert on.parallel.microbatches == 4
    total = sum(c["seconds"] for c in off.collectives if c["axis"] == "ep")
    assert off.breakdown["ep_comm"] == pytest.approx(total, rel=1e-9) and "ep_comm" not in off.hidden_comm
    assert on.breakdown["ep_comm"] == pytest.approx(total / 4, rel=1e-9)
    assert on.hidden_comm["ep_comm"] == pytest.approx(3 * total / 4, rel=1e-9)
    assert on.breakdown["compute"] == pytest.approx(off.breakdown["compute"], rel=1e-9)
    assert sum(c["exposed_s"] for c in on.collectives if c["axis"] == "ep") == pytest.approx(total / 4, rel=1e-9)


def test_the_interleaved_pipelines_timeline_agrees_with_the_plan():
    """The same MoE with 4 layers, pp=2, v=2, 4 microbatches: rank 0 leaves (2-0-1) x 2 + (2-1) x 2
    + 1 = 5 of its 8 chunk passes unpaired, rank 1 3; the hiding is each device's paired share, so
    the timeline a trace draws from the plan's chunk times ends where the plan's step does."""
    from narrowpipe.costmodel.planner.ep_overlap import paired_share
    from narrowpipe.costmodel.planner.schedule import step_timeline
    moe = narrowpipe.transformer(4, H, 4, V, ffn=F, kv_heads=4, gated_mlp=True, experts=E, top_k=K, seq=SEQ)
    plan = narrowpipe.plan(moe, "dgx-h100", 16, global_batch=32, seq=SEQ, top=0,
                           parallel={"tp": 1, "pp": 2, "ep": 8, "interleave": 2, "microbatch": 1, "recompute": "none",
                                     "zero": 1})
    p = plan.parallel
    assert p.microbatches == 4 and [paired_share(p, r) for r in (0, 1)] == [3 / 8, 5 / 8]
    assert plan.hidden_comm["ep_comm"] > 0
    assert step_timeline(plan).total_s == pytest.approx(plan.step_time_s, rel=1e-9)
