"""Hand-computed checks of MIOpen's any-filter Winograd kernel (ConvBinWinogradRxS, issue 12 round
5): the filter padding rules from MIOpen's solver, the F(2x2,3x3) multiply count, where it applies,
and its time on MI25 (12.3 TFLOP/s FP32, AMD-MI25) at its plateau."""

from __future__ import annotations

import pytest
from gpu_timing import flat_gpu, last_kernel  # tests/gpu_timing.py
from graph_builders import conv_graph  # tests/graph_builders.py

from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution.conv_winograd_rxs import rxs_flops, rxs_padded_filter
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.ir import Graph, Op

MI25_FP32 = 12.3e12     # AMD-MI25 datasheet, FP32 TFLOP/s


@pytest.mark.parametrize("r, s, stride, padded", [
    ((3, 3, 1, (3, 3))),      # stride 1, S <= 3: one 3x3 block
    ((1, 1, 1, (3, 3))),      # a 1x1 filter pads to a whole block
    ((5, 5, 1, (6, 6))),      # S > 3 pads to a multiple of 6, R to a multiple of 3
    ((5, 5, 2, (6, 6))),      # stride 2: S to 6; R = 5 (5 mod 6 != 1) to 6
    ((5, 10, 2, (6, 12))),    # DeepBench's speech layer
    ((7, 7, 2, (9, 12))),     # R = 7 (7 mod 6 == 1) pads to 9 only, S to 12
])
def test_filter_padding_follows_miopens_solver(r, s, stride, padded):
    assert rxs_padded_filter(r, s, stride) == padded


def _node(g: Graph):
    table = interpret(g, {})
    return table, next(n for n in g.nodes if n.op is Op.CONV)


def test_forward_stride_2_multiplies_are_4_9_of_the_padded_filter():
    """5x10 stride 2, 32 -> 32 channels, 79 x 341 input: output 38 x 166 (already even); each output
    takes the padded 6 x 12 filter's 72 taps at 16/36 multiplies per tap: 2 x 16/36 x N x 38 x 166 x
    32 x 32 x 72 FLOPs, 72/50 x 16/36 = 0.64 of the direct convolution's."""
    table, node = _node(conv_graph(4, 32, (79, 341), 32, (5, 10), 2))
    expected = 2 * 16 / 36 * 4 * 38 * 166 * 32 * 32 * 72
    assert rxs_flops(table, node) == pytest.approx(expected, rel=1e-8)
    direct = 2 * 4 * 38 * 166 * 32 * 32 * 50
    assert rxs_flops(table, node) / direct == pytest.approx(72 / 50 * 16 / 36, rel=1e-8)


def test_a_stride_2_data_gradient_gives_each_input_a_quarter_of_the_taps():
    """dx of a 5x5 stride-2 layer (64 -> 128 channels, 28 x 28 input): 28 x 28 dx positions, each
    reached by 6 x 6 / 4 = 9 padded taps, reducing over the 128 output channels."""
    table, node = _node(conv_graph(2, 64, (28, 28), 128, (5, 5), 2, pad=2, role="grad_input"))
    assert rxs_flops(table, node) == pytest.approx(2 * 16 / 36 * 2 * 28 * 28 * 128 * 64 * 9, rel=1e-8)


def test_where_the_solver_does_not_apply():
    """k x l x C < 18 (a 1-channel 3x3 layer: 1 x 1 x 1), an odd C with a filter at most 3 wide and
    stride 3 get no RxS plan (groups, dilation, data types, 1-D layers and the size limits:
    test_conv_miopen_applicability.py)."""
    assert rxs_flops(*_node(conv_graph(2, 1, (32, 32), 16, (3, 3), 1, pad=1))) is None
    assert rxs_flops(*_node(conv_graph(2, 3, (32, 32), 16, (3, 3), 1, pad=1))) is None
    assert rxs_flops(*_node(conv_graph(2, 32, (33, 33), 16, (3, 3), 3))) is None
    assert rxs_flops(*_node(conv_graph(2, 4, (32, 32), 16, (3, 3), 1, pad=1))) is None   # 1 x 1 x 4 < 18
    assert rxs_flops(*_node(conv_graph(2, 32, (32, 32), 16, (3, 3), 1, pad=1))) is not None


def test_mi25_runs_a_stride_2_5x5_layer_as_rxs_winograd_at_its_plateau():
    """A 5x5 stride-2 forward layer (64 -> 128 channels, 80 x 350, batch 4; output 39 x 174): with the
    kernel, its time is the RxS FLOPs at 0.6 of 12.3 TFLOP/s; without it the implicit GEMM does the
    direct FLOPs (36/25 x 16/36 = 0.64 of them are the RxS kernel's), so it is slower."""
    g = conv_graph(4, 64, (80, 350), 128, (5, 5), 2, pad=1)
    flops = 2 * 16 / 36 * 4 * 40 * 174 * 64 * 128 * 36          # 39 rows pad to 40 (2x2 tiles)
    t = last_kernel(g, flat_gpu("mi25", conv_winograd_rxs_efficiency=0.6))
    assert "Winograd RxS" in t.note
    assert t.executed_flops == pytest.approx(flops, rel=1e-6)
    assert t.compute_s == pytest.approx(flops / (MI25_FP32 * 0.6), rel=1e-6)
    without = last_kernel(g, flat_gpu("mi25", conv_winograd_rxs_efficiency=None))
    assert "RxS" not in without.note
    assert without.compute_s > t.compute_s


def test_nvidia_targets_have_no_rxs_kernel():
    """cuDNN has no such kernel: the field is absent on the NVIDIA catalog GPUs."""
    for name in ("t4", "p100-pcie", "v100-sxm2"):
        assert get_target(name).conv_winograd_rxs_efficiency is None

