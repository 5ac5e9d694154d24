"""Timing that engineers trust: warm-up, repeats until a minimum measured time, median.

On a CUDA device the clock is CUDA events around the call (with a synchronize), on the CPU
``perf_counter``. One function for both so CPU and GPU calibrations measure the same way.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

__all__ = ["median_time"]


def median_time(fn: Callable[[], object], *, device: str = "cpu", warmup: int = 2, repeats: int = 5,
                min_seconds: float = 0.02, max_repeats: int = 200) -> float:
    """Median seconds of ``fn()``; repeats grow until their total reaches ``min_seconds``."""
    for _ in range(warmup):
        fn()
    if device.startswith("cuda"):
        return _cuda_median(fn, repeats, min_seconds, max_repeats)
    samples: list[float] = []
    total = 0.0
    while len(samples) < repeats or (total < min_seconds and len(samples) < max_repeats):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        samples.append(dt)
        total += dt
    return statistics.median(samples)


def _cuda_median(fn: Callable[[], object], repeats: int, min_seconds: float, max_repeats: int) -> float:
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
    return statistics.median(samples)
