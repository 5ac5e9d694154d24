"""Calibration takes the median of thread-clock samples (what a forward pays, as validation
measures it) and the lower quartile of wall-clock ones (which rejects descheduling)."""

from __future__ import annotations

import pytest

from narrowpipe.calibration import timer
from narrowpipe.calibration.measurement import Case
from narrowpipe.calibration.rounds import Clocks, measure_in_rounds

pytestmark = pytest.mark.timing   # it measures this host: the other test workers wait (tests/host_lock.py)


def _five_turns(thread_clock: bool) -> float:
    """One case whose five turns take 5, 1, 4, 2 and 3 s (on both clocks)."""
    now = [0.0]
    seconds = iter([9.0, 5.0, 1.0, 4.0, 2.0, 3.0])      # the warm-up call, then one per round

    def call() -> None:
        now[0] += next(seconds)
    clocks = Clocks(wall=lambda: now[0], thread=lambda: now[0], faults=lambda: 0)
    case = Case("x", "fp32", (1,), 0, 0, call, warmup=0, max_calls=1)
    return measure_in_rounds([case], 5, clocks=clocks, warmup=1, thread_clock=thread_clock)[0].seconds


def test_one_cpu_thread_takes_the_median(one_thread):
    assert timer.calibration_quantile("cpu") == 0.5
    assert _five_turns(thread_clock=True) == 3.0


def test_wall_clock_samples_take_the_lower_quartile():
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert timer.calibration_quantile("cpu") == 0.25
        assert _five_turns(thread_clock=False) == 2.0
    finally:
        torch.set_num_threads(threads)
    assert timer.calibration_quantile("cuda:0") == 0.25
