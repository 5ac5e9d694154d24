"""The depthwise sweep times and summarizes its calls as every other CPU sweep does: the smaller of
wall and thread-CPU time per call, the median of those (one torch thread), not a wall-clock lower
quartile, which predicted every depthwise layer fast against medians elsewhere."""

from __future__ import annotations

from types import SimpleNamespace

from narrowpipe.calibration import depthwise_sweep as dw
from narrowpipe.calibration import timer


class _Clocks:
    """A wall clock at which every call takes 1 s, and a thread clock at which every timed call in
    round r takes r + 1 ms: over 15 rounds of one call, each layer's samples are 1..15 ms."""

    def __init__(self, calls: int, layers: int) -> None:
        self.calls, self.layers = calls, layers
        self.wall = 0.0
        self.cpu = 0.0
        self.reads = 0

    def perf_counter(self) -> float:
        self.wall += 0.5
        return self.wall

    def thread_time(self) -> float:
        n = self.reads
        self.reads += 1
        if n % 2 == 0:                         # the read before a call
            return self.cpu
        sample = n // 2                         # the read after the sample-th timed call
        per_round = self.calls * self.layers
        self.cpu += (sample // per_round + 1) * 1e-3
        return self.cpu


def test_depthwise_sweep_takes_the_median_of_thread_clock_samples(one_thread, monkeypatch):
    clocks = _Clocks(calls=1, layers=len(dw.DEPTHWISE_SHAPES))
    clock = SimpleNamespace(perf_counter=clocks.perf_counter, thread_time=clocks.thread_time)
    monkeypatch.setattr(timer, "time", clock)          # the sweep times each call with timer.timed_call
    monkeypatch.setattr(dw, "_minor_faults", lambda: 0)
    ms = list(dw.depthwise_sweep(rounds=15, calls=1))
    assert len(ms) == len(dw.DEPTHWISE_SHAPES)
    # 1..15 ms per layer: the median is 8 ms (the lower quartile would be 5 ms, the wall 1 s)
    assert [round(m.seconds * 1e3, 6) for m in ms] == [8.0] * len(ms)
