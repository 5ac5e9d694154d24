"""A constant pad on the CPU pays its measured cost per contiguous input row (PyTorch copies the input
into the filled output's interior one run at a time): the runs counted by hand, the time added, and
the per-row cost fitted from two row lengths."""

from __future__ import annotations

import dataclasses

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.calibration.pad_sweep import pad_row_time
from narrowpipe.calibration.sweeps import Measurement
from narrowpipe.costmodel.execution.cpu import pad_rows
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.kernels import Kernel
from narrowpipe.ir import DType, Graph, Op, TensorType


def _cpu(**fields: object) -> narrowpipe.backends.Target:
    epyc = get_target("epyc-9755")
    sources = {**epyc.sources, **{k: "assumption: test" for k in fields}}
    return dataclasses.replace(epyc, sources=sources, **fields)


def pad_graph(src: tuple[int, ...], dst: tuple[int, ...]) -> Graph:
    g = Graph("pad")
    x = g.add_input("x", TensorType(DType.FP32, src))
    g.set_outputs(g.add_node(Op.PAD, [x], [TensorType(DType.FP32, dst)]).outputs)
    return g


@pytest.mark.parametrize(("src", "dst", "rows"), [
    ((1, 960, 7, 7), (1, 960, 8, 8), 960 * 7),       # last dim padded: one run per row
    ((1, 64, 56, 56), (1, 64, 58, 58), 64 * 56),
    ((2, 3, 10, 10), (2, 3, 12, 10), 2 * 3),         # only H padded: each 10x10 plane is one run
    ((1, 64, 56, 56), (1, 64, 56, 56), 0),           # nothing padded: a clone
])
def test_pad_runs_are_counted_below_the_innermost_padded_dim(src, dst, rows):
    g = pad_graph(src, dst)
    table = interpret(g, {})
    (node,) = g.nodes
    assert pad_rows(Kernel("pad", "elementwise", [node], node, table.costs[node]), table) == rows


def test_a_pad_pays_its_rows_at_the_target_cost_per_row():
    g = pad_graph((1, 960, 7, 7), (1, 960, 8, 8))
    plain = narrowpipe.analyze(g, _cpu(), eager_overhead=False)
    padded = narrowpipe.analyze(g, _cpu(pad_row_time=3e-9), eager_overhead=False)
    assert padded.time_s == pytest.approx(plain.time_s + 960 * 7 * 3e-9)


def test_the_row_cost_is_the_time_difference_over_the_row_difference():
    ms = [Measurement("pad_rows", "fp32", (3584, 56), 0, 0, 20e-6),
          Measurement("pad_rows", "fp32", (28672, 7), 0, 0, 95.264e-6)]
    assert pad_row_time(ms) == pytest.approx((95.264e-6 - 20e-6) / (28672 - 3584))
    assert pad_row_time(ms[:1]) is None
    assert pad_row_time([ms[1], dataclasses.replace(ms[0], seconds=1.0)]) == 0.0   # never negative


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])     # ONNX Pad's modes (wrap: circular, opset 19)
def test_reflection_replication_and_circular_pads_have_no_interior_copy(mode):
    g = Graph("pad")
    x = g.add_input("x", TensorType(DType.FP32, (1, 8, 7, 7)))
    g.set_outputs(g.add_node(Op.PAD, [x], [TensorType(DType.FP32, (1, 8, 9, 9))], {"mode": mode}).outputs)
    table = interpret(g, {})
    (node,) = g.nodes
    assert pad_rows(Kernel("pad", "elementwise", [node], node, table.costs[node]), table) == 0
