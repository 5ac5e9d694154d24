"""Timing several workloads on a shared machine: interleaved rounds, on two clocks.

Timing model A's repeats, then model B's, lets a burst of other work land on one model only and
bias it; taking one repeat of each model per round, in a rotated order, spreads any burst over all
of them. Each call is timed on two clocks: wall time (``perf_counter``), which is what a user
waits, and the calling thread's CPU time (``thread_time``), which does not count the time the
thread was descheduled for another process. With torch set to one thread every kernel runs on the
calling thread, so its CPU time is the forward pass's work; with more threads it misses the
workers' time and is not reported (``cpu=None``). Each call's minor page faults are counted too
(Linux): the fresh pages the run mapped in, which the CPU model charges for large buffers.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .timer import spread

__all__ = ["Samples", "interleaved_samples"]


@dataclass
class Samples:
    """Seconds of each timed call of one workload, on the wall clock and the thread's CPU clock."""

    wall: list[float]
    cpu: list[float] | None
    #: Minor page faults of each call (the OS mapping fresh pages in), where the OS reports them
    #: per thread (Linux); empty elsewhere.
    faults: list[int] = field(default_factory=list)

    @property
    def wall_median(self) -> float:
        return statistics.median(self.wall)

    @property
    def cpu_median(self) -> float | None:
        return statistics.median(self.cpu) if self.cpu else None

    @property
    def wall_spread(self) -> float:
        return spread(self.wall)

    @property
    def cpu_spread(self) -> float | None:
        return spread(self.cpu) if self.cpu else None


def interleaved_samples(fns: Sequence[Callable[[], object]], *, warmup: int = 2, rounds: int = 7,
                        min_seconds: float = 0.05, thread_clock: bool = True) -> list[Samples]:
    """``rounds`` rounds over ``fns`` in an order rotated each round, after ``warmup`` calls of
    each; a call shorter than ``min_seconds`` (judged on the last warm-up) is repeated within its
    turn until the turn lasts that long, each call a sample. ``thread_clock=False`` (torch running
    several threads) leaves the CPU clock out."""
    calls = []
    for fn in fns:
        last = 0.0
        for _ in range(max(warmup, 1)):
            t0 = time.perf_counter()
            fn()
            last = time.perf_counter() - t0
        calls.append(max(1, min(50, math.ceil(min_seconds / max(last, 1e-6)))))
    out = [Samples([], [] if thread_clock else None) for _ in fns]
    n = len(fns)
    for r in range(rounds):
        for j in range(n):
            i = (j + r) % n
            for _ in range(calls[i]):
                f0 = _minor_faults()
                c0, w0 = time.thread_time(), time.perf_counter()
                fns[i]()
                w1, c1 = time.perf_counter(), time.thread_time()
                f1 = _minor_faults()
                if f0 is not None and f1 is not None:
                    out[i].faults.append(f1 - f0)
                out[i].wall.append(w1 - w0)
                cpu = out[i].cpu
                if cpu is not None:
                    cpu.append(c1 - c0)
    return out


def _minor_faults() -> int | None:
    """The calling thread's minor page faults so far (Linux), or None where not reported."""
    try:
        import resource
    except ImportError:      # not a Unix
        return None
    who = getattr(resource, "RUSAGE_THREAD", None)
    return None if who is None else resource.getrusage(who).ru_minflt
