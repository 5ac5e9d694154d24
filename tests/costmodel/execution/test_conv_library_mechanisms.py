"""Hand-computed checks of the convolution mechanisms of issue 12 round 3: the library's direct
convolution on the vector units, the zero fill of a strided data gradient (and, round 8, the plateau
of cuDNN's strided fp32 data-gradient kernels), and non-fused Winograd weight gradients running as
ordinary batched GEMMs. Targets are catalog GPUs with flat efficiency
curves, so each term is a formula of the shape and the datasheet."""

from __future__ import annotations

import dataclasses

import pytest

from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution import TimingOptions
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.timing import fused_program, time_program
from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind

P100_FP32 = 9.3e12      # NV-P100-PCIE datasheet, FP32 TFLOP/s


def _flat(name: str, **changes):
    base = dict(matmul_curve=(), bandwidth_curve=(), matmul_skinny_curve=(), gemm_epilogue_exposed=0.0,
                gemm_wave_overhead=0.0)
    target = get_target(name)
    sources = {k: v for k, v in target.sources.items() if changes.get(k, 0) is not None}
    return dataclasses.replace(target, **{**base, **changes}, sources=sources)


def _kernel(graph: Graph, target):
    table = interpret(graph, {})
    return time_program(fused_program(table, target, TimingOptions()), target).times[-1]


def _grad(role: str, n: int, c: int, hw: int, k: int, r: int, stride: int = 1,
          dtype: DType = DType.FP32) -> Graph:
    """The data (``grad_input``) or weight (``grad_weight``) gradient of an r x r convolution with
    padding r // 2, as the kernel benchmark builds it."""
    p = (hw + 2 * (r // 2) - r) // stride + 1
    attrs = {"stride": (stride, stride), "padding": (r // 2, r // 2), "dilation": (1, 1), "groups": 1,
             "output_padding": (0, 0)}
    x_t, w_t, y_t = (TensorType(dtype, (n, c, hw, hw)), TensorType(dtype, (k, c, r, r)),
                     TensorType(dtype, (n, k, p, p)))
    g = Graph("grad")
    if role == "grad_input":
        dy, w = g.add_input("grad_out", y_t), g.add_input("w", w_t, ValueKind.PARAM)
        node = g.add_node(Op.CONV, [dy, w], [x_t], {**attrs, "transposed": True, "role": role})
    else:
        x, dy = g.add_input("x", x_t), g.add_input("grad_out", y_t)
        node = g.add_node(Op.CONV, [x, dy], [w_t], {**attrs, "transposed": False, "role": role})
    g.set_outputs(node.outputs)
    return g


def test_a_one_channel_data_gradient_runs_as_a_direct_convolution_where_the_library_has_one():
    """dx of a 1-channel 5x5 stride-2 layer (no Winograd): as a GEMM its N is the one input channel,
    padded to P100's narrowest SGEMM tile (128 x 32), 32x the work; the direct kernel does the
    2 x N x P x Q x K x 25 FLOPs (32 x 32 output positions) at its fraction of the FP32 peak, 0.2."""
    g = _grad("grad_input", 4, 1, 64, 32, 5, stride=2)
    flops = 2 * 4 * 32 * 32 * 32 * 25
    t = _kernel(g, _flat("p100-pcie", conv_direct_efficiency=0.2))
    assert "direct convolution" in t.note
    assert t.compute_s == pytest.approx(flops / (P100_FP32 * 0.2), rel=1e-9)
    assert t.executed_flops == flops
    without = _kernel(g, _flat("p100-pcie", conv_direct_efficiency=None))
    assert "direct" not in without.note
    assert without.executed_flops == 32 * flops           # N = 1 padded to the 32-wide tile
    assert without.compute_s > 10 * t.compute_s


def test_a_wide_layer_keeps_the_gemm_when_the_direct_kernel_is_slower():
    """64 -> 64 channels 3x3: the GEMM (or Winograd) runs near the plateau, far above 0.2 of peak."""
    t = _kernel(_grad("grad_input", 8, 64, 28, 64, 3), _flat("p100-pcie", conv_direct_efficiency=0.2))
    assert "direct" not in t.note


def test_a_strided_data_gradient_zero_fills_the_input_gradient_first():
    """1x1 stride-2 dx on P100: the GEMM over the output positions reads dy and W and writes its
    rows into dx, after a fill kernel has written all of dx (3 of its 4 positions get no tap):
    dy + W + 2 x dx bytes, two launches. The stride-1 layer has neither."""
    n, c, hw, k = 8, 64, 28, 128
    dy, w, dx = n * k * 14 * 14 * 4, k * c * 4, n * c * hw * hw * 4
    p100 = _flat("p100-pcie", conv_direct_efficiency=None)
    t = _kernel(_grad("grad_input", n, c, hw, k, 1, stride=2), p100)
    assert "zero fill" in t.note
    bandwidth = p100.memory_bandwidth * p100.memory_efficiency
    # operands fit in the 4 MB L2: no re-reads
    assert t.memory_s == pytest.approx((dy + w + 2 * dx) / bandwidth, rel=1e-9)
    # a convolution kernel pays the convolution library's floor (conv_latency), not cuBLAS's
    assert p100.conv_latency is not None and p100.conv_latency != p100.gemm_latency
    assert t.overhead_s == pytest.approx(2 * p100.launch_overhead + p100.conv_latency)
    s1 = _kernel(_grad("grad_input", n, c, 14, k, 1), p100)
    assert "zero fill" not in s1.note
    assert s1.overhead_s == pytest.approx(p100.launch_overhead + p100.conv_latency)


def test_a_strided_fp32_data_gradient_runs_at_the_strided_data_gradient_plateau():
    """1x1 stride-2 dx on P100 in one 128x128x8 tile shape, 512 <- 1024 channels at 28x28: the GEMM
    over the 16 x 14 x 14 output positions is 25 x 4 = 100 tiles, 2 waves on 56 SMs, each tile
    2 x 128 x 128 x 1024 FLOPs at conv_dgrad_strided_efficiency (0.4) of the fp32 plateau; the zero
    fill's bytes stall both pipes, as before. Stride 1 and tensor-core data gradients keep the plateau."""
    n, c, hw, k = 16, 512, 28, 1024
    dx = n * c * hw * hw * 4
    g = _grad("grad_input", n, c, hw, k, 1, stride=2)
    one_tile = {"tile_shapes": ((128, 128, 8),), "conv_direct_efficiency": None}
    p100 = _flat("p100-pcie", conv_dgrad_strided_efficiency=0.4, **one_tile)
    per_sm = P100_FP32 * p100.matmul_efficiency_fp32 / p100.sm_count
    fill = dx / (p100.memory_bandwidth * p100.memory_efficiency)
    t = _kernel(g, p100)
    assert "zero fill" in t.note and t.bound == "compute"
    assert t.compute_s == pytest.approx(2 * 2 * 128 * 128 * 1024 / (per_sm * 0.4) + fill, rel=1e-9)
    plain = _kernel(g, _flat("p100-pcie", conv_dgrad_strided_efficiency=None, **one_tile))
    assert plain.compute_s == pytest.approx(2 * 2 * 128 * 128 * 1024 / per_sm + fill, rel=1e-9)
    s1 = _grad("grad_input", n, c, 14, k, 1)
    assert _kernel(s1, p100).time_s == pytest.approx(
        _kernel(s1, _flat("p100-pcie", conv_dgrad_strided_efficiency=None, **one_tile)).time_s, rel=1e-12)
    g16 = _grad("grad_input", n, c, hw, k, 1, stride=2, dtype=DType.FP16)
    assert _kernel(g16, _flat("t4", conv_dgrad_strided_efficiency=0.4)).time_s == pytest.approx(
        _kernel(g16, _flat("t4", conv_dgrad_strided_efficiency=None)).time_s, rel=1e-12)


def test_a_winograd_weight_gradient_is_not_slowed_by_the_weight_gradient_plateau():
    """Non-fused Winograd runs its 36 products as a batched GEMM on transformed operands in memory,
    not the implicit-GEMM weight-gradient kernel: the latter's plateau does not apply to it."""
    g = _grad("grad_weight", 16, 256, 28, 512, 3)
    full = _kernel(g, _flat("t4", conv_winograd_wgrad=True, conv_wgrad_efficiency=1.0))
    half = _kernel(g, _flat("t4", conv_winograd_wgrad=True, conv_wgrad_efficiency=0.5))
    assert "Winograd" in full.note and "Winograd" in half.note
    assert half.time_s == pytest.approx(full.time_s, rel=1e-12)


def _conv(n: int, c: int, hw: int, k: int, r: int, stride: int, dtype: DType) -> Graph:
    p = (hw + 2 * (r // 2) - r) // stride + 1
    g = Graph("conv")
    x = g.add_input("x", TensorType(dtype, (n, c, hw, hw)))
    w = g.add_input("w", TensorType(dtype, (k, c, r, r)), ValueKind.PARAM)
    g.set_outputs(g.add_node(Op.CONV, [x, w], [TensorType(dtype, (n, k, p, p))],
                             {"stride": (stride, stride), "padding": (r // 2, r // 2), "dilation": (1, 1),
                              "groups": 1}).outputs)
    return g


def test_a_1x1_stride_2_convolution_reads_half_its_input_rows():
    """fp16 1x1 stride 2 on T4, 256 -> 128 channels at 56x56: the filter touches every other input
    row (within a row the skipped columns share the 32-byte sectors, so rows are read whole): the
    kernel reads x / 2 + W and writes y. A 3x3 stride-2 layer reads every row."""
    n, c, hw, k = 16, 256, 56, 128
    x, w, y = n * c * hw * hw * 2, k * c * 2, n * k * 28 * 28 * 2
    t4 = _flat("t4")
    bandwidth = t4.memory_bandwidth * t4.memory_efficiency
    t = _kernel(_conv(n, c, hw, k, 1, 2, DType.FP16), t4)
    assert t.memory_s == pytest.approx((x / 2 + w + y) / bandwidth, rel=1e-9)
    x3, w3 = x, k * c * 9 * 2
    t3 = _kernel(_conv(n, c, hw, k, 3, 2, DType.FP16), t4)
    assert t3.memory_s >= (x3 + w3 + y) / bandwidth * (1 - 1e-9)



def test_a_1d_convolution_with_one_tap_and_stride_2_reads_its_whole_input():
    """Conv1d, kernel 1, stride 2: the skipped elements lie in the one contiguous axis, sharing the
    32-byte sectors of the ones read, so the kernel reads all of x (+ W) and writes y."""
    n, c, length, k = 16, 256, 4096, 128
    g = Graph("conv1d")
    x = g.add_input("x", TensorType(DType.FP16, (n, c, length)))
    w = g.add_input("w", TensorType(DType.FP16, (k, c, 1)), ValueKind.PARAM)
    g.set_outputs(g.add_node(Op.CONV, [x, w], [TensorType(DType.FP16, (n, k, length // 2))],
                             {"stride": (2,), "padding": (0,), "dilation": (1,), "groups": 1}).outputs)
    t4 = _flat("t4")
    t = _kernel(g, t4)
    nbytes = n * c * length * 2 + k * c * 2 + n * k * (length // 2) * 2
    assert t.memory_s == pytest.approx(nbytes / (t4.memory_bandwidth * t4.memory_efficiency), rel=1e-9)
