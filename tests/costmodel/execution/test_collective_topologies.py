"""How a group's size meets the wiring: full meshes, parts of torus axes, the chip's link total, and
groups larger than the machine. Expected times are hand computations from the spec numbers (per-chip
bandwidth, link counts, per-hop latency of the catalog and system files), not the code's output.

Bandwidths are one direction; a link carries its rate each way at once (TPU ICI: 4.5e10 B/s one way,
9e10 bidirectional, SB-TPU), so two neighbours gathering each other's half both send at the link's
one-way rate at the same time."""

from __future__ import annotations

import pytest

from narrowpipe import PlanError
from narrowpipe.backends import get_system, get_target, systems, targets
from narrowpipe.costmodel.execution.algorithms import bus_factor
from narrowpipe.costmodel.execution.collectives import Topology
from narrowpipe.ir import Op

MB = 1e6


def _busbw(t, op: Op, size: float, n: int) -> float:
    """NCCL's bus bandwidth of a timed collective, from its transfer term alone."""
    return bus_factor(op, n) * size / t.transfer_s


# -- 1. full meshes ---------------------------------------------------------------------------------

def test_gaudi3_pair_gets_three_of_its_twenty_one_ports_and_all_eight_cards_all_of_them():
    """HLS-3: 21 x 200 GbE scale-up ports per card wired all-to-all over 8 cards (hardware.md
    section 22): 3 ports = 75 GB/s one way to each peer; ring steps of 3 us (catalog)."""
    topo = Topology.of(get_target("gaudi3"))
    pair = topo.time(Op.ALL_GATHER, 64 * MB, 2)
    assert pair.seconds == pytest.approx(3e-6 + 0.5 * 64 * MB / 75e9)            # 430 us, not 67
    four = topo.time(Op.ALL_GATHER, 64 * MB, 4)
    assert four.seconds == pytest.approx(3 * 3e-6 + 3 / 4 * 64 * MB / (3 * 75e9))
    whole = topo.time(Op.ALL_GATHER, 64 * MB, 8)
    assert whole.seconds == pytest.approx(7 * 3e-6 + 7 / 8 * 64 * MB / 525e9)


def test_groqnode_pair_has_one_four_lane_link():
    """The system's own note: one 4-lane link (4 x 30 Gbps = 15 GB/s) per peer, 7 peers = 105 GB/s."""
    topo = Topology.of_system(get_system("groq-node"))
    assert topo.time(Op.ALL_GATHER, 64 * MB, 2).seconds == pytest.approx(1e-6 + 0.5 * 64 * MB / 15e9)
    assert _busbw(topo.time(Op.ALL_GATHER, 64 * MB, 8), Op.ALL_GATHER, 64 * MB, 8) == pytest.approx(105e9)


def test_mi300x_pair_runs_on_one_infinity_fabric_link_and_all_eight_keep_the_measured_busbw():
    """A pair of MI300X has one 64 GB/s link, about 48 usable (ROCM-RCCL-XGMI, 75% of each link: the
    system's 336 GB/s over 7 links); all 8 keep the calibrated 336. RCCL's README: with fewer than 8
    MI300X 'one can only achieve a fraction of the potential bandwidth'."""
    topo = Topology.of_system(get_system("mi300x-8"))
    pair = topo.time(Op.ALL_REDUCE, 256 * MB, 2)
    assert pair.seconds == pytest.approx(2 * 3e-6 + 256 * MB / 48e9)               # 2(n-1)/n = 1
    assert _busbw(topo.time(Op.ALL_REDUCE, 256 * MB, 8), Op.ALL_REDUCE, 256 * MB, 8) == pytest.approx(336e9)
    four = topo.time(Op.ALL_TO_ALL, 256 * MB, 4)                                  # 3 direct links
    assert _busbw(four, Op.ALL_TO_ALL, 256 * MB, 4) == pytest.approx(3 * 48e9)
    # a pipeline send crosses one pair's link, however many devices the group names
    assert topo.time(Op.SEND, 256 * MB, 8).transfer_s == pytest.approx(256 * MB / 48e9)
    assert topo.link(2).bandwidth == pytest.approx(48e9)


def test_a_switch_node_still_gives_a_pair_the_whole_scale_up_rate():
    topo = Topology.of_system(get_system("dgx-a100"))
    assert _busbw(topo.time(Op.ALL_GATHER, 256 * MB, 2), Op.ALL_GATHER, 256 * MB, 2) == pytest.approx(234.9e9)


# -- 2. parts of a torus axis -----------------------------------------------------------------------

def test_two_neighbours_on_a_v5e_ring_share_one_link():
    """v5e: 148 GB/s one way measured over 4 ports = 37 GB/s per link (SB-SHARD: 0.82 of SB-TPU's
    45 GB/s; GCP-V5E's 50 is the peak). A pair of a 16-ring has one link between them (both
    directions at once); a group of 8 is a line, 7 hops; only the whole axis of 16 closes through
    its wraparound: both links, 8 hops (1.45 us each, the system file)."""
    topo = Topology.of_system(get_system("tpu-v5e-256"))
    size = 64 * MB
    hop, link = 1.45e-6, 37e9
    assert topo.time(Op.ALL_GATHER, size, 2).seconds == pytest.approx(hop + 1 / 2 * size / link)
    assert topo.time(Op.ALL_GATHER, size, 8).seconds == pytest.approx(7 * hop + 7 / 8 * size / link)
    assert topo.time(Op.ALL_GATHER, size, 16).seconds == pytest.approx(8 * hop + 15 / 16 * size / (2 * link))
    assert topo.time(Op.ALL_GATHER, size, 2, axes=(2,)).seconds == pytest.approx(hop + 1 / 2 * size / link)
    assert topo.link(2).bandwidth == pytest.approx(link)


def test_the_same_v4_neighbour_pair_costs_the_same_on_the_cube_and_on_a_mesh_slice():
    """Cube: 221 GB/s measured over 6 links; 2x2x4 mesh: 148 over 4 (both 0.82 of 45 GB/s links)."""
    cube, mesh = Topology.of_system(get_system("tpu-v4-4x4x4")), Topology.of_system(get_system("tpu-v4-2x2x4"))
    on_cube = cube.time(Op.ALL_GATHER, 64 * MB, 2)
    assert on_cube.seconds == pytest.approx(1.45e-6 + 0.5 * 64 * MB / (221e9 / 6))
    assert on_cube.seconds == pytest.approx(mesh.time(Op.ALL_GATHER, 64 * MB, 2).seconds, rel=0.01)
    # 8 on the cube: one whole axis of 4 (2 links, 2 hops) and half of the next (1 link, 1 hop)
    eight = cube.time(Op.ALL_GATHER, 64 * MB, 8)
    assert eight.seconds == pytest.approx(3 * 1.45e-6 + 7 / 8 * 64 * MB / (3 * 221e9 / 6))


def test_partial_axes_on_the_trn2_instance_and_the_v4_cube():
    """trn2-16: 640 GB/s over 4 links = 160 GB/s each; a pair of the 4x4 torus shares one link."""
    trn = Topology.of_system(get_system("trn2-16"))
    assert trn.time(Op.ALL_GATHER, 64 * MB, 2).seconds == pytest.approx(1e-6 + 0.5 * 64 * MB / 160e9)
    assert trn.time(Op.ALL_GATHER, 64 * MB, 4).seconds == pytest.approx(2e-6 + 3 / 4 * 64 * MB / 320e9)
    # a permute along part of an axis walks its last buffer back over the line, like a mesh
    cube = Topology.of_system(get_system("tpu-v4-4x4x4"))
    assert not cube.wraps(2) and cube.wraps(4) and cube.wraps(16, 4)


# -- 3. never above the chip's links ----------------------------------------------------------------

def test_trainium2_ultraserver_all_reduce_stays_within_the_chips_neuronlink_total():
    """NeuronLink-v3: 1.28 TB/s per chip, 640 one way (NRN-TRN2, halved as MLE-NET does); the 4x4x4
    UltraServer torus wires 6 links per chip, so 640/6 each: 64 chips on all 6 reach 640 GB/s (the
    old 4-link split counted 954), 16 chips on two axes 4 x 640/6."""
    topo = Topology.of(get_target("trainium2"))
    size = 1e9
    assert _busbw(topo.time(Op.ALL_REDUCE, size, 64), Op.ALL_REDUCE, size, 64) == pytest.approx(640e9)
    assert _busbw(topo.time(Op.ALL_REDUCE, size, 16), Op.ALL_REDUCE, size, 16) == pytest.approx(4 * 640e9 / 6)
    instance = Topology.of_system(get_system("trn2-16"))        # 4x4 torus, 4 links of 160 GB/s
    assert _busbw(instance.time(Op.ALL_REDUCE, size, 16), Op.ALL_REDUCE, size, 16) == pytest.approx(640e9)


def _groups(domain: int) -> list[int]:
    sizes = {n for n in (2, 3, 4, 6, 8, 12, 16, 32, 64, 128, 256, 512, 4096) if n <= domain} | {domain}
    return sorted(n for n in sizes if n > 1)


@pytest.mark.parametrize("name", [n for n, _ in targets() if get_target(n).scale_up_bandwidth])
def test_no_group_of_a_chip_runs_above_its_scale_up_bandwidth(name):
    t = get_target(name)
    topo = Topology.of(t)
    for n in _groups(min(t.scale_up_domain, 4096)):
        for op in (Op.ALL_REDUCE, Op.ALL_GATHER):
            bw = _busbw(topo.time(op, 1e10, n), op, 1e10, n)
            assert bw <= t.scale_up_bandwidth * (1 + 1e-9), (name, n, op, bw / 1e9)


@pytest.mark.parametrize("name", [n for n, _ in systems()])
def test_no_group_of_a_system_runs_above_its_scale_up_level(name):
    s = get_system(name)
    if s.scale_up is None:
        return
    topo = Topology.of_system(s)
    for n in _groups(s.scale_up_domain):
        bw = _busbw(topo.time(Op.ALL_GATHER, 1e10, n), Op.ALL_GATHER, 1e10, n)
        assert bw <= s.scale_up.bandwidth * (1 + 1e-9), (name, n, bw / 1e9)


# -- 4. groups larger than the machine --------------------------------------------------------------

def test_a_group_larger_than_a_slice_without_scale_out_is_refused():
    topo = Topology.of_system(get_system("tpu-v4-2x2x2"))
    assert topo.time(Op.ALL_REDUCE, 1e9, 8).seconds > 0
    for n in (16, 64, 512):
        with pytest.raises(PlanError, match="does not fit tpu-v4-2x2x2, which has 8 devices"):
            topo.time(Op.ALL_REDUCE, 1e9, n)
    with pytest.raises(PlanError, match="4 devices 4 ranks apart"):
        topo.time(Op.ALL_GATHER, 1e9, 4, 4)
    # a system with a scale-out level takes the rest over its network, as before
    assert Topology.of_system(get_system("dgx-h100")).time(Op.ALL_REDUCE, 1e9, 64).seconds > 0
