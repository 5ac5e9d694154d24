"""The execution-model interface: every family turns a Program on a DeviceGroup into a Schedule whose
parts agree (times add up, every kernel placed, memory and fit stated), and collectives are priced
on a topology by one function."""

from __future__ import annotations

import dataclasses
import math

import pytest

from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution import DeviceGroup, Program, Schedule, TimingOptions, model_for
from narrowpipe.costmodel.execution.collectives import NetLevel, Topology, collective_seconds
from narrowpipe.costmodel.execution.common import causal_fraction
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.timing import fused_program, time_program
from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind

FAMILY_TARGETS = ["h100", "tpu-v5e", "xeon-6980p", "groq-lpu"]


def mlp_graph(m: int = 64, d: int = 1024, dtype: DType = DType.FP16) -> Graph:
    """x @ w1 -> exp -> @ w2: two GEMMs and a vector kernel between them."""
    g = Graph("mlp")
    x = g.add_input("x", TensorType(dtype, (m, d)))
    w1 = g.add_input("w1", TensorType(dtype, (d, d)), ValueKind.PARAM)
    w2 = g.add_input("w2", TensorType(dtype, (d, d)), ValueKind.PARAM)
    h = g.add_node(Op.DOT, [x, w1], [TensorType(dtype, (m, d))], {"lhs_contract": (1,), "rhs_contract": (0,)})
    e = g.add_node(Op.EXP, [h.outputs[0]], [TensorType(dtype, (m, d))])
    y = g.add_node(Op.DOT, [e.outputs[0], w2], [TensorType(dtype, (m, d))],
                   {"lhs_contract": (1,), "rhs_contract": (0,)})
    g.set_outputs(y.outputs)
    return g


def program_on(graph: Graph, target_name: str) -> tuple[Program, Schedule]:
    target = get_target(target_name)
    program = fused_program(interpret(graph, {}), target, TimingOptions())
    return program, model_for(target).run(program, DeviceGroup(target))


@pytest.mark.parametrize("name", FAMILY_TARGETS)
def test_every_family_returns_a_schedule_whose_parts_agree(name):
    program, s = program_on(mlp_graph(), name)
    assert isinstance(s, Schedule)
    assert len(s.times) == len(program.kernels)
    assert s.total_s > 0
    assert sum(t.time_s for t in s.times) == pytest.approx(s.total_s, rel=1e-9)
    assert set(s.placement) == {k.name for k in program.kernels}
    assert all(0 <= d < s.devices for d in s.placement.values())
    assert s.memory_required == program.memory_required
    assert s.memory_per_device == pytest.approx(s.memory_required / s.devices)
    assert s.fits and s.devices_needed >= 1
    assert all(t.bound in ("compute", "memory", "interconnect", "overhead") for t in s.times)


@pytest.mark.parametrize("name", ["h100", "tpu-v5e", "xeon-6980p"])
def test_single_device_families_return_a_one_device_schedule(name):
    _, s = program_on(mlp_graph(), name)
    assert s.devices == 1 and set(s.placement.values()) == {0}
    assert s.to_dict() == {}                                  # nothing family-specific to report
    assert s.capacity_per_device == get_target(name).memory_capacity


def test_a_program_larger_than_one_gpu_says_how_many_would_hold_it():
    h100 = get_target("h100")
    program, s = program_on(mlp_graph(d=65536, m=8), "h100")  # 17 GB of fp16 weights: fits 80 GB
    assert s.fits
    big = dataclasses.replace(h100, memory_capacity=4e9)
    s = model_for(big).run(program, DeviceGroup(big))
    assert not s.fits and s.devices_needed == math.ceil(program.memory_required / 4e9)
    assert any(n.startswith("does not fit") for n in s.notes)


def test_dataflow_places_kernels_in_order_over_the_chips_it_needs():
    groq = get_target("groq-lpu")
    program, s = program_on(mlp_graph(d=8192, m=64), "groq-lpu")   # 2 x 128 MiB of weights > 230 MB SRAM
    need = math.ceil(program.memory_required / groq.memory_capacity)
    assert s.devices == s.devices_needed == need >= 2
    chips = [s.placement[k.name] for k in program.kernels]
    assert chips == sorted(chips) and chips[0] == 0 and chips[-1] == need - 1
    assert s.to_dict()["chip_of_kernel"] == s.placement
    assert s.memory_capacity == groq.memory_capacity * need and s.fits


def test_a_device_group_smaller_than_the_layout_does_not_fit():
    program, _ = program_on(mlp_graph(d=8192, m=64), "groq-lpu")
    s = time_program(program, DeviceGroup(get_target("groq-lpu"), 1))
    assert not s.fits
    assert any("more than the 1 chip given: it does not fit" in n for n in s.notes)


def test_collective_picks_scale_up_inside_the_domain_and_scale_out_beyond():
    topo = Topology(8, NetLevel(400e9, 2e-6), NetLevel(50e9, 2e-6))
    # all-reduce of a 1 GB bus volume (the rules' comm bytes) over 8: ring, 2(n-1) steps of latency
    inside, link = collective_seconds(Op.ALL_REDUCE, 1e9, 8, topo)
    assert link.intra and link.bandwidth == 400e9
    assert inside == pytest.approx(14 * 2e-6 + 1e9 / 400e9, rel=1e-12)      # 2.528 ms
    # 16 devices = 2 domains. NCCL's rings (one per channel) each cross between the domains through
    # their own NIC, so a member's ring rate is capped by its 400 GB/s link and by its domain's 8
    # NICs x 50 GB/s = 400 GB/s together: one ring over 16 at 400 GB/s, 30 steps of latency.
    beyond, link = collective_seconds(Op.ALL_REDUCE, 1e9, 16, topo)
    assert not link.intra and link.bandwidth == 50e9
    assert beyond == pytest.approx(30 * 2e-6 + 1e9 / 400e9, rel=1e-12)       # 2.56 ms
    # the two-level form (reduce-scatter inside, all-reduce of the 1/8 shard across, all-gather
    # inside) is slower here, run one after the other: 3.70 ms
    size = 1e9 / (2 * 15 / 16)
    two_level = 2 * (7 * 2e-6 + 7 / 8 * size / 400e9) + (2 * 2e-6 + size / 8 / 50e9)
    assert two_level > beyond
    # with 4 NICs' worth per domain (25 GB/s each: 200 GB/s) the ring runs at 200 GB/s
    thin = Topology(8, NetLevel(400e9, 2e-6), NetLevel(25e9, 2e-6))
    ring16, _ = collective_seconds(Op.ALL_REDUCE, 1e9, 16, thin)
    two_thin = 2 * (7 * 2e-6 + 7 / 8 * size / 400e9) + (2 * 2e-6 + size / 8 / 25e9)
    assert ring16 == pytest.approx(min(30 * 2e-6 + 1e9 / 200e9, two_thin), rel=1e-12)
    # an all-to-all is no ring: each member's off-domain share (8 of its 15 peers' 1/16 each) leaves
    # through its own 50 GB/s NIC, the 7 in its domain get theirs over NVLink meanwhile; 1e9 bytes
    # sent per device is a 16/15 GB buffer
    a2a, _ = collective_seconds(Op.ALL_TO_ALL, 1e9, 16, topo)
    assert a2a == pytest.approx(15 * 2e-6 + 1e9 * 16 / 15 * 8 / 16 / 50e9, rel=1e-12)
    gather, _ = collective_seconds(Op.ALL_GATHER, 1e9, 8, topo)
    assert gather == pytest.approx(7 * 2e-6 + 1e9 / 400e9, rel=1e-12)


def test_torus_rings_run_on_the_two_links_of_each_axis_they_span():
    # a 16x16 torus with 4 links of 50 GB/s: a reduce-scatter over one axis (16 chips) is a
    # bidirectional ring on 2 links = 100 GB/s; with wraparound each shard goes both ways, 8 hops
    topo = Topology(256, NetLevel(200e9, 1e-6, torus_dims=(16, 16), links=4), NetLevel(25e9, 5e-6))
    inside, link = collective_seconds(Op.REDUCE_SCATTER, 15 / 16 * 1e9, 16, topo)
    assert link.bandwidth == 100e9
    assert inside == pytest.approx(8e-6 + 15 / 16 * 1e9 / 100e9, rel=1e-12)
    # the whole torus: both axes' rings busy at once, on all 4 links; 8 hops along each axis
    whole, link = collective_seconds(Op.REDUCE_SCATTER, 255 / 256 * 1e9, 256, topo)
    assert link.bandwidth == 200e9
    assert whole == pytest.approx(16e-6 + 255 / 256 * 1e9 / 200e9, rel=1e-12)


def test_a_target_without_scale_out_uses_its_scale_up_link_beyond_the_domain():
    topo = Topology(8, NetLevel(400e9, 0.0))
    assert topo.link(64).bandwidth == 400e9 and not topo.link(64).intra


def test_topology_of_a_tpu_is_a_torus_and_of_a_gpu_is_not():
    assert Topology.of(get_target("tpu-v5e")).torus
    assert not Topology.of(get_target("h100")).torus


def test_causal_skip_counts_query_blocks_on_and_below_the_diagonal():
    assert causal_fraction(True, 1024, 1024, 128) == 9 / 16       # 8 blocks: 36 of 64 run
    assert causal_fraction(True, 128, 128, 128) == 1.0            # one block: all of it runs (masked)
    assert causal_fraction(True, 1, 1024, 128) == 1.0             # decode: not square
    assert causal_fraction(False, 1024, 1024, 128) == 1.0


@pytest.mark.parametrize("name", ["h100", "groq-lpu"])
def test_the_report_timing_is_the_schedule_summarized(name):
    import narrowpipe
    graph = mlp_graph(d=8192)
    program, s = program_on(graph, name)
    t = narrowpipe.analyze(graph, name).timing
    assert (t.time_s, t.devices, t.fits, t.devices_needed) == (s.total_s, s.devices, s.fits, s.devices_needed)
    assert (t.memory_required, t.memory_capacity, t.plan) == (s.memory_required, s.memory_capacity, s.to_dict())
    assert t.kernels == sum(1 for k in program.kernels if not k.is_free)
