"""A batched fp32 GEMM on the CPU runs item by item at the grid's efficiency for the item's own
shape, plus a measured per-item cost (hand values on a tiny grid), not at the batch's FLOPs and
min(M, N) on the skinny curve; a CPU target without a grid keeps that shared efficiency; the
per-item cost is fitted from measured batches as what each item took beyond that."""

from __future__ import annotations

import dataclasses

import pytest

import narrowpipe
from narrowpipe.calibration.bmm_sweep import bmm_graph, fit_bmm_item_time
from narrowpipe.calibration.sweeps import Measurement
from narrowpipe.costmodel.execution.common import matmul_efficiency
from tests.costmodel.execution.test_cpu_gemm_grid import GRID, _cpu  # efficiency 0.1 + 0.1*[M=100] + ...


def _kernel(target, b, m, n, k):
    (kt,) = narrowpipe.analyze(bmm_graph(b, m, n, k), target, fusion="none", eager_overhead=False).timeline
    return kt


def test_each_item_runs_at_the_grid_efficiency_of_its_own_shape():
    cpu = _cpu(matmul_grid=GRID)
    peak = cpu.matrix_flops["fp32"]
    # items of 100 x 1000 x 1000 (a grid point: 0.8); the batch's FLOPs are 8x an item's
    kt = _kernel(cpu, 8, 100, 1000, 1000)
    assert kt.compute_s == pytest.approx(8 * 2 * 100 * 1000 * 1000 / (peak * 0.8))
    # items of 1 x 10 x 1000 (0.5): one dispatch for the whole batch
    kt = _kernel(cpu, 64, 1, 10, 1000)
    assert kt.compute_s == pytest.approx(64 * 2 * 10 * 1000 / (peak * 0.5))
    assert kt.overhead_s == pytest.approx(cpu.launch_overhead)


def test_the_per_item_cost_is_paid_once_per_item():
    with_items = _cpu(matmul_grid=GRID, bmm_item_time=2e-6)
    base = _kernel(_cpu(matmul_grid=GRID), 12, 100, 10, 10)
    kt = _kernel(with_items, 12, 100, 10, 10)
    assert kt.compute_s == pytest.approx(base.compute_s + 12 * 2e-6)
    # a plain GEMM is a grid point as measured: no per-item cost
    assert _kernel(with_items, 1, 100, 10, 10).compute_s == pytest.approx(_kernel(_cpu(matmul_grid=GRID), 1, 100, 10,
                                                                                  10).compute_s)


def test_without_a_grid_a_batch_keeps_the_shared_efficiency():
    cpu = _cpu()
    kt = _kernel(cpu, 8, 64, 64, 128)
    flops = 2 * 8 * 64 * 64 * 128
    assert kt.compute_s == pytest.approx(flops / (cpu.matrix_flops["fp32"] * matmul_efficiency(cpu, flops, 64)))


def test_the_fit_is_the_median_item_residual_and_never_negative():
    cpu = _cpu(matmul_grid=GRID)
    shapes = [(8, 100, 1000, 1000), (64, 1, 10, 1000), (4, 100, 10, 10)]
    bare = [narrowpipe.analyze(bmm_graph(*s), cpu, fusion="none", eager_overhead=False).time_s for s in shapes]
    extra = (3e-6, 1e-6, 5e-6)        # per item
    ms = [Measurement("bmm", "fp32", s, 0, 0, t + s[0] * e) for s, t, e in zip(shapes, bare, extra)]
    assert fit_bmm_item_time(cpu, ms) == pytest.approx(3e-6)
    faster = [dataclasses.replace(m, seconds=t - m.shape[0] * 1e-7) for m, t in zip(ms, bare)]
    assert fit_bmm_item_time(cpu, faster) == 0.0
    assert fit_bmm_item_time(_cpu(), ms) is None          # no grid to read items from
    assert fit_bmm_item_time(cpu, []) is None
