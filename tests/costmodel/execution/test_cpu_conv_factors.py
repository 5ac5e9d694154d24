"""A dense CPU convolution runs at its kernel size's plateau times the GEMM curve's small-problem ramp
and, by its output positions (never its channels), the skinny-GEMM curve relative to its widest point;
calibrate fits the kernel-size curve over the same factors, so the model gives the measured
convolutions back. Numbers by hand."""

from __future__ import annotations

import dataclasses

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.calibration.fit import fit_curves
from narrowpipe.calibration.measurement import Measurement
from narrowpipe.costmodel.execution.cpu import conv_factors
from tests.graph_builders import conv_graph

SKINNY = ((16.0, 0.2), (64.0, 0.4), (512.0, 0.8))
SQUARE = ((1e6, 0.45), (1e8, 0.9))


def test_the_factors_are_the_ramp_and_the_skinny_curve_by_positions_relative_to_its_end():
    assert conv_factors(SQUARE, 0.9, SKINNY, 1e9, 4096) == 1.0               # a large problem, many positions
    assert conv_factors(SQUARE, 0.9, SKINNY, 1e6, 4096) == pytest.approx(0.5)  # the ramp alone
    assert conv_factors(SQUARE, 0.9, SKINNY, 1e9, 64) == pytest.approx(0.4 / 0.8)
    assert conv_factors(SQUARE, 0.9, SKINNY, 1e9, None) == 1.0               # grouped: no skinny factor
    assert conv_factors((), 0.9, (), 1e6, 64) == 1.0


def test_a_conv_with_few_channels_and_many_positions_is_not_skinny():
    cpu = get_target("epyc-9755")
    fields = {"conv_curve": ((1.0, 0.5), (9.0, 0.8)), "matmul_skinny_curve": SKINNY}
    cpu = dataclasses.replace(cpu, sources={**cpu.sources, **{k: "assumption: test" for k in fields}}, **fields)
    assert not cpu.matmul_curve                          # no ramp: the catalog chip has no GEMM curve
    wide = narrowpipe.analyze(conv_graph(1, 64, (56, 56), 64, (3, 3), pad=1), cpu, eager_overhead=False)
    few = narrowpipe.analyze(conv_graph(1, 64, (8, 8), 64, (3, 3), pad=1), cpu, eager_overhead=False)
    peak = cpu.matrix_flops["fp32"]
    # 64 output channels, 3136 positions: the 3x3 plateau alone; 64 positions: times 0.4 / 0.8
    assert wide.flops / (wide.time_s - cpu.launch_overhead) == pytest.approx(0.8 * peak, rel=2e-2)
    assert few.flops / (few.time_s - cpu.launch_overhead) == pytest.approx(0.8 * 0.5 * peak, rel=2e-2)


def test_the_fitted_kernel_curve_gives_the_measured_convolutions_back():
    peak = 100e9
    ms = [Measurement("dispatch", "fp32", (1,), 1, 12, 1e-6)]
    ms += [Measurement("matmul", "fp32", (s, s, s), 2 * s**3, 12 * s * s, 2 * s**3 / (peak * e) + 1e-6)
           for s, e in ((64, 0.3), (256, 0.6), (1024, 0.9), (2048, 0.9))]
    ms += [Measurement("matmul", "fp32", (m, 2048, 2048), 2 * m * 2048**2, 0, 2 * m * 2048**2 / (peak * 0.9 * f) + 1e-6)
           for m, f in ((16, 0.2), (64, 0.4), (512, 0.8))]
    # a 3x3 convolution of 40x40 outputs (1600 positions) at 0.6 of peak, and a 1x1 one of 10x10 at 0.2
    shapes = {(96, 96, 3, 1, 40): 0.6, (320, 80, 1, 1, 10): 0.2}
    flops = {s: 2 * s[0] * s[1] * s[2] ** 2 * ((s[4] + 2 * (s[2] // 2) - s[2]) // s[3] + 1) ** 2 for s in shapes}
    ms += [Measurement("conv", "fp32", s, flops[s], 0, flops[s] / (peak * e) + 1e-6) for s, e in shapes.items()]
    c = fit_curves(ms, {"fp32": peak})
    for s, e in shapes.items():
        positions = ((s[4] + 2 * (s[2] // 2) - s[2]) // s[3] + 1) ** 2
        area = float(s[2] ** 2)
        kernel = dict(c.conv_curve)[area]
        factors = conv_factors(c.matmul_curve, c.matmul_efficiency, c.skinny_curve, float(flops[s]), positions)
        assert kernel * factors == pytest.approx(e, rel=2e-3)
    assert dict(c.conv_curve)[1.0] > 0.2                 # 100 positions: the skinny factor took its share out
