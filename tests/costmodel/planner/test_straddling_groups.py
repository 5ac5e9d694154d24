"""The planner times each axis's groups where the launcher places them (Megatron-LM rank order:
tp innermost, then cp, ep/dp, pp; ranks fill scale-up domains in order), so a group that straddles a
domain boundary runs at the scale-out network's rate, and the plan says so.

A small Mixtral-style model (2 layers, hidden 256, 8 experts of ffn 512, top-2, bf16, seq 128) on two
GB200 NVL72 racks (144 GPUs, 72 per NVLink domain): with tp=2 the ep=8 group's members are 2 ranks
apart and span 16 ranks, and 16 does not divide 72, so the group at ranks 64, 66, ..., 78 has 4
members in rack 0 and 4 in rack 1. Hand computation from the catalog (gb200-nvl72.toml): one 400 Gb/s
(50 GB/s) NIC per GPU at 5 us a step; NVLink 900 GB/s at 3 us.
"""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe import Parallel
from narrowpipe.costmodel.planner.planner import Planner

L, H, F, E, K, V, SEQ = 2, 256, 512, 8, 2, 1000, 128
NIC_BW, NIC_ALPHA = 50e9, 5e-6


@pytest.fixture(scope="module")
def moe() -> narrowpipe.Graph:
    return narrowpipe.transformer(L, H, 4, V, ffn=F, kv_heads=4, gated_mlp=True, experts=E, top_k=K, seq=SEQ,
                                  name="tiny-moe")


def _dispatch(layer):
    return next(u for u in layer.collectives if u.purpose.startswith("expert-parallel dispatch")
                and u.phase == "forward")


def test_a_straddling_ep_group_is_timed_across_racks(moe):
    """tp=2 with sequence parallelism: each tensor-parallel rank exchanges its half of the routed
    rows, 128 tokens x top-2 x 256 x 2 B / 2 = 64 KiB, of which 7/8 leaves the device. The slowest
    group (4 + 4 across the rack boundary) sends the 4 peers in the other rack their 4/8 through the
    NIC (the 3 in its rack theirs over NVLink meanwhile), 7 steps at 5 us:
    7 x 5 us + 32,768 B / 50 GB/s = 35.7 us, plus the kernel's launch."""
    planner = Planner(moe, "gb200-nvl72", 144, global_batch=144, seq=SEQ)
    p = Parallel(tp=2, dp=72, ep=8, global_batch=144, microbatch=1, sequence_parallel=True)
    assert p.axis("ep") == (8, 2)
    use = _dispatch(planner.cost(planner.blocks.layers[0], p))
    sent = SEQ * K * H * 2 // 2 * 7 // 8
    assert use.comm_bytes == sent
    across = SEQ * K * H * 2 // 2 * 4 // 8
    assert use.seconds == pytest.approx(7 * NIC_ALPHA + across / NIC_BW + planner.target.launch_overhead, rel=1e-9)


def test_an_aligned_ep_group_stays_on_nvlink(moe):
    """tp=1: ep=8 groups are ranks 8k..8k+7, inside a rack for every k (8 divides 72):
    7 x 3 us + 7/8 x 128 KiB / 900 GB/s, plus the launch."""
    planner = Planner(moe, "gb200-nvl72", 144, global_batch=144, seq=SEQ)
    p = Parallel(tp=1, dp=144, ep=8, global_batch=144, microbatch=1)
    use = _dispatch(planner.cost(planner.blocks.layers[0], p))
    sent = SEQ * K * H * 2 * 7 // 8
    assert use.seconds == pytest.approx(7 * 3e-6 + sent / 900e9 + planner.target.launch_overhead, rel=1e-9)


def test_the_plan_notes_the_straddle_and_the_step_carries_it(moe):
    """The plan's ep_comm is its all-to-alls at the straddled time, and its notes name the groups."""
    plan = narrowpipe.plan(moe, "gb200-nvl72", 144, global_batch=144, seq=SEQ,
                           parallel={"tp": 2, "pp": 1, "ep": 8, "microbatch": 1, "recompute": "none", "zero": 1,
                                     "sequence_parallel": True})
    rows = [c for c in plan.collectives if c["axis"] == "ep"]
    each = 7 * NIC_ALPHA + SEQ * K * H * 2 // 2 * 4 // 8 / NIC_BW      # the other rack's 4 of 8 peers
    launch = narrowpipe.get_target("gb200").launch_overhead
    # exposed + hidden: Megatron-Core's batch-level overlap hides some of them (test_ep_overlap)
    assert plan.breakdown["ep_comm"] + plan.hidden_comm.get("ep_comm", 0.0) == pytest.approx(
        sum(r["per_step"] for r in rows) * (each + launch), rel=1e-9)
    assert any(n.startswith("expert-parallel groups (ep=8, ranks 2 apart)") and "straddle" in n for n in plan.notes)
    assert not any("not a whole number" in n for n in plan.notes)


def test_full_recomputation_counts_its_collectives_once(moe):
    """Under full recomputation the recomputed forward runs the all-to-alls and tensor-parallel
    collectives again. The breakdown's compute is the kernels of the forward and backward without
    their collectives, its recomputation the recomputed forward's kernels without theirs (those are
    in the ep/tp terms), each summed by hand from the layers' per-phase times: counted in both the
    recomputation and the ep term, the re-run all-to-alls came off compute twice (DeepSeek-V3 on 512
    NVL72 GPUs showed a negative compute term)."""
    planner = Planner(moe, "gb200-nvl72", 144, global_batch=144, seq=SEQ)
    p = Parallel(tp=2, dp=72, ep=8, global_batch=144, microbatch=1, sequence_parallel=True, recompute="full")
    ev = planner.evaluate(p)
    blocks = ev.step.layout.devices[0].blocks
    compute = recompute = 0.0
    for b in blocks:
        comm = {ph: sum(u.exposed_s for u in b.collectives if u.phase == ph) for ph in ("forward", "backward",
                                                                                        "recompute")}
        compute += b.times["forward"] - comm["forward"] + b.times["backward"] - comm["backward"]
        recompute += b.times.get("recompute", 0.0) - comm["recompute"]
    m = p.microbatches
    assert any(u.phase == "recompute" and u.axis == "ep" for b in blocks for u in b.collectives)
    assert ev.step.breakdown["compute"] == pytest.approx(m * compute, rel=1e-9)
    assert ev.step.breakdown["recompute"] == pytest.approx(m * recompute, rel=1e-9)
