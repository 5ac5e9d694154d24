"""The eager host calls' cold-state cost: fitted by hand from stacks of several depths, measured by
calibrate, and absent (no cost) from a host file written before it existed."""

from __future__ import annotations

import pytest

from narrowpipe.backends import get_target
from narrowpipe.calibration.cold_calls import fit_cold_calls, measure_cold_calls, stack_facts
from narrowpipe.calibration.eager import EAGER_MODEL
from narrowpipe.calibration.sweeps import Measurement

MIB = 2**20
_, HIDDEN, HEADS, SEQ = EAGER_MODEL


pytestmark = pytest.mark.timing   # it measures this host: the other test workers wait (tests/host_lock.py)


def _m(layers: int, seconds: float) -> Measurement:
    return Measurement("eager_cold", "fp32", (layers, HIDDEN, HEADS, SEQ), 0, 0, seconds)


def _facts(shape: tuple[int, ...]) -> tuple[int, int, float]:
    """A made-up stack: 25 host calls, 200 kB of weights and 0.2 MiB of footprint per layer."""
    return 25 * shape[0], 200_000 * shape[0], 0.2 * MIB * shape[0]


def test_the_fit_is_the_extra_per_host_call_beyond_the_shallow_stack_and_the_weights():
    cpu = get_target("epyc-9755")
    dram = cpu.memory_bandwidth * cpu.memory_efficiency
    per_call = 4e-6                                           # the shallow stack's time per host call
    ms = [_m(4, 100 * per_call),
          _m(80, 2000 * per_call + 16e6 / dram),             # its weights from memory: nothing more
          _m(160, 4000 * (per_call + 0.5e-6) + 32e6 / dram),
          _m(640, 16000 * (per_call + 1e-6) + 128e6 / dram)]
    full, curve = fit_cold_calls(cpu, ms, _facts)
    assert full == pytest.approx(1e-6)
    assert [x for x, _ in curve] == pytest.approx([16 * MIB, 32 * MIB, 128 * MIB])
    assert [y for _, y in curve] == pytest.approx([0.01, 0.5, 1.0])      # 0 floored to 1%


def test_a_dip_in_the_curve_is_noise_and_is_levelled():
    cpu = get_target("epyc-9755")
    ms = [_m(4, 100e-6), _m(80, 2000 * (1e-6 + 0.6e-6)), _m(160, 4000 * (1e-6 + 0.4e-6)),
          _m(320, 8000 * (1e-6 + 1e-6))]
    full, curve = fit_cold_calls(cpu, ms, lambda s: (25 * s[0], 0, 0.2 * MIB * s[0]))
    assert full == pytest.approx(1e-6)
    assert [y for _, y in curve] == pytest.approx([0.5, 0.5, 1.0])      # isotonic: the dip averaged


def test_nothing_to_fit_with_one_depth_and_no_cost_when_deeper_is_not_slower():
    cpu = get_target("epyc-9755")
    assert fit_cold_calls(cpu, [_m(4, 1e-3)], _facts) is None
    assert fit_cold_calls(cpu, [_m(4, 1e-3), _m(8, 1.9e-3)], _facts) == (0.0, ())


def test_the_stack_facts_grow_by_one_layer_per_layer(one_thread):
    cpu = get_target("epyc-9755")
    facts = stack_facts(cpu)
    calls, weights, footprint = facts((4, HIDDEN, HEADS, SEQ))
    module_calls = 1 + 4 * (1 + 2 + 4) + 1                # as test_eager_overhead counts them
    assert calls > module_calls + 4 * 10                  # plus each block's norms, linears, attention, adds
    per_layer = 12 * HIDDEN * HIDDEN + 13 * HIDDEN        # qkv, out, up, down weights and biases, two norms
    assert weights == 4 * (4 * per_layer + 2 * HIDDEN)
    assert footprint > weights
    calls640, weights640, footprint640 = facts((640, HIDDEN, HEADS, SEQ))
    assert weights640 == 4 * (640 * per_layer + 2 * HIDDEN)
    assert footprint640 - footprint == pytest.approx(weights640 - weights)   # activations do not grow


def test_the_measurement_times_each_depth(one_thread):
    ms = measure_cold_calls(depths=(1, 2), rounds=2)
    assert [m.shape for m in ms] == [(1, HIDDEN, HEADS, SEQ), (2, HIDDEN, HEADS, SEQ)]
    assert all(m.kind == "eager_cold" and m.seconds > 0 for m in ms)


def test_calibrate_writes_the_cold_call_cost_and_it_loads_back(host, host_contention):
    t = get_target(str(host))
    if host_contention:     # a shared machine: left out, by design (calibration/contention.py)
        assert not t.eager_cold_call_overhead
        assert not t.sources.get("eager_cold_call_overhead", "").startswith("measured:")
        return
    assert t.eager_cold_call_overhead is not None and 0 <= t.eager_cold_call_overhead < 1e-3
    assert t.source("eager_cold_call_overhead").startswith("measured:")
    if t.eager_cold_call_curve:
        ys = [y for _, y in t.eager_cold_call_curve]
        assert ys[-1] == 1.0 and ys == sorted(ys) and min(ys) >= 0.01
