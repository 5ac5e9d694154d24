"""Was the machine shared while calibrate measured? The evidence calibrate has, and what it keeps out.

Every sample at one torch thread is the smaller of its wall and thread-CPU time (:mod:`.timer`), so
a rate survives other processes taking the core. The eager host-call terms do not: they are a few
microseconds per call of Python, dispatcher and allocator state, which another process's cache
traffic evicts between calls, and the refills count on the thread's own clock. QA (qa94) ran
``calibrate --quick`` on a core shared with other sessions: 72-93 s of wall time for 37 s of the
thread's CPU time, the 4-layer eager stack's rounds at 1400, 2843 and 3153 us (536 us median in the
committed quiet-host file), and it wrote ``eager_op_overhead_us = 37.65`` (committed host files:
2.9-6.6) without a word.

Two signs, either enough:

* the measuring thread held the CPU for under :data:`MIN_CPU_SHARE` of the run's wall time (at one
  torch thread, where that thread runs every kernel; a quiet run spends ~all of it on the CPU);
* the eager reference's rounds disagree: their median over their fastest above
  :data:`MAX_ROUND_RATIO` (quiet files: 1.03 on the EPYC VM, 1.21 on the Xeon VM; QA's busy run 2.03).

Then calibrate warns, naming the numbers, and leaves the host-call terms out of the target file
(:data:`HOST_CALL_FIELDS`; the raw measurements file keeps every sample): "noise does not reach the
file". The rates stay: they are on the thread clock.
"""

from __future__ import annotations

import json
import statistics
import warnings
from collections.abc import Sequence
from pathlib import Path

from .cases import Case
from .robust import CalibrationWarning

__all__ = ["MIN_CPU_SHARE", "MAX_ROUND_RATIO", "HOST_CALL_FIELDS", "contention", "warn_contention", "file_clocks",
           "busy_validation"]

#: A measuring thread on the CPU for less of the wall time than this shared its core.
MIN_CPU_SHARE = 0.8
#: The eager reference's median round over its fastest above this: its rounds measured the machine.
MAX_ROUND_RATIO = 1.5
#: The terms a contended calibration leaves out (eager per-op, module-call, cold-call and evicted-call costs).
HOST_CALL_FIELDS = ("eager_op_overhead", "eager_module_call_overhead", "eager_cold_call_overhead",
                    "eager_cold_call_curve", "eager_evicted_call_overhead", "eager_evicted_call_curve",
                    "eager_evicted_call_self_curve", "evicted_read_bandwidth", "evicted_read_curve")


def contention(wall_s: float | None, cpu_s: float | None, threads: int,
               reference_rounds: Sequence[float] = ()) -> list[str]:
    """The signs that the machine was shared while measuring, in words (empty: none). ``cpu_s`` is
    the measuring thread's CPU time over the ``wall_s`` of the run (judged at one torch thread
    only); ``reference_rounds`` are the eager reference stack's seconds per round."""
    signs = []
    if threads == 1 and wall_s and cpu_s is not None and cpu_s < MIN_CPU_SHARE * wall_s:
        signs.append(f"the measuring thread ran {cpu_s:.3g} s on the CPU in {wall_s:.3g} s of wall time "
                     f"({cpu_s / wall_s:.0%}; a quiet machine gives it ~all of it): other processes shared the core")
    rounds = [r for r in reference_rounds if r > 0]
    if len(rounds) >= 2:
        ratio = statistics.median(rounds) / min(rounds)
        if ratio > MAX_ROUND_RATIO:
            listed = ", ".join(f"{r * 1e6:.0f}" for r in rounds[:8]) + (", ..." if len(rounds) > 8 else "")
            signs.append(f"the eager reference stack's rounds ({listed} us) have a median {ratio:.2g}x their "
                         f"fastest (quiet runs: under {MAX_ROUND_RATIO:g}x)")
    return signs


def warn_contention(signs: list[str], left_out: Sequence[str]) -> None:
    """One warning naming the evidence and the fields left out of the target file."""
    if not signs:
        return
    dropped = ", ".join(left_out) if left_out else "nothing (none was measured)"
    warnings.warn("calibrate: the machine was busy while measuring: " + "; ".join(signs) + ". The eager host-call "
                  f"terms are that noise, not this machine's, so they are left out of the target file ({dropped}: its "
                  "predictions leave those costs out, as a host file written before them does; the measurements "
                  "file keeps the samples); the rates are on the thread clock and kept. Rerun calibrate on a quiet "
                  "machine for them",
                  CalibrationWarning, stacklevel=3)


def busy_validation(cases: Sequence[Case]) -> str | None:
    """Why ``validate``'s errors may measure the machine, not the model (None: no sign): the rows
    timed on both clocks (:class:`~.cases.Case` ``measured_s`` wall, ``cpu_s`` the thread's, one torch
    thread) held the CPU for under :data:`MIN_CPU_SHARE` of their wall time. QA: gpt2 measured 1 s of
    wall time for 499 ms of the thread's CPU time and its per-op rows read -50 to -60% with no word."""
    both = [(c.measured_s, c.cpu_s) for c in cases if c.cpu_s is not None and c.measured_s > 0 and not c.impossible]
    wall, cpu = sum(w for w, _ in both), sum(t for _, t in both)
    if not both or cpu >= MIN_CPU_SHARE * wall:
        return None
    return (f"validate: the machine was busy while measuring: the whole-forward rows took {wall:.3g} s of wall time "
            f"for {cpu:.3g} s of the thread's CPU time ({cpu / wall:.0%}; a quiet machine gives it ~all of it). "
            "'error' is on the wall clock, which counts the time the thread waited for the core; 'error vs CPU' "
            "is on the thread's CPU clock, which the summary judges the model rows on; per-op rows have the wall "
            "clock only (the profiler's), so their errors count that wait too. Rerun on a quiet machine")


def file_clocks(path: str | Path) -> tuple[float | None, float | None]:
    """A measurements JSON's wall and measuring-thread CPU seconds (``seconds``, ``thread_seconds``),
    None where it does not say (a file written before ``thread_seconds``, or not JSON)."""
    try:
        raw = json.loads(Path(path).read_text())
        wall, cpu = raw.get("seconds"), raw.get("thread_seconds")
    except (OSError, ValueError, AttributeError):
        return None, None
    def number(x: object) -> float | None:
        return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None
    return number(wall), number(cpu)
