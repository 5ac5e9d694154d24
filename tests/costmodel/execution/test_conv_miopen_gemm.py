"""Hand-computed check of MIOpen's GEMM path for a 1x1 stride-2 layer (issue 12 round 5): one GEMM
between two layout transposes on MI25 (484 GB/s HBM2, AMD-MI25), with their bytes and launches."""

from __future__ import annotations

import pytest
from gpu_timing import flat_gpu, last_kernel  # tests/gpu_timing.py
from graph_builders import conv_graph  # tests/graph_builders.py


def test_mi25_runs_a_1x1_stride_2_layer_between_two_transposes():
    """MIOpen's GEMM path for a 1x1 stride-2 layer (256 -> 512 channels, 28 x 28, batch 8): the
    transpose reads x's sampled rows (half of x, 6.42 MB) and writes x_t (a quarter, 1.61 MB), the
    GEMM reads x_t and W (0.52 MB) and writes y_t (3.21 MB), the second transpose reads y_t and
    writes y: 2 more launches; the GEMM's FLOPs are the layer's."""
    mb = 8 * 256 * 28 * 28 * 4, 8 * 256 * 14 * 14 * 4, 512 * 256 * 4, 8 * 512 * 14 * 14 * 4   # x, x_t, W, y
    x, x_t, w, y = mb
    g = conv_graph(8, 256, (28, 28), 512, (1, 1), 2)
    t = last_kernel(g, flat_gpu("mi25"))
    assert "layout transposes" in t.note
    bw = 484e9 * 0.85                      # AMD-MI25 HBM2 x the catalog's memory efficiency
    assert t.memory_s == pytest.approx((x // 2 + x_t + y + y) / bw + (x_t + w + y) / bw, rel=1e-6)
    # M = 8 x 14 x 14 = 1568 positions, padded at most to whole 128-row tiles (13 x 128 = 1664)
    assert 2 * 1568 * 512 * 256 <= t.executed_flops <= 2 * 1664 * 512 * 256
    without = last_kernel(g, flat_gpu("mi25", conv_gemm_1x1_stride2=None))
    assert "transposes" not in without.note
    assert t.overhead_s == pytest.approx(without.overhead_s + 2 * 1e-6, rel=1e-9)     # two more launches
    assert t.time_s > without.time_s
    # stride 1 and padded 1x1 layers keep the implicit GEMM
    assert "transposes" not in last_kernel(conv_graph(8, 256, (28, 28), 512, (1, 1), 1), flat_gpu("mi25")).note
    assert "transposes" not in last_kernel(conv_graph(8, 256, (28, 28), 512, (1, 1), 2, pad=1), flat_gpu("mi25")).note
