"""A constant pad of two or more dims also pays a measured cost per outer-loop plane (the copy into
the output's interior cannot merge the dims above the second innermost padded one into its 2-D
loop): the planes counted by hand, the time added, and the per-plane cost fitted from a 4-D and a
2-D pad of the same rows."""

from __future__ import annotations

import dataclasses

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.calibration.pad_sweep import PAD_PLANES, PAD_ROWS, pad_plane_time
from narrowpipe.calibration.sweeps import Measurement
from narrowpipe.costmodel.execution.cpu import pad_planes
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.kernels import Kernel
from narrowpipe.ir import DType, Graph, Op, TensorType


def pad_graph(src: tuple[int, ...], dst: tuple[int, ...]) -> Graph:
    g = Graph("pad")
    x = g.add_input("x", TensorType(DType.FP32, src))
    g.set_outputs(g.add_node(Op.PAD, [x], [TensorType(DType.FP32, dst)]).outputs)
    return g


def _cpu(**fields: object) -> narrowpipe.backends.Target:
    epyc = get_target("epyc-9755")
    sources = {**epyc.sources, **{k: "assumption: test" for k in fields}}
    return dataclasses.replace(epyc, sources=sources, **fields)


@pytest.mark.parametrize(("src", "dst", "planes"), [
    ((1, 960, 7, 7), (1, 960, 9, 9), 960),                # H and W padded: one step per N x C plane
    ((2, 64, 56, 56), (2, 64, 57, 57), 2 * 64),
    ((2, 4, 6, 8, 8), (2, 4, 8, 10, 10), 2 * 4 * 6),      # D, H, W padded: the H x W loop per N x C x D
    ((1, 960, 7, 7), (1, 960, 7, 8), 0),                  # only W padded: N, C, H merge into the rows
    ((2, 3, 10, 10), (2, 3, 12, 10), 0),                  # only H padded
    ((1, 64, 56, 56), (1, 64, 56, 56), 0),                # nothing padded
])
def test_pad_planes_are_counted_above_the_second_innermost_padded_dim(src, dst, planes):
    g = pad_graph(src, dst)
    table = interpret(g, {})
    (node,) = g.nodes
    assert pad_planes(Kernel("pad", "elementwise", [node], node, table.costs[node]), table) == planes


def test_a_pad_of_two_dims_pays_its_rows_and_its_planes():
    g = pad_graph((1, 960, 7, 7), (1, 960, 9, 9))
    plain = narrowpipe.analyze(g, _cpu(), eager_overhead=False)
    rows = narrowpipe.analyze(g, _cpu(pad_row_time=3e-9), eager_overhead=False)
    both = narrowpipe.analyze(g, _cpu(pad_row_time=3e-9, pad_plane_time=1e-8), eager_overhead=False)
    assert rows.time_s == pytest.approx(plain.time_s + 960 * 7 * 3e-9)
    assert both.time_s == pytest.approx(plain.time_s + 960 * 7 * 3e-9 + 960 * 1e-8)
    one_dim = pad_graph((1, 960, 7, 7), (1, 960, 7, 8))
    assert narrowpipe.analyze(one_dim, _cpu(pad_row_time=3e-9, pad_plane_time=1e-8), eager_overhead=False).time_s \
        == pytest.approx(narrowpipe.analyze(one_dim, _cpu(pad_row_time=3e-9), eager_overhead=False).time_s)


def test_the_plane_cost_is_the_4d_minus_2d_time_of_the_same_rows_over_the_planes():
    planes, h, w = PAD_PLANES
    assert (planes * h, w) in PAD_ROWS                     # the 2-D measurement has the same rows
    ms = [Measurement("pad_rows", "fp32", (3584, 56), 0, 0, 20e-6),
          Measurement("pad_rows", "fp32", (28672, 7), 0, 0, 60e-6),
          Measurement("pad_planes", "fp32", PAD_PLANES, 0, 0, 100.96e-6)]
    assert pad_plane_time(ms) == pytest.approx((100.96e-6 - 60e-6) / 4096)
    assert pad_plane_time(ms[:2]) is None
    assert pad_plane_time([ms[0], ms[2]]) is None           # no 2-D pad of the same rows
    assert pad_plane_time([ms[1], dataclasses.replace(ms[2], seconds=1e-6)]) == 0.0   # never negative
