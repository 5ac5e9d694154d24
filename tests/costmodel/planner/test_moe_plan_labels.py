"""What a MoE plan says about itself: the experts' gradient reduction in a row of its own group, the
one-row-per-token cap named when a skew asks past it, and the active-parameter count.

The model is the small Mixtral-style MoE of test_expert_parallel (2 layers, hidden 256, 4 heads,
vocabulary 1,000, 8 experts of ffn 512, top-2, bf16, seq 128) on 16 DGX H100 GPUs."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.costmodel.experts import ExpertBalance, cap_note, expert_rows

L, H, F, E, K, V, SEQ, BATCH = 2, 256, 512, 8, 2, 1000, 128, 32
EXPERT_PARAMS = L * E * (2 * F * H + H * F)          # gate_up [E, 2F, H] and down [E, H, F] per layer


@pytest.fixture(scope="module")
def moe() -> narrowpipe.Graph:
    return narrowpipe.transformer(L, H, 4, V, ffn=F, kv_heads=4, gated_mlp=True, experts=E, top_k=K, seq=SEQ,
                                  name="tiny-moe")


@pytest.fixture(scope="module")
def plan(moe):
    return narrowpipe.plan(moe, "dgx-h100", 16, global_batch=BATCH, seq=SEQ,
                           parallel={"tp": 1, "pp": 1, "ep": 8, "zero": 0, "microbatch": 1}, top=0)


def test_the_expert_gradient_reduction_is_its_own_row_over_its_replicas(plan):
    """dp=16, ep=8: each expert has 16 / 8 = 2 replicas. The device's 1/8 of the experts' gradients
    (fp32) are all-reduced over those 2: 2 (2 - 1) / 2 x 4 B x EXPERT_PARAMS / 8 bytes, in a row
    labelled with its group of 2 (it was summed into the dense row, labelled 16)."""
    rows = {r["purpose"]: r for r in plan.collectives}
    expert = rows["expert data-parallel gradient reduction"]
    assert (expert["op"], expert["axis"], expert["group_size"]) == ("all_reduce", "edp", 2)
    assert expert["comm_bytes"] == 2 * (2 - 1) * 4 * (EXPERT_PARAMS // 8) // 2
    dense = rows["data-parallel gradient reduction"]
    assert dense["group_size"] == 16 and dense["axis"] == "dp"
    assert dense["exposed_s"] + expert["exposed_s"] == pytest.approx(plan.breakdown["dp_comm"], rel=1e-9)


def test_a_skew_past_one_row_per_token_is_named_and_costed_as_the_cap(moe):
    """top-2: each token's 2 rows go to 2 different experts, so the hottest expert holds at most
    half the rows; hot:0.9 is costed as hot:0.5 and says so, hot:0.5 says nothing."""
    assert expert_rows(256, E, K, ExpertBalance.parse("hot:0.9")) == expert_rows(256, E, K,
                                                                                 ExpertBalance.parse("hot:0.5"))
    assert expert_rows(256, E, K, ExpertBalance.parse("hot:0.5"))[0] == 128
    note = cap_note(E, K, ExpertBalance.parse("hot:0.9"))
    assert note is not None and "90%" in note and "1/2" in note
    assert cap_note(E, K, ExpertBalance.parse("hot:0.5")) is None
    assert cap_note(E, 1, ExpertBalance.parse("hot:0.9")) is None          # top-1: one expert may take all
    skewed = narrowpipe.plan(moe, "dgx-h100", 16, global_batch=BATCH, seq=SEQ, expert_balance="hot:0.9",
                             parallel={"tp": 1, "pp": 1, "ep": 8, "zero": 0, "microbatch": 1}, top=0)
    assert any("hot:0.9 routing asks the hottest expert for 90%" in n for n in skewed.notes)


def test_the_plan_states_the_active_parameters(moe, plan):
    """Active per token: everything but the routed experts, plus top-2 / 8 of them (hand count)."""
    total = moe.param_count()
    active = total - EXPERT_PARAMS + EXPERT_PARAMS * K // E
    note = next(n for n in plan.notes if n.startswith("mixture of experts:"))
    assert EXPERT_PARAMS == 6_291_456 and active == total - 4_718_592
    assert f"{total / 1e6:.1f}M parameters, {active / 1e6:.1f}M active" in note
    dense = narrowpipe.transformer(L, H, 4, V, ffn=F, kv_heads=4, gated_mlp=True, seq=SEQ)
    p = narrowpipe.plan(dense, "dgx-h100", 16, global_batch=BATCH, seq=SEQ, parallel={"tp": 1, "pp": 1}, top=0)
    assert not any(n.startswith("mixture of experts:") for n in p.notes)


def test_without_expert_parallelism_the_experts_reduce_in_the_dense_row(moe):
    """ep=1: the experts' replicas are the data-parallel group itself, one row over dp=16."""
    p = narrowpipe.plan(moe, "dgx-h100", 16, global_batch=BATCH, seq=SEQ,
                        parallel={"tp": 1, "pp": 1, "ep": 1, "zero": 0, "microbatch": 1}, top=0)
    rows = [r for r in p.collectives if "gradient reduction" in str(r["purpose"])]
    assert [(r["purpose"], r["group_size"]) for r in rows] == [("data-parallel gradient reduction", 16)]
