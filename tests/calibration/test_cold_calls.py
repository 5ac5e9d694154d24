"""The eager host calls' cold-state cost: fitted by hand from a stack measured hot and after reading
buffers, measured by calibrate, and absent (no cost) from a host file written before it existed."""

from __future__ import annotations

import pytest

from narrowpipe.backends import get_target
from narrowpipe.calibration.cold_calls import fit_cold_calls, measure_cold_calls, stack_host_calls
from narrowpipe.calibration.eager import EAGER_MODEL
from narrowpipe.calibration.sweeps import Measurement

MIB = 2**20


def _m(nbytes: int, seconds: float) -> Measurement:
    return Measurement("eager_cold", "fp32", EAGER_MODEL, 0, nbytes, seconds)


def test_the_fit_is_the_extra_per_host_call_beyond_the_weights_read_from_memory():
    cpu = get_target("epyc-9755")
    weights = 800_000
    w_s = weights / (cpu.memory_bandwidth * cpu.memory_efficiency)       # the stack's weights from DRAM
    hot, calls = 400e-6, 100
    ms = [_m(0, hot), _m(1 * MIB, hot + w_s / 2),                   # less than its weights: nothing
          _m(32 * MIB, hot + w_s + 100e-6), _m(128 * MIB, hot + w_s + 200e-6)]
    per_call, curve = fit_cold_calls(cpu, ms, calls, weights)
    assert per_call == pytest.approx(200e-6 / calls)
    assert curve == ((1 * MIB, 0.01), (32 * MIB, 0.5), (128 * MIB, 1.0))   # 0 floored to 1%


def test_a_dip_in_the_curve_is_noise_and_is_levelled():
    cpu = get_target("epyc-9755")
    ms = [_m(0, 1e-4), _m(16 * MIB, 1e-4 + 60e-6), _m(32 * MIB, 1e-4 + 40e-6), _m(64 * MIB, 1e-4 + 100e-6)]
    per_call, curve = fit_cold_calls(cpu, ms, 10, 0)
    assert per_call == pytest.approx(10e-6)
    assert [y for _, y in curve] == pytest.approx([0.5, 0.5, 1.0])      # isotonic: the dip averaged


def test_nothing_to_fit_without_a_hot_and_a_cold_record():
    cpu = get_target("epyc-9755")
    assert fit_cold_calls(cpu, [_m(MIB, 1e-3)], 10, 0) is None
    assert fit_cold_calls(cpu, [_m(0, 1e-3)], 10, 0) is None
    assert fit_cold_calls(cpu, [_m(0, 1e-3), _m(MIB, 0.9e-3)], 10, 0) == (0.0, ())   # faster cold: no cost


def test_the_stack_counts_its_kernels_and_module_calls(one_thread):
    cpu = get_target("epyc-9755")
    calls, weights = stack_host_calls(cpu)
    layers, hidden = EAGER_MODEL[:2]
    module_calls = 1 + layers * (1 + 2 + 4) + 1           # as test_eager_overhead counts them
    assert calls > module_calls + layers * 10             # plus each block's norms, linears, attention, adds
    per_layer = 12 * hidden * hidden + 13 * hidden        # qkv, out, up, down weights and biases, two norms
    assert weights == 4 * (layers * per_layer + 2 * hidden)


def test_the_measurement_times_the_stack_hot_and_after_each_buffer(one_thread):
    ms = measure_cold_calls(sizes=(1, 2), rounds=2)
    assert [m.bytes for m in ms] == [0, MIB, 2 * MIB]
    assert all(m.kind == "eager_cold" and m.seconds > 0 for m in ms)


def test_calibrate_writes_the_cold_call_cost_and_it_loads_back(host):
    t = get_target(str(host))
    assert t.eager_cold_call_overhead is not None and 0 <= t.eager_cold_call_overhead < 1e-3
    assert t.source("eager_cold_call_overhead").startswith("measured:")
    if t.eager_cold_call_curve:
        ys = [y for _, y in t.eager_cold_call_curve]
        assert ys[-1] == 1.0 and ys == sorted(ys) and min(ys) >= 0.01
