"""GEMM efficiency by shape on the CPU: trilinear in log M, N, K over a measured grid (hand values),
the schema's full-grid check, the fit from raw measurements, and a GEMM timed at its grid efficiency."""

from __future__ import annotations

import dataclasses
import math

import pytest

import narrowpipe
from narrowpipe.backends import dump_target, get_target
from narrowpipe.calibration.fit import fit_curves
from narrowpipe.calibration.sweeps import Measurement
from narrowpipe.costmodel.execution.gemm_grid import grid_efficiency
from narrowpipe.errors import TargetSpecError
from narrowpipe.ir import DType
from tests.graph_builders import gemm_graph

#: efficiency = 0.1 + 0.1*[M=100] + 0.2*[N=1000] + 0.4*[K=1000]: each corner's value tells which
#: corner a weight went to.
GRID = tuple((m, n, k, 0.1 + 0.1 * (m == 100) + 0.2 * (n == 1000) + 0.4 * (k == 1000))
             for m in (1, 100) for n in (10, 1000) for k in (10, 1000))


def _cpu(**fields: object) -> narrowpipe.backends.Target:
    epyc = get_target("epyc-9755")
    sources = {**epyc.sources, **{k: "assumption: test" for k in fields}}
    return dataclasses.replace(epyc, sources=sources, **fields)


def test_grid_points_return_their_measured_efficiency():
    for m, n, k, eff in GRID:
        assert grid_efficiency(GRID, m, n, k) == pytest.approx(eff)


def test_the_log_midpoint_of_every_dim_averages_the_eight_corners():
    # sqrt(1*100) = 10, sqrt(10*1000) = 100: every weight is 1/2, so the mean of the corners
    assert grid_efficiency(GRID, 10, 100, 100) == pytest.approx(sum(p[3] for p in GRID) / 8)


def test_interpolation_is_linear_in_the_log_of_each_dim():
    # M at a quarter of the way in log space (100**0.25), N and K on grid points (10 and 1000)
    m = 100 ** 0.25
    assert grid_efficiency(GRID, round(m), 10, 1000) == pytest.approx(
        0.5 + 0.1 * math.log(round(m)) / math.log(100))
    # K a third of the way from 10 to 1000 (10**(1 + 2/3) ~ 46.4 -> 46)
    t = math.log(46 / 10) / math.log(100)
    assert grid_efficiency(GRID, 1, 1000, 46) == pytest.approx(0.3 + 0.4 * t)


def test_sizes_beyond_the_grid_take_the_nearest_edge():
    assert grid_efficiency(GRID, 5000, 4, 10**6) == pytest.approx(grid_efficiency(GRID, 100, 10, 1000))
    assert grid_efficiency(GRID, 0, 10**5, 1) == pytest.approx(0.3)


def test_a_target_refuses_a_grid_with_a_missing_combination():
    with pytest.raises(TargetSpecError, match="matmul_grid.*every combination"):
        _cpu(matmul_grid=GRID[:-1])
    with pytest.raises(TargetSpecError, match=r"matmul_grid\[0\]\[3\]"):
        _cpu(matmul_grid=((1, 10, 10, 1.5),))


def test_the_grid_round_trips_through_a_target_file(tmp_path):
    path = tmp_path / "cpu.toml"
    dump_target(_cpu(matmul_grid=GRID), path)
    assert get_target(str(path)).matmul_grid == tuple(sorted(GRID))


def test_the_fit_turns_grid_timings_into_efficiencies_less_dispatch():
    peak, dispatch = 1e11, 2e-6
    ms = [Measurement("dispatch", "fp32", (1,), 1, 12, dispatch)]
    for m, n, k, eff in GRID:
        flops = 2 * m * n * k
        ms.append(Measurement("gemm_grid", "fp32", (m, n, k), flops, 0, flops / (eff * peak) + dispatch))
    fitted = fit_curves(ms, {"fp32": peak}).gemm_grid
    assert [p[:3] for p in fitted] == sorted(p[:3] for p in GRID)
    assert [p[3] for p in fitted] == pytest.approx([p[3] for p in sorted(GRID)], abs=1e-4)
    # an interrupted sweep leaves no grid rather than a partial one
    assert fit_curves(ms[:-1], {"fp32": peak}).gemm_grid == ()


def test_a_plain_fp32_gemm_runs_at_its_grid_efficiency():
    cpu = _cpu(matmul_grid=GRID)
    peak = cpu.matrix_flops["fp32"]
    r = narrowpipe.analyze(gemm_graph(10, 100, 100, DType.FP32), cpu, eager_overhead=False)
    (k,) = r.timeline
    assert k.compute_s == pytest.approx(2 * 10 * 100 * 100 / (peak * sum(p[3] for p in GRID) / 8))
    # bf16 keeps the FLOPs curve (the grid is measured in fp32)
    plain = narrowpipe.analyze(gemm_graph(10, 100, 100, DType.BF16), _cpu(), eager_overhead=False)
    gridded = narrowpipe.analyze(gemm_graph(10, 100, 100, DType.BF16), cpu, eager_overhead=False)
    assert gridded.timeline[0].compute_s == plain.timeline[0].compute_s
