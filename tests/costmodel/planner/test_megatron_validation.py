"""Predicted training steps against Megatron-LM's published runs (Narayanan et al., SC'21, Table 1),
with the paper's configuration fixed and nothing fitted (benchmarks/megatron_validate.py)."""

from __future__ import annotations

import pytest
from benchmark_module import committed_rows, load_benchmark  # tests/benchmark_module.py


def _module():
    return load_benchmark("megatron_validate")


@pytest.fixture(scope="module")
def plans() -> dict:
    mv = _module()
    return {row.name: (row, mv.predict(row)) for row in mv.ROWS if row.acceptance}


@pytest.fixture(scope="module")
def errors(plans) -> dict[str, float]:
    return {name: _module().error(row, plan) for name, (row, plan) in plans.items()}


def test_the_committed_results_are_what_the_code_predicts(plans):
    steps = {name: plan.step_time_s for name, (_, plan) in plans.items()}
    committed = {r["row"]: r["predicted_step_s"] for r in committed_rows("megatron_validate") if r["row"] in steps}
    assert committed == pytest.approx(steps, rel=1e-9), \
        "rerun python benchmarks/megatron_validate.py and commit benchmarks/results/megatron_validate.*"


def test_published_step_times_follow_from_the_papers_flop_formula():
    mv = _module()
    got = {r.name: round(r.measured_step_s, 2) for r in mv.ROWS if r.acceptance}
    assert got == {"1.7B": 3.53, "18.4B": 9.40, "145.6B": 24.82}      # the brief's 3.53 s, 9.40 s, 24.8 s


def test_every_acceptance_row_is_predicted_within_twenty_percent(errors):
    assert all(abs(e) < 0.20 for e in errors.values()), errors


def test_acceptance_bars_mean_ten_percent_each_fifteen(errors):
    """Met since the GEMM-kernel terms of issue 12 (the A100's latency floor, per-wave fill and exposed
    epilogue, GPU defaults there: no public per-shape A100 timings were fitted): -10.8% / -0.4% /
    -14.4%, mean 8.5% (before them -13.9% / -5.3% / -16.6%, mean 11.9%; the 1.7B row moved from -10.3%
    when rings across nodes stopped being capped at one NIC: its data-parallel all-reduce over 32
    GPUs went from 50 to 30 ms). Nothing is fitted to these rows; the worst row sits 0.6 points inside
    its bar. Since a layer's backward computes its input's gradient (QA plan item 1: the first
    norm's input gradient and the sum with the residual's, ~0.1-0.6% more backward time per layer)
    they read -10.6% / +0.2% / -14.0%, mean 8.3%."""
    assert errors == pytest.approx({"1.7B": -0.106, "18.4B": 0.002, "145.6B": -0.140}, abs=0.005)
    assert sum(abs(e) for e in errors.values()) / len(errors) <= 0.10
    assert all(abs(e) <= 0.15 for e in errors.values())


def test_the_papers_plan_fits_and_names_its_exposed_communication():
    mv = _module()
    row = next(r for r in mv.ROWS if r.name == "145.6B")
    plan = mv.predict(row)
    assert plan.fits and plan.memory_per_device["total"] <= 80e9
    assert {"tp_comm", "p2p", "dp_comm"} <= set(plan.exposed_comm)
    assert sum(plan.breakdown.values()) == pytest.approx(plan.step_time_s, rel=1e-9)
    # the schedule's bubble is (p - 1) / (v m) of the steady state, with v = 2 and m = 96
    steady = plan.step_time_s - plan.breakdown["bubble"] - plan.breakdown["dp_comm"] - plan.breakdown["optimizer"]
    assert plan.breakdown["bubble"] == pytest.approx(steady * 7 / (2 * 96), rel=0.05)
