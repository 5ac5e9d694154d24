"""A predicted-vs-measured case and the error summary every validation reports."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Case", "summarize"]


@dataclass
class Case:
    group: str          # "matmul", "conv", "elementwise", "model", or an op type
    name: str
    measured_s: float
    predicted_s: float
    spread: float | None = None   # interquartile range / median of the measured repeats
    #: The same repeats on the calling thread's CPU clock (one torch thread only), which other
    #: processes disturb less than the wall clock: what a busy machine's validation is judged on.
    cpu_s: float | None = None
    cpu_spread: float | None = None
    #: How the row was measured and what its prediction includes, in words (clock, warm-ups, rounds
    #: and samples kept; with or without eager glue): a reader compares like with like.
    how: str | None = None
    #: Measured faster than the target's peaks allow (its FLOPs at the peak rate, its bytes at the
    #: peak bandwidth, beyond ``TOO_FAST``): a wrong target, a miscount or a mis-attributed time, not
    #: a measurement. Shown as a flag, never as a time, and left out of :func:`summarize`.
    impossible: bool = False

    @property
    def error(self) -> float:
        return (self.predicted_s - self.measured_s) / self.measured_s if self.measured_s else 0.0

    @property
    def cpu_error(self) -> float | None:
        return (self.predicted_s - self.cpu_s) / self.cpu_s if self.cpu_s else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "error": self.error, "cpu_error": self.cpu_error}


def summarize(cases: list[Case]) -> dict[str, dict[str, float | int | str]]:
    """Median and max absolute error per group, on the clock validation is judged on: the thread's
    CPU clock where every case of the group was measured on it (one torch thread), else the wall
    clock; each group says which (``clock``). The wall clock alone let a loaded machine read a
    model's median error 50% where its CPU-clock errors were -3.7% and -1.3%. Cases measured faster
    than the target allows (:attr:`Case.impossible`) are no evidence either way: they are counted
    (``flagged``) but not judged, and a group of only such cases has no error to report."""
    out: dict[str, dict[str, float | int | str]] = {}
    for group in sorted({c.group for c in cases}):
        members = [c for c in cases if c.group == group and not c.impossible]
        flagged = sum(c.group == group and c.impossible for c in cases)
        if not members:
            continue
        cpu = all(c.cpu_error is not None for c in members)
        errs = [abs(c.cpu_error if cpu and c.cpu_error is not None else c.error) for c in members]
        out[group] = {"cases": len(errs), "clock": "cpu" if cpu else "wall",
                      "median_abs_error": statistics.median(errs), "max_abs_error": max(errs)}
        if flagged:
            out[group]["flagged"] = flagged
    return out
