"""Groups that straddle a scale-up domain boundary, timed where the launcher puts their ranks.

Checked against hand computations from the catalog's GB200 NVL72 and DGX H100 figures (not against
the tool's own aligned timing): NVL72 has 72-GPU NVLink domains at 900 GB/s per GPU, 3 us per step,
and one 400 Gb/s (50 GB/s) NIC per GPU at 5 us per step (backends/systems/gb200-nvl72.toml). Ranks
fill domains in order and an axis of ``size`` members ``stride`` apart has groups
``base + i * stride`` (Megatron-LM's rank order), so in 512 ranks ep=64 at stride 1 has groups
64k..64k+63: stage 0's inside rack 0, stage 1's with ranks 64-71 in rack 0 and 72-127 in rack 1.
"""

from __future__ import annotations

import dataclasses

import pytest

from narrowpipe.backends import get_system
from narrowpipe.costmodel.execution.collectives import Topology
from narrowpipe.costmodel.execution.placement import Spread, group_ranks, pair_spreads, spread_counts
from narrowpipe.costmodel.planner.domain_notes import domain_notes
from narrowpipe.costmodel.planner.strategy import Parallel
from narrowpipe.ir import Op

#: catalog figures, by hand from gb200-nvl72.toml
NVLINK_BW, NVLINK_ALPHA = 900e9, 3e-6
NIC_BW, NIC_ALPHA = 400e9 / 8, 5e-6
#: DeepSeek-V3's routed rows of one microbatch in bf16: 4096 tokens x top-8 x hidden 7168 x 2 B
DSV3_ROWS = 4096 * 8 * 7168 * 2


@pytest.fixture(scope="module")
def nvl72() -> Topology:
    return Topology.of_system(get_system("gb200-nvl72"))


def test_ep64_groups_in_512_ranks_on_72_gpu_racks():
    """Group k is ranks 64k..64k+63; its members per rack by hand: k=0 all 64 in rack 0; k=1 8 + 56;
    k=2 16 + 48 (ranks 128-143 | 144-191); k=3 24 + 40; k=4 32 + 32; k=5 40 + 24; k=6 48 + 16;
    k=7 56 + 8 (ranks 448-503 in rack 6, 504-511 in rack 7, the partial one)."""
    groups = group_ranks(64, 1, 512)
    assert [(g[0], g[-1]) for g in groups] == [(64 * k, 64 * k + 63) for k in range(8)]
    assert dict(spread_counts(72, 64, 1, 512)) == {Spread(64, 1): 1, Spread(8, 2): 2, Spread(16, 2): 2,
                                                   Spread(24, 2): 2, Spread(32, 2): 1}


def test_a_straddling_all_to_all_is_timed_over_the_network(nvl72):
    """The slowest ep=64 group (8 + 56 across two racks): a member on the 8 side sends its 56 peers in
    the other rack their 1/64 each through its own NIC while its 7 rack peers get theirs over NVLink
    (grouped send/recv per peer); the NIC lane is the slower, latency the ring's 63 steps at the
    network's 5 us: 63 x 5 us + 469.8 MB x 56/64 / 50 GB/s = 0.315 + 8.221 = 8.536 ms (pricing all
    63/64 at the NIC gave 9.563 ms); the aligned (unknown world) timing stays NVLink's
    63 x 3 us + 469.8 MB x 63/64 / 900 GB/s = 0.703 ms."""
    world = dataclasses.replace(nvl72, world=512)
    across = 63 * NIC_ALPHA + DSV3_ROWS * 56 / 64 / NIC_BW
    inside = 63 * NVLINK_ALPHA + DSV3_ROWS * 63 / 64 / NVLINK_BW
    assert across == pytest.approx(8.536e-3, rel=1e-3)
    assert world.time(Op.ALL_TO_ALL, DSV3_ROWS, 64, 1).seconds == pytest.approx(across, rel=1e-9)
    assert nvl72.time(Op.ALL_TO_ALL, DSV3_ROWS, 64, 1).seconds == pytest.approx(inside, rel=1e-9)
    assert world.members_per_domain(64, 1) == 8
    link = world.link(64, 1)
    assert not link.intra and link.bandwidth == pytest.approx(NIC_BW)


def test_a_straddling_reduce_scatter_crosses_through_the_fewest_members_nics(nvl72):
    """dp=64 at stride 1 in 512 ranks: the 8 + 56 group's ring crosses each rack boundary through at
    most 8 NICs (8 x 50 = 400 GB/s, under NVLink's 900): (n-1)/n x size / 400 GB/s at 5 us a step,
    unless the two-level algorithm (reduce-scatter among 8 on NVLink, then across the 2 racks on an
    eighth of the buffer) is faster; by hand, both, and the faster is kept."""
    world = dataclasses.replace(nvl72, world=512)
    size = 1e9
    ring = 63 * NIC_ALPHA + size * 63 / 64 / (8 * NIC_BW)
    two_level = (7 * NVLINK_ALPHA + size * 7 / 8 / NVLINK_BW) + (1 * NIC_ALPHA + size / 8 / 2 / NIC_BW)
    assert world.time(Op.REDUCE_SCATTER, size, 64, 1).seconds == pytest.approx(min(ring, two_level), rel=1e-9)


def test_groups_inside_a_domain_are_unchanged(nvl72):
    """ep=8 at stride 1 on 72-GPU racks (8 divides 72: no group straddles) and tp=8 on DGX H100
    nodes stay on NVLink: 7 x 3 us + 7/8 x size / 900 GB/s on NVL72, whatever the world."""
    world = dataclasses.replace(nvl72, world=512)
    assert dict(spread_counts(72, 8, 1, 512)) == {Spread(8, 1): 64}
    inside = 7 * NVLINK_ALPHA + DSV3_ROWS * 7 / 8 / NVLINK_BW
    assert world.time(Op.ALL_TO_ALL, DSV3_ROWS, 8, 1).seconds == pytest.approx(inside, rel=1e-9)
    dgx = Topology.of_system(get_system("dgx-h100"))
    for op in (Op.ALL_REDUCE, Op.ALL_GATHER, Op.ALL_TO_ALL):
        assert dataclasses.replace(dgx, world=64).time(op, 1e8, 8, 1) == dgx.time(op, 1e8, 8, 1)
        assert dataclasses.replace(dgx, world=64).time(op, 1e8, 8, 8) == dgx.time(op, 1e8, 8, 8)


def test_pipeline_sends_cross_when_any_stage_pair_does(nvl72):
    """pp sends between ranks 8 apart in 144 ranks: ranks 0 and 8 share rack 0, ranks 64 and 72 do
    not; the step waits for the crossing pair: 5 us + size / 50 GB/s."""
    assert set(pair_spreads(72, 8, 144)) == {Spread(1, 2), Spread(2, 1)}
    assert pair_spreads(72, 8, 72) == (Spread(2, 1),)
    world = dataclasses.replace(nvl72, world=144)
    assert world.time(Op.SEND, 1e8, 2, 8).seconds == pytest.approx(NIC_ALPHA + 1e8 / NIC_BW, rel=1e-9)


def test_plan_notes_say_the_world_is_not_whole_racks(nvl72):
    """512 devices on 72-GPU racks: 7 full racks and 8 GPUs of an eighth; the ep and dp groups of 64
    at stride 1 straddle (7 of 8 each); pp's sends are not a group collective named here."""
    p = Parallel(tp=1, pp=8, dp=64, ep=64, global_batch=64)
    notes = domain_notes(dataclasses.replace(nvl72, world=512), p, "gb200-nvl72")
    assert any("512 devices are not a whole number" in n and "7 full and one with 8" in n for n in notes)
    assert any(n.startswith("expert-parallel groups (ep=64") and "7 of 8 straddle" in n for n in notes)
    assert any(n.startswith("data-parallel gradient groups (dp_cp=64") for n in notes)
    assert domain_notes(dataclasses.replace(nvl72, world=576), p.replace(dp=72, ep=8, global_batch=72),
                        "gb200-nvl72") == []


def test_a_dense_plan_has_no_expert_data_parallel_note(nvl72):
    """Without experts (ep=1) the expert data-parallel groups are the data-parallel ones: one note,
    not the same straddle said twice (before: 'expert data-parallel gradient groups (edp=64' too)."""
    p = Parallel(tp=1, pp=8, dp=64, global_batch=64)
    notes = domain_notes(dataclasses.replace(nvl72, world=512), p, "gb200-nvl72")
    assert any(n.startswith("data-parallel gradient groups (dp_cp=64") for n in notes)
    assert not any("expert" in n for n in notes)
