"""Collective algorithms (alpha-beta) against hand computations and published pod figures.

Hand numbers pin each formula; the pod checks compare a prediction built from per-link figures
(SB-TPU: 4.5e10 B/s one way per ICI link) with the vendor's separately published aggregate
all-reduce bandwidth of the whole pod (GCP's TPU pages), so they are not the input restated."""

from __future__ import annotations

import pytest

from narrowpipe.backends import get_system, get_target
from narrowpipe.costmodel.execution.algorithms import bus_factor, hierarchical, in_network, ring, torus, tree
from narrowpipe.costmodel.execution.collectives import NetLevel, Topology
from narrowpipe.ir import Op

GiB = 1 << 30


def test_ring_all_reduce_moves_two_n_minus_one_over_n_of_the_buffer_in_two_n_minus_one_steps():
    t = ring(Op.ALL_REDUCE, 8e9, 8, 100e9, 5e-6)
    assert t.latency_s == pytest.approx(14 * 5e-6)
    assert t.transfer_s == pytest.approx(2 * 7 / 8 * 8e9 / 100e9)          # 0.14 s
    assert ring(Op.ALL_GATHER, 8e9, 8, 100e9, 5e-6).seconds == pytest.approx(7 * 5e-6 + 7 / 8 * 8e9 / 100e9)
    assert ring(Op.SEND, 1e9, 2, 100e9, 5e-6).seconds == pytest.approx(5e-6 + 1e9 / 100e9)
    assert bus_factor(Op.ALL_REDUCE, 1) == 0.0


def test_tree_wins_on_small_messages_over_many_devices_and_ring_on_large_ones():
    small_ring, small_tree = ring(Op.ALL_REDUCE, 64e3, 64, 50e9, 5e-6), tree(Op.ALL_REDUCE, 64e3, 64, 50e9, 5e-6)
    assert small_tree.seconds < small_ring.seconds                     # 12 steps against 126
    big_ring, big_tree = ring(Op.ALL_REDUCE, 1e9, 64, 50e9, 5e-6), tree(Op.ALL_REDUCE, 1e9, 64, 50e9, 5e-6)
    assert big_ring.seconds < big_tree.seconds                          # 2 x 63/64 against 2 x the buffer
    assert tree(Op.ALL_GATHER, 1e9, 64, 50e9, 5e-6) is None


def test_in_network_reduction_sends_the_buffer_once_and_a_measured_busbw_is_the_bus_volume_rate():
    assert in_network(Op.ALL_REDUCE, 1e9, 8, 450e9, 3e-6).seconds == pytest.approx(2 * 3e-6 + 1e9 / 450e9)
    measured = in_network(Op.ALL_REDUCE, 16 * GiB, 8, 450e9, 3e-6, measured_busbw=480e9)
    assert 2 * 7 / 8 * 16 * GiB / measured.transfer_s == pytest.approx(480e9)


def test_hierarchical_all_reduce_is_intra_reduce_scatter_inter_shard_all_reduce_intra_all_gather():
    t = hierarchical(Op.ALL_REDUCE, 8e9, 8, 4, 400e9, 3e-6, 50e9, 5e-6)
    intra = 7 * 3e-6 + 7 / 8 * 8e9 / 400e9
    inter = 6 * 5e-6 + 2 * 3 / 4 * 1e9 / 50e9
    assert t.seconds == pytest.approx(2 * intra + inter)


def test_dgx_h100_all_reduce_inside_the_node_uses_nvls_and_across_nodes_rings_through_every_nic():
    """Across 4 nodes NCCL runs one ring per channel, each crossing nodes through its own NIC: 8 x 50
    GB/s per node, so the ring runs at the node's NVLink ring bus bandwidth (370 GB/s), faster than
    the two-level form run step after step (228 GB/s) and than a ring through one NIC (50 GB/s)."""
    topo = Topology.of_system(get_system("dgx-h100").replicate(4))
    inside = topo.time(Op.ALL_REDUCE, 16 * GiB, 8)
    assert inside.algorithm == "in-network"
    assert 2 * 7 / 8 * 16 * GiB / inside.seconds == pytest.approx(480e9, rel=1e-3)
    across = topo.time(Op.ALL_REDUCE, 16 * GiB, 32)
    assert across.algorithm == "ring"
    assert 2 * 31 / 32 * 16 * GiB / across.seconds == pytest.approx(370e9, rel=0.01)
    two_level = hierarchical(Op.ALL_REDUCE, 16 * GiB, 8, 4, 370e9, 3e-6, 50e9, 5e-6)
    assert two_level is not None and across.seconds < two_level.seconds
    assert across.seconds < ring(Op.ALL_REDUCE, 16 * GiB, 32, 50e9, 5e-6).seconds


def test_dgx_a100_has_no_in_network_reduction_and_runs_at_its_measured_ring_busbw():
    t = Topology.of_system(get_system("dgx-a100")).time(Op.ALL_REDUCE, 16 * GiB, 8)
    assert t.algorithm == "ring"
    assert 2 * 7 / 8 * 16 * GiB / t.seconds == pytest.approx(234.9e9, rel=1e-3)


@pytest.mark.parametrize("target, chips, published", [
    ("tpu-v4", 4096, 1.1e15),      # GCP-V4: all-reduce bandwidth per pod 1.1 PB/s
    ("tpu-v5e", 256, 51.2e12),     # GCP-V5E: all-reduce bandwidth per pod 51.2 TB/s
])
def test_whole_pod_all_reduce_bandwidth_matches_the_published_pod_figure(target, chips, published):
    topo = Topology.of(get_target(target))
    size = 64 * GiB
    t = topo.time(Op.ALL_REDUCE, size, chips)
    per_chip_busbw = bus_factor(Op.ALL_REDUCE, chips) * size / t.seconds
    assert per_chip_busbw * chips == pytest.approx(published, rel=0.05)


def test_the_v5e_pod_system_runs_its_all_reduce_at_the_measured_ici_rate_not_the_pod_peak():
    """GCP-V5E's 51.2 TB/s is the links' peak (256 chips x 200 GB/s, the chip fields above); the
    system file runs at what TPU v5e ICI was measured to reach (SB-SHARD: 0.82 of 4 x 45 GB/s per
    chip, 148 GB/s): 256 x 148 GB/s = 37.9 TB/s."""
    topo = Topology.of_system(get_system("tpu-v5e-256"))
    t = topo.time(Op.ALL_REDUCE, 64 * GiB, 256)
    assert bus_factor(Op.ALL_REDUCE, 256) * 64 * GiB / t.seconds * 256 == pytest.approx(256 * 148e9, rel=0.01)


def test_a_torus_group_on_one_axis_gets_that_axis_two_links_and_the_whole_torus_all_of_them():
    level = NetLevel(270e9, 1e-6, torus_dims=(4, 4, 4), links=6)
    topo = Topology(64, level)
    one_axis = topo.time(Op.ALL_GATHER, 1e9, 4)
    assert one_axis.transfer_s == pytest.approx(3 / 4 * 1e9 / 90e9)
    whole = topo.time(Op.ALL_GATHER, 1e9, 64)
    assert whole.transfer_s == pytest.approx(63 / 64 * 1e9 / 270e9)
    # with wraparound each shard goes both ways: 2 hops reach the far side of an axis of 4 (SB-TPU
    # sharding.md question 3: "we can do the full gather in only 2 hops" on a v4 4x4x4)
    assert whole.latency_s == pytest.approx(3 * 2 * 1e-6)
    assert topo.time(Op.ALL_REDUCE, 1e9, 64).latency_s == pytest.approx(2 * 3 * 2 * 1e-6)
    one = torus(Op.ALL_TO_ALL, 1e9, (4,), 45e9, 1e-6)          # one axis of 4: 2 hops; 4/4 of the
    assert one.latency_s == pytest.approx(2e-6)                 # buffer crosses the ring's two cuts
    assert one.transfer_s == pytest.approx(1e9 / 90e9)


def test_a_torus_all_to_all_exchanges_along_one_axis_after_another():
    """Dimension-ordered: 2 + 2 + 2 hops on a 4x4x4 cube, not the 63 steps of a ring over 64 devices;
    per axis the bisection carries 4/4 of a buffer each way over the ring's two cuts."""
    t = torus(Op.ALL_TO_ALL, 64e3, (4, 4, 4), 45e9, 1e-6)
    assert t.latency_s == pytest.approx(6e-6)
    assert t.transfer_s == pytest.approx(3 * 64e3 / 90e9)
    small = torus(Op.ALL_TO_ALL, 64e3, (2,), 45e9, 1e-6)        # a pair: half the buffer, one hop
    assert small.seconds == pytest.approx(1e-6 + 64e3 / 2 / 90e9)


def test_a_mesh_axis_needs_k_minus_one_hops_and_runs_at_half_a_torus_rate():
    """A slice smaller than a cube has no wraparound links (SB-TPU): the busiest link of a line of 4
    carries 3/4 of the buffer one way, so the transfer takes twice a ring's, in 3 hops, not 2."""
    ring4 = torus(Op.ALL_GATHER, 1e6, (4,), 45e9, 1e-6)
    line4 = torus(Op.ALL_GATHER, 1e6, (4,), 45e9, 1e-6, wrap=False)
    assert line4.algorithm == "mesh"
    assert line4.transfer_s == pytest.approx(3 / 4 * 1e6 / 45e9) == pytest.approx(2 * ring4.transfer_s)
    assert (line4.latency_s, ring4.latency_s) == (pytest.approx(3e-6), pytest.approx(2e-6))
    a2a = torus(Op.ALL_TO_ALL, 1e6, (4,), 45e9, 1e-6, wrap=False)
    assert a2a.transfer_s == pytest.approx(1e6 / 45e9)           # 4/4 of a buffer over one cut


def test_mesh_slices_load_as_meshes_and_the_cube_as_a_torus():
    assert not any(Topology.of_system(get_system("tpu-v4-2x2x4")).scale_up.wraparound)
    assert not any(Topology.of_system(get_system("tpu-v4-2x2x2")).scale_up.wraparound)
    assert all(Topology.of_system(get_system("tpu-v4-4x4x4")).scale_up.wraparound)


def test_the_v4_ici_figures_reproduce_the_measured_v5e_gathers_they_come_from():
    """SB-SHARD's two profiles on a v5e axis of 4 without wraparound (same 4.5e10 B/s links): a
    34 MB gather measured ~680 us, 32 kB shards 'closer to 8us'; the v4 2x2x4 mesh's long axis is
    such an axis, and a collective op pays the target's launch overhead on top (as ws2d adds it)."""
    topo = Topology.of_system(get_system("tpu-v4-2x2x4"))
    launch = get_target("tpu-v4").launch_overhead
    big = topo.time(Op.ALL_GATHER, 34e6, 4, axes=(4,)).seconds + launch
    small = topo.time(Op.ALL_GATHER, 4 * 32e3, 4, axes=(4,)).seconds + launch
    assert big == pytest.approx(680e-6, rel=0.05)
    assert small == pytest.approx(8e-6, rel=0.05)


def test_explicit_axes_must_hold_the_group():
    topo = Topology.of_system(get_system("tpu-v4-4x4x4"))
    assert topo.time(Op.ALL_GATHER, 1e6, 16, axes=(4, 4)).seconds == pytest.approx(
        topo.time(Op.ALL_GATHER, 1e6, 16).seconds)
    with pytest.raises(ValueError, match="do not hold"):
        topo.time(Op.ALL_GATHER, 1e6, 16, axes=(4,))


def test_a_strided_group_on_a_torus_takes_the_outer_axes_with_wraparound_hops():
    """The planner's outer group (16 members 4 ranks apart on a 4x4x4 cube) skips the axis the inner
    groups fill and runs on the other two, like ws2d's named ``yz`` axes: 2 + 2 hops of 1.45 us
    (wraparound, SB-SHARD's per-hop figure), 15/16 of the buffer over both links of two axes, each
    link 221/6 GB/s (the cube's measured bus bandwidth over its 6 links)."""
    topo = Topology.of_system(get_system("tpu-v4-4x4x4"))
    strided = topo.time(Op.ALL_GATHER, 1e8, 16, 4)
    assert strided.latency_s == pytest.approx(4 * 1.45e-6)
    assert strided.transfer_s == pytest.approx(15 / 16 * 1e8 / (2 * 2 * 221e9 / 6))
    assert strided.seconds == pytest.approx(topo.time(Op.ALL_GATHER, 1e8, 16, axes=(4, 4)).seconds)
    assert topo.link(16, 4).bandwidth == pytest.approx(4 * 221e9 / 6)


def test_a_strided_group_on_a_mesh_slice_pays_k_minus_one_hops_and_one_link_per_axis():
    """On the 2x2x4 mesh (no wraparound) 8 members 2 ranks apart span the axes of 2 and 4: 1 + 3 hops,
    7/8 of the buffer over one link per axis (148/4 GB/s each); the inner pair, 1 hop on one link."""
    topo = Topology.of_system(get_system("tpu-v4-2x2x4"))
    outer = topo.time(Op.ALL_GATHER, 1e8, 8, 2)
    assert outer.algorithm == "mesh"
    assert outer.latency_s == pytest.approx(4 * 1.45e-6)
    assert outer.transfer_s == pytest.approx(7 / 8 * 1e8 / (2 * 148e9 / 4))
    assert outer.seconds == pytest.approx(topo.time(Op.ALL_GATHER, 1e8, 8, axes=(2, 4)).seconds)
    inner = topo.time(Op.ALL_GATHER, 1e8, 2, 1)
    assert inner.seconds == pytest.approx(1.45e-6 + 1 / 2 * 1e8 / (148e9 / 4))
    # 4 members 4 ranks apart: the long axis alone (3 hops, one link), not the two short axes that
    # 4 contiguous ranks fill (1 + 1 hops over two links)
    long_axis, short_axes = topo.time(Op.ALL_GATHER, 1e8, 4, 4), topo.time(Op.ALL_GATHER, 1e8, 4, 1)
    assert long_axis.seconds == pytest.approx(3 * 1.45e-6 + 3 / 4 * 1e8 / (148e9 / 4))
    assert short_axes.seconds == pytest.approx(2 * 1.45e-6 + 3 / 4 * 1e8 / (2 * 148e9 / 4))


def test_a_collective_permute_is_one_hop_on_one_link_of_its_axis():
    """A looped collective matmul's step (XLA collective-permute, the released collectives.py's
    ppermute): every chip sends its buffer to the next along one axis. On the 4x4x4 torus one hop
    (1.45 us) on one link (221/6 GB/s); on the 2x2x4 mesh's axis of 4 the shift's wrapping buffer walks
    back over the 3 links of the line."""
    cube, mesh = Topology.of_system(get_system("tpu-v4-4x4x4")), Topology.of_system(get_system("tpu-v4-2x2x4"))
    assert cube.time(Op.COLLECTIVE_PERMUTE, 1e6, 4, axes=(4,)).seconds == pytest.approx(1.45e-6 + 1e6 / (221e9 / 6))
    assert mesh.time(Op.COLLECTIVE_PERMUTE, 1e6, 4, axes=(4,)).seconds == pytest.approx(3 * 1.45e-6 + 1e6 / (148e9 / 4))
    assert mesh.time(Op.COLLECTIVE_PERMUTE, 1e6, 2, axes=(2,)).seconds == pytest.approx(1.45e-6 + 1e6 / (148e9 / 4))
