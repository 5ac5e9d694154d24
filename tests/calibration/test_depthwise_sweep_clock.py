"""The depthwise layers are timed and summarized as every other CPU case is: the smaller of wall and
thread-CPU time per call, the median over turns (one torch thread), not a wall-clock lower
quartile, which predicted every depthwise layer fast against medians elsewhere; one call per turn
with no warm-up, several turns per round."""

from __future__ import annotations

import pytest

from narrowpipe.calibration import depthwise_sweep as dw
from narrowpipe.calibration.rounds import Clocks, measure_in_rounds

pytestmark = pytest.mark.timing   # it measures this host: the other test workers wait (tests/host_lock.py)


def test_depthwise_cases_take_the_median_of_thread_clock_turns(one_thread):
    torch = pytest.importorskip("torch")
    cases = dw.depthwise_cases(turns=3)
    assert len(cases) == len(dw.DEPTHWISE_SHAPES)
    assert all(c.warmup == 0 and c.max_calls == 1 and c.turns == 3 and c.skip_faulted for c in cases)
    # a wall clock at which every call takes 1 s, a thread clock at which the k-th timed call of a
    # layer takes k ms: over 5 rounds of 3 turns, each layer's samples are 1..15 ms
    wall, cpu, calls = [0.0], [0.0], {id(c): 0 for c in cases}

    def timed(case):
        def call() -> None:
            calls[id(case)] += 1
            wall[0] += 1.0
            cpu[0] += max(calls[id(case)] - 1, 0) * 1e-3       # the warm-up call is the 0th
        return call
    for c in cases:
        c.fn = timed(c)
    with torch.no_grad():
        ms = measure_in_rounds(cases, 5, clocks=Clocks(wall=lambda: wall[0], thread=lambda: cpu[0],
                                                       faults=lambda: 0), warmup=1)
    assert [len(m.rounds) for m in ms] == [15] * len(ms)
    # the median of 1..15 ms is 8 ms (the lower quartile would be 4.5 ms, the wall 1 s)
    assert [round(m.seconds * 1e3, 6) for m in ms] == [8.0] * len(ms)
