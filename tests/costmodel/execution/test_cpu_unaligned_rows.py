"""A CPU GEMM whose output rows do not start on a 32-byte boundary (N x item size not a multiple of
32: GPT-2's 50,257-wide LM head) runs at the grid's efficiency times the measured curve at its
output's bytes (hand values); aligned rows, and targets without the curve, keep the grid's; the
curve is fitted from aligned / one-wider GEMM pairs."""

from __future__ import annotations

import math

import pytest

import narrowpipe
from narrowpipe.calibration.sweeps import ColdPool, Measurement
from narrowpipe.calibration.unaligned_sweep import UNALIGNED_N, fit_unaligned_curve, unaligned_cases
from narrowpipe.costmodel.execution.unaligned_rows import rows_aligned
from narrowpipe.ir import DType
from tests.calibration.test_gemm_grid_choice import MODEL_WIDTHS
from tests.costmodel.execution.test_cpu_gemm_grid import GRID, _cpu
from tests.graph_builders import gemm_graph

#: (output bytes, fraction of the grid's efficiency): 1 MB -> 0.9, 16 MB -> 0.7
CURVE = ((1e6, 0.9), (16e6, 0.7))


def _compute(target, m, n, k):
    (kt,) = narrowpipe.analyze(gemm_graph(m, n, k, DType.FP32), target, fusion="none", eager_overhead=False).timeline
    return kt.compute_s


def test_rows_are_aligned_at_32_bytes():
    assert rows_aligned(50304, 4) and rows_aligned(16008, 4) and rows_aligned(16, 2)
    assert not rows_aligned(50257, 4) and not rows_aligned(16004, 4) and not rows_aligned(30522, 4)


def test_unaligned_output_rows_take_the_curve_at_their_output_bytes():
    plain, slow = _cpu(matmul_grid=GRID), _cpu(matmul_grid=GRID, matmul_unaligned_curve=CURVE)
    peak = plain.matrix_flops["fp32"]
    # 100 x 1001 x 1000: grid edge N=1000 (flat beyond) -> 0.8; output 400,400 bytes, below the curve -> 0.9
    assert _compute(slow, 100, 1001, 1000) == pytest.approx(2 * 100 * 1001 * 1000 / (peak * 0.8 * 0.9))
    # 100 x 40001 x 1000: output 16,000,400 bytes, past the curve's end -> 0.7
    assert _compute(slow, 100, 40001, 1000) == pytest.approx(2 * 100 * 40001 * 1000 / (peak * 0.8 * 0.7))
    # 100 x 10001 x 1000: 4,000,400 bytes, about half-way in log space between 1 MB and 16 MB
    f = 0.9 + (0.7 - 0.9) * math.log(4_000_400 / 1e6) / math.log(16)
    assert _compute(slow, 100, 10001, 1000) == pytest.approx(2 * 100 * 10001 * 1000 / (peak * 0.8 * f))
    # the same shapes with aligned rows, and a target without the curve, keep the grid's efficiency
    assert _compute(slow, 100, 40000, 1000) == pytest.approx(_compute(plain, 100, 40000, 1000))
    assert _compute(plain, 100, 40001, 1000) == pytest.approx(2 * 100 * 40001 * 1000 / (peak * 0.8))


def test_the_curve_is_each_pairs_rate_ratio_by_output_bytes():
    def pair(n, aligned_s, wide_s):
        return [Measurement("gemm_unaligned", "fp32", (160, n, 1280), 2 * 160 * n * 1280, 0, aligned_s),
                Measurement("gemm_unaligned", "fp32", (160, n + 1, 1280), 2 * 160 * (n + 1) * 1280, 0, wide_s)]
    ms = pair(400, 1e-3, 1e-3 * 401 / 400 / 0.95) + pair(25600, 2e-2, 2e-2 * 25601 / 25600 / 0.75) \
        + pair(1600, 4e-3, 3e-3)          # the wider one faster: noise, taken as no loss
    curve = fit_unaligned_curve(ms)
    assert curve == ((160 * 401 * 4, 0.95), (160 * 1601 * 4, 1.0), (160 * 25601 * 4, 0.75))
    assert fit_unaligned_curve(ms[:1]) == ()          # no twin


def test_calibrate_measures_each_width_beside_its_one_wider_twin():
    cases = unaligned_cases(ColdPool(), m=4, k=8, ns=(8, 16))
    assert [(c.kind, c.shape) for c in cases] == [("gemm_unaligned", (4, w, 8)) for w in (8, 9, 16, 17)]
    for c in cases:
        assert tuple(c.fn().shape) == c.shape[:2]
    assert all(rows_aligned(n, 4) and not rows_aligned(n + 1, 4) for n in UNALIGNED_N)
    assert not ({*UNALIGNED_N} | {n + 1 for n in UNALIGNED_N}) & MODEL_WIDTHS
