"""Timing that engineers trust: warm-up, repeats until a minimum measured time, median.

On a CUDA device the clock is CUDA events around the call (with a synchronize), on the CPU
``perf_counter``. One function for both so CPU and GPU calibrations measure the same way.
Validation takes the median. Calibration takes it too where the samples are on the thread's CPU
clock (the CPU at one torch thread, below): that clock already leaves out the time other processes
took the core, and what remains of the spread (caches and memory shared with them) is paid by a
model's forward too, so a lower quantile there is a systematic fast bias (measured 1.2-2.9% on the
validation's drift probes, the same samples' 25% quantile against their median). On wall-clock
samples (CUDA events, several CPU threads) calibration keeps the lower quartile, which rejects
descheduling (:func:`calibration_quantile`).

With torch at one thread on the CPU, each call is also timed on the thread's CPU clock
(``thread_time``) and the sample is the smaller of the two: a call longer than a scheduler slice
(a large GEMM: milliseconds) is descheduled for other processes on a busy machine and its wall time
counts their time, while its CPU time does not; a short call (a 1 us dispatch) is rarely
interrupted, and its wall time is the exact one (reading the thread clock is a system call of about
0.7 us on a virtual machine, which the CPU sample includes).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

__all__ = ["median_time", "time_samples", "quantile", "spread", "calibration_quantile"]


def median_time(fn: Callable[[], object], *, device: str = "cpu", warmup: int = 2, repeats: int = 5,
                min_seconds: float = 0.02, max_repeats: int = 200, q: float = 0.5) -> float:
    """The ``q`` quantile (default the median) of ``fn()``'s seconds; repeats grow until their total
    reaches ``min_seconds``."""
    return quantile(time_samples(fn, device=device, warmup=warmup, repeats=repeats, min_seconds=min_seconds,
                                 max_repeats=max_repeats), q)


def calibration_quantile(device: str = "cpu") -> float:
    """The quantile calibration takes of its samples: the median on the thread's CPU clock (the CPU
    at one torch thread), the lower quartile on wall-clock samples."""
    return 0.5 if device == "cpu" and _one_torch_thread() else 0.25


def spread(samples: list[float]) -> float:
    """How much repeats disagree: the interquartile range over the median (0 for one sample), so a
    reader can tell a 10% prediction error from a 10% noisy measurement."""
    if len(samples) < 2:
        return 0.0
    med = statistics.median(samples)
    return (quantile(samples, 0.75) - quantile(samples, 0.25)) / med if med > 0 else 0.0


def time_samples(fn: Callable[[], object], *, device: str = "cpu", warmup: int = 2, repeats: int = 5,
                 min_seconds: float = 0.02, max_repeats: int = 200) -> list[float]:
    """Seconds of each timed call of ``fn`` after ``warmup`` calls; at least ``repeats`` calls, more
    until their total reaches ``min_seconds`` (at most ``max_repeats``)."""
    for _ in range(warmup):
        fn()
    if device.startswith("cuda"):
        return _cuda_samples(fn, repeats, min_seconds, max_repeats)
    thread_clock = _one_torch_thread()
    samples: list[float] = []
    total = 0.0
    while len(samples) < repeats or (total < min_seconds and len(samples) < max_repeats):
        dt = timed_call(fn, thread_clock)
        samples.append(dt)
        total += dt
    return samples


def timed_call(fn: Callable[[], object], thread_clock: bool) -> float:
    """Seconds of one call of ``fn`` on the CPU: the smaller of wall and thread-CPU time when
    ``thread_clock`` (see the module docstring for why), else wall time."""
    c0 = time.thread_time() if thread_clock else 0.0
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return min(dt, time.thread_time() - c0) if thread_clock else dt


def _one_torch_thread() -> bool:
    """Whether every torch kernel runs on the calling thread (so its CPU clock sees all the work)."""
    import sys
    torch = sys.modules.get("torch")
    return torch is not None and torch.get_num_threads() == 1


def quantile(samples: list[float], q: float) -> float:
    """The ``q`` quantile of ``samples`` (the median exactly when q = 0.5)."""
    if q == 0.5:
        return statistics.median(samples)
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _cuda_samples(fn: Callable[[], object], repeats: int, min_seconds: float, max_repeats: int) -> list[float]:
    import torch
    samples: list[float] = []
    total = 0.0
    torch.cuda.synchronize()
    while len(samples) < repeats or (total < min_seconds and len(samples) < max_repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        dt = start.elapsed_time(end) / 1e3
        samples.append(dt)
        total += dt
    return samples
