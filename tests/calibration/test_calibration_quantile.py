"""Calibration takes the median of thread-clock samples (what a forward pays, as validation
measures it) and the lower quartile of wall-clock ones (which rejects descheduling)."""

from __future__ import annotations

import pytest

from narrowpipe.calibration import sweeps, timer


@pytest.fixture()
def five_samples(monkeypatch):
    monkeypatch.setattr(timer, "time_samples", lambda fn, **kw: [5.0, 1.0, 4.0, 2.0, 3.0])


def test_one_cpu_thread_takes_the_median(one_thread, five_samples):
    assert timer.calibration_quantile("cpu") == 0.5
    assert sweeps.median_time(lambda: None) == 3.0


def test_wall_clock_samples_take_the_lower_quartile(five_samples):
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert timer.calibration_quantile("cpu") == 0.25
        assert sweeps.median_time(lambda: None) == 2.0
    finally:
        torch.set_num_threads(threads)
    assert timer.calibration_quantile("cuda:0") == 0.25
