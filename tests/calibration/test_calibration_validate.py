"""A small validation run in CI: predictions within a loose bound of eager torch on this machine.

The full acceptance run (per-op median <= 20%, end-to-end <= 25% on GPT-2, BERT-base, ResNet-50 at
batch 1 and 8) is ``benchmarks/cpu_validate.py``; here a quick calibration and a few held-out cases
keep the machinery honest without minutes of measurement.
"""

from __future__ import annotations

import statistics

import pytest

torch = pytest.importorskip("torch")

from narrowpipe.calibration.validate import op_sweep, validate_model  # noqa: E402

pytestmark = pytest.mark.timing   # it measures this host: the other test workers wait (tests/host_lock.py)


def test_held_out_op_predictions_within_a_loose_bound(host, one_thread):
    # every elementwise case (1.3 s): the median of four flipped on CI when two sat on a cache step
    # (a 12 MB add in a 32 MB L3 read 264-515 us in one run against 544 us predicted)
    cases = op_sweep(host, groups=("matmul", "conv"), limit=4) + op_sweep(host, groups=("elementwise",))
    assert {c.group for c in cases} == {"matmul", "conv", "elementwise"}
    assert sum(c.group == "elementwise" for c in cases) >= 10
    for group in ("matmul", "conv", "elementwise"):
        errors = [abs(c.error) for c in cases if c.group == group]
        assert statistics.median(errors) < 0.6, (group, [(c.name, round(c.error, 2)) for c in cases])


def test_tiny_model_end_to_end_within_a_loose_bound(host, one_thread):
    # seq 128 as in the acceptance run: at seq 32 the 2-layer model is so small that per-op Python and
    # module overhead (9-13 us per op measured here, against the 1.8 us dispatch of a bare op that
    # calibrate fits) is most of its time, and the prediction fell to 0.38-0.55x of the measurement
    result = validate_model("bert-base", host, batch=2, seq=128, tiny=True)
    e = result.end_to_end
    assert e.measured_s > 0 and e.predicted_s > 0
    # judged on the thread's CPU clock, as validation is (README): the wall clock counts the time this
    # thread waited for other processes on a shared machine (2.92 ms predicted vs 11.3 ms wall, 3.38 CPU)
    measured = e.cpu_s if e.cpu_s else e.measured_s
    assert 0.3 < e.predicted_s / measured < 3.0
    assert result.by_op and all(c.measured_s > 0 for c in result.by_op)
