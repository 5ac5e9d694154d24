"""Hand-computed check of MIOpen's GEMM path for a 1x1 stride-2 layer (issue 12 round 5): one GEMM
between two layout transposes on MI25 (484 GB/s HBM2, AMD-MI25), with their bytes and launches."""

from __future__ import annotations

import dataclasses

import pytest

from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution import TimingOptions
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.timing import fused_program, time_program
from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind


def _conv(n, c, h, w, k, r, s, stride, pad=(0, 0)) -> Graph:
    oh, ow = (h + 2 * pad[0] - r) // stride + 1, (w + 2 * pad[1] - s) // stride + 1
    attrs = {"stride": (stride, stride), "padding": pad, "dilation": (1, 1), "groups": 1,
             "output_padding": (0, 0), "transposed": False}
    g = Graph("conv")
    x = g.add_input("x", TensorType(DType.FP32, (n, c, h, w)))
    wv = g.add_input("w", TensorType(DType.FP32, (k, c, r, s)), ValueKind.PARAM)
    node = g.add_node(Op.CONV, [x, wv], [TensorType(DType.FP32, (n, k, oh, ow))], attrs)
    g.set_outputs(node.outputs)
    return g


def _mi25(**changes):
    base = dict(matmul_curve=(), bandwidth_curve=(), matmul_skinny_curve=(), gemm_epilogue_exposed=0.0,
                gemm_wave_overhead=0.0)
    target = get_target("mi25")
    sources = {k: v for k, v in target.sources.items() if changes.get(k, 0) is not None}
    return dataclasses.replace(target, **{**base, **changes}, sources=sources)


def _kernel(g: Graph, target):
    table = interpret(g, {})
    return time_program(fused_program(table, target, TimingOptions()), target).times[-1]


def test_mi25_runs_a_1x1_stride_2_layer_between_two_transposes():
    """MIOpen's GEMM path for a 1x1 stride-2 layer (256 -> 512 channels, 28 x 28, batch 8): the
    transpose reads x's sampled rows (half of x, 6.42 MB) and writes x_t (a quarter, 1.61 MB), the
    GEMM reads x_t and W (0.52 MB) and writes y_t (3.21 MB), the second transpose reads y_t and
    writes y: 2 more launches; the GEMM's FLOPs are the layer's."""
    mb = 8 * 256 * 28 * 28 * 4, 8 * 256 * 14 * 14 * 4, 512 * 256 * 4, 8 * 512 * 14 * 14 * 4   # x, x_t, W, y
    x, x_t, w, y = mb
    g = _conv(8, 256, 28, 28, 512, 1, 1, 2)
    t = _kernel(g, _mi25())
    assert "layout transposes" in t.note
    bw = 484e9 * 0.85                      # AMD-MI25 HBM2 x the catalog's memory efficiency
    assert t.memory_s == pytest.approx((x // 2 + x_t + y + y) / bw + (x_t + w + y) / bw, rel=1e-6)
    assert t.executed_flops >= 2 * 8 * 14 * 14 * 512 * 256
    without = _kernel(g, _mi25(conv_gemm_1x1_stride2=None))
    assert "transposes" not in without.note
    assert t.overhead_s == pytest.approx(without.overhead_s + 2 * 1e-6, rel=1e-9)     # two more launches
    assert t.time_s > without.time_s
    # stride 1 and padded 1x1 layers keep the implicit GEMM
    assert "transposes" not in _kernel(_conv(8, 256, 28, 28, 512, 1, 1, 1), _mi25()).note
    assert "transposes" not in _kernel(_conv(8, 256, 28, 28, 512, 1, 1, 2, pad=(1, 1)), _mi25()).note
