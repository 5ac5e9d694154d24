"""The eager per-op host overhead: fitted from a whole-model measurement, paid by model predictions."""

from __future__ import annotations

import pytest

from narrowpipe.backends import get_target
from narrowpipe.calibration.eager import EAGER_MODEL, fit_eager_overhead
from narrowpipe.calibration.sweeps import Measurement


def test_the_fit_returns_the_time_per_op_the_bare_ops_do_not_explain():
    pytest.importorskip("torch")
    cpu = get_target("epyc-9755")
    _, kernels, bare = fit_eager_overhead(cpu, Measurement("eager_model", "fp32", EAGER_MODEL, 0, 0, 1.0))
    assert kernels > 4 * 10                     # four blocks of norms, linears, attention, residuals
    measured = bare + kernels * 9e-6
    overhead, _, _ = fit_eager_overhead(cpu, Measurement("eager_model", "fp32", EAGER_MODEL, 0, 0, measured))
    assert overhead == pytest.approx(9e-6)
    faster, _, _ = fit_eager_overhead(cpu, Measurement("eager_model", "fp32", EAGER_MODEL, 0, 0, bare / 2))
    assert faster == 0.0                        # never negative: the ops alone already explain it


def test_calibrate_measures_the_eager_overhead_and_a_depthwise_rate(host, host_contention):
    t = get_target(str(host))
    assert t.vector_op_flops["conv_depthwise"] > 0
    if host_contention:
        assert not t.eager_op_overhead and not t.sources.get("eager_op_overhead", "").startswith("measured:")
        return
    assert t.eager_op_overhead is not None and 0 <= t.eager_op_overhead < 1e-3
    assert t.source("eager_op_overhead").startswith("measured:")


def test_the_fit_takes_the_stacks_module_calls_out_first():
    pytest.importorskip("torch")
    cpu = get_target("epyc-9755")
    _, kernels, bare = fit_eager_overhead(cpu, Measurement("eager_model", "fp32", EAGER_MODEL, 0, 0, 1.0))
    layers = EAGER_MODEL[0]
    calls = 1 + layers * (1 + 2 + 4) + 1        # the stack, per block itself, 2 norms, 4 linears; the final norm
    measured = bare + kernels * 9e-6 + calls * 2e-6
    overhead, _, _ = fit_eager_overhead(cpu, Measurement("eager_model", "fp32", EAGER_MODEL, 0, 0, measured), 2e-6)
    assert overhead == pytest.approx(9e-6)


def test_calibrate_measures_the_module_call_cost(host, host_contention):
    t = get_target(str(host))
    if host_contention:
        assert not t.eager_module_call_overhead
        return
    assert t.eager_module_call_overhead is not None and 0 <= t.eager_module_call_overhead < 1e-4
    assert t.source("eager_module_call_overhead").startswith("measured:")


def test_the_fit_takes_the_interleaved_record_of_the_stack_where_there_is_one():
    from narrowpipe.calibration.eager import eager_reference
    loop = Measurement("eager_model", "fp32", EAGER_MODEL, 0, 0, 988e-6)
    rounds = Measurement("eager_cold", "fp32", EAGER_MODEL, 0, 0, 554e-6)
    deeper = Measurement("eager_cold", "fp32", (640, *EAGER_MODEL[1:]), 0, 0, 0.1)
    assert eager_reference([loop, rounds, deeper]) is rounds
    assert eager_reference([loop, deeper]) is loop              # an older measurements file
    assert eager_reference([deeper]) is None
