"""Fitting a chip's kernel terms to per-kernel measurements, through the execution model itself.

Each measured kernel becomes a one-op program (built once); a candidate target is the chip with some
fields replaced, and the program is re-timed on it, so the fit sees exactly the tiling, wave and
algorithm choices a prediction makes. The fields fitted per family are the mechanisms' parameters
(GPU: the GEMM latency floor, wave fill and drain, exposed epilogue, the plateaus, and where the
target has them the library's narrowest tile, weight-gradient and direct-convolution plateaus; TPU:
the MXU fold overhead and the achievable efficiency), each searched over a grid of physically plausible values
(:mod:`.grid_search`: single, pair and coupled moves until none improves) on a robust score, median
|log error| + half the 90th percentile, ties broken by the mean over every row. Only the fields some
row's prediction depends on are fitted (:func:`constrained_fields`); the others keep their values and
sources.

Measurement timing conventions (see :mod:`.kernel_measurements`): a ``kernel`` time excludes the
launch gap narrowpipe adds per kernel; a ``host`` time includes the framework's per-call dispatch,
one ``host_overhead`` fitted beside the chip's terms.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backends import Target, get_target
from ..costmodel.execution import Program, TimingOptions
from ..costmodel.interpreter import interpret
from ..costmodel.timing import fused_program, time_program
from ..errors import NarrowpipeError
from .grid_search import GridSearch
from .kernel_measurements import KernelMeasurement, kernel_graph
from .vector_measurements import fusion_mode, one_kernel_program

__all__ = ["KernelCase", "kernel_cases", "predict", "FitResult", "fit_kernel_terms", "TERM_GRIDS", "OPTIONAL_TERMS",
           "errors",
           "score", "fitted_target", "constrained_fields"]

_US = 1e-6

#: The grid each fittable field is searched over (SI units), by family.
TERM_GRIDS: Mapping[str, Mapping[str, tuple[Any, ...]]] = {
    "gpu": {
        "gemm_latency": tuple(x * 0.5 * _US for x in range(0, 41)),
        "gemm_wave_overhead": tuple(x * _US for x in (0, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8)),
        "gemm_epilogue_exposed": (0.0, 0.25, 0.5, 0.75, 1.0),
        "matmul_efficiency": tuple(round(0.3 + 0.025 * i, 3) for i in range(29)),
        "matmul_efficiency_tf32": tuple(round(0.3 + 0.025 * i, 3) for i in range(29)),
        "matmul_efficiency_fp32": tuple(round(0.3 + 0.025 * i, 3) for i in range(29)),
        "gemm_min_tile": (8, 16, 32, 64, 128),
        "gemm_min_tile_fp32": (8, 16, 32, 64, 128),
        "conv_wgrad_efficiency": tuple(round(0.2 + 0.05 * i, 2) for i in range(17)),
        "conv_dgrad_strided_efficiency": tuple(round(0.2 + 0.05 * i, 2) for i in range(17)),
        "conv_direct_efficiency": tuple(round(0.05 + 0.025 * i, 3) for i in range(15)),
        "conv_winograd_rxs_efficiency": tuple(round(0.3 + 0.025 * i, 3) for i in range(29)),
        "gemm_split_k_fill": (0.03125, 0.0625, 0.125, 0.25, 0.5, 1.0),
        "gemm_split_k_smallest_tile": (False, True),
        "gemm_tile_feed_bandwidth_tf32": tuple(x * 1e9 for x in (20, 30, 40, 50, 60, 70, 80, 90, 100, 120, 140, 160,
                                                                  200, 250, 300, 400)),
        "conv_latency": tuple(x * 0.5 * _US for x in range(0, 41)),
        "conv_min_tile": (8, 16, 32, 64, 128),
        "gemm_tile_feed_bandwidth": tuple(x * 1e9 for x in (40, 50, 60, 70, 80, 90, 100, 110, 120, 140, 160, 200,
                                                             250, 300, 400)),
        "gemm_k_major_read_efficiency_fp32": tuple(round(0.3 + 0.05 * i, 2) for i in range(15)),
    },
    "tpu": {
        "mxu_fold_overhead": tuple(round(0.05 * i, 2) for i in range(21)),
        "matmul_efficiency": tuple(round(0.7 + 0.01 * i, 2) for i in range(31)),
    },
}
#: Library properties fitted only where the target already sets them (absent, the model runs
#: without the mechanism: tiles shrink to the problem, weight gradients reach the GEMM plateau).
OPTIONAL_TERMS = frozenset({"gemm_min_tile", "gemm_min_tile_fp32", "conv_wgrad_efficiency", "conv_direct_efficiency",
                            "conv_dgrad_strided_efficiency",
                            "gemm_split_k_fill", "gemm_split_k_smallest_tile", "gemm_tile_feed_bandwidth",
                            "gemm_tile_feed_bandwidth_tf32", "conv_latency", "conv_min_tile",
                            "conv_winograd_rxs_efficiency", "gemm_k_major_read_efficiency_fp32"})
#: Per-call host dispatch a ``host``-timed row includes, searched in this grid (seconds).
HOST_GRID: tuple[float, ...] = tuple(x * 5 * _US for x in range(0, 61))


@dataclass(frozen=True)
class KernelCase:
    """A measurement and its one-op program, built once for the chip's family."""

    measurement: KernelMeasurement
    program: Program


def kernel_cases(rows: Iterable[KernelMeasurement], target: Target | None = None) -> list[KernelCase]:
    """Programs for ``rows`` (each on its own chip, or on ``target``)."""
    out = []
    for m in rows:
        t = target if target is not None else get_target(m.chip)
        table = interpret(kernel_graph(m), {})
        fusion = fusion_mode(m)
        # "one" is no fusion pass (TimingOptions refuses it): the program is built as one kernel
        options = TimingOptions(allow_tf32=m.allow_tf32, fusion=None if fusion == "one" else fusion)
        program = one_kernel_program(table, options) if fusion == "one" else fused_program(table, t, options)
        out.append(KernelCase(m, program))
    return out


def predict(case: KernelCase, target: Target, host_overhead: float = 0.0) -> float:
    """Predicted seconds on ``target`` in the measurement's timing convention."""
    schedule = time_program(case.program, target)
    timing = case.measurement.timing
    if timing == "kernel":
        launched = sum(1 for t in schedule.times if t.time_s > 0)
        return max(schedule.total_s - launched * target.launch_overhead, 1e-9)
    if timing in ("host", "call"):
        return schedule.total_s + host_overhead
    return schedule.total_s


def errors(cases: Sequence[KernelCase], target: Target, host_overhead: float = 0.0) -> list[float]:
    """(predicted - measured) / measured per case."""
    return [predict(c, target, host_overhead) / c.measurement.seconds - 1 for c in cases]


def score(errs: Sequence[float]) -> float:
    """Median |log(predicted / measured)| plus half its 90th percentile: both bars matter."""
    logs = sorted(abs(math.log1p(e)) for e in errs)
    if not logs:
        return 0.0
    return statistics.median(logs) + 0.5 * logs[min(len(logs) - 1, int(0.9 * len(logs)))]


def fitted_target(target: Target, values: Mapping[str, Any], source: str) -> Target:
    """``target`` with ``values`` replaced and their sources set to ``source``."""
    sources = dict(target.sources)
    sources.update({k: source for k in values})
    return dataclasses.replace(target, **values, sources=sources)


def constrained_fields(cases: Sequence[KernelCase], target: Target, fields: Sequence[str]) -> list[str]:
    """The ``fields`` whose value moves some case's predicted time: the only ones the rows can fit.

    Each field is set in turn to its grid's first, middle and last value (the mechanisms are
    monotone in their terms, so a field the rows feel moves a prediction at one of them); one that
    moves none is left alone. This is what ties a field to the rows that can tell its value: a
    16-bit plateau to 16-bit GEMMs (where an fp32 plateau is set), the TF32 one to TF32 rows, the
    convolution library's terms to convolutions, the split-K threshold to rows with fewer tiles
    than SMs. A field no row feels would otherwise keep its value under a "fitted" source, or drift
    with whatever field it was moved beside."""
    grids = TERM_GRIDS.get(target.family, {})
    base = [predict(c, target) for c in cases]
    out = []
    for f in fields:
        grid = grids.get(f, ())
        for v in dict.fromkeys((grid[0], grid[len(grid) // 2], grid[-1])) if grid else ():
            probe = fitted_target(target, {f: v}, "probe")
            if any(abs(predict(c, probe) - b) > 1e-9 * b for c, b in zip(cases, base)):
                out.append(f)
                break
    return out


@dataclass
class FitResult:
    target: Target
    values: dict[str, Any]
    host_overhead: float
    score: float
    cases: int
    history: list[tuple[str, Any, tuple[float, ...]]] = field(default_factory=list)
    #: the fields asked for that no row's prediction depends on (left as they were)
    unconstrained: tuple[str, ...] = ()
    trials: int = 0


def fit_kernel_terms(cases: Sequence[KernelCase], target: Target, fields: Sequence[str],
                     source: str = "measured: calibrate --from-measurements", rounds: int = 30) -> FitResult:
    """Fit those of ``fields`` of ``target`` the cases constrain (:func:`constrained_fields`), and a
    host overhead if any case is host-timed, to ``cases``; only they take ``source``."""
    if not cases:
        raise NarrowpipeError(f"no measurements of {target.name!r} to fit")
    grids = TERM_GRIDS.get(target.family, {})
    unknown = [f for f in fields if f not in grids]
    if unknown:
        raise NarrowpipeError(f"cannot fit {', '.join(unknown)} of a {target.family} target; "
                              f"fittable: {', '.join(grids) or 'nothing'}")
    asked = list(fields)
    fields = constrained_fields(cases, target, asked)
    unset = [f for f in fields if getattr(target, f) is None]
    if unset:
        raise NarrowpipeError(f"cannot fit {', '.join(unset)} of {target.name!r}: the target does not set "
                              "them (give a starting value in its spec file)")
    names = [*fields, *(["host_overhead"] if any(c.measurement.timing == "host" for c in cases) else [])]

    def trial(point: Mapping[str, Any]) -> tuple[float, float]:
        # the robust score; on a tie, the mean over every row (the tenth it leaves out included)
        vals = {k: v for k, v in point.items() if k != "host_overhead"}
        errs = errors(cases, fitted_target(target, vals, source) if vals else target, point.get("host_overhead", 0.0))
        return score(errs), statistics.fmean(abs(math.log1p(e)) for e in errs)

    search = GridSearch(trial, {**{f: getattr(target, f) for f in fields}, **({"host_overhead": 0.0} if
                                                                           "host_overhead" in names else {})})
    search.descend({n: HOST_GRID if n == "host_overhead" else grids[n] for n in names}, rounds)
    values = {f: search.values[f] for f in fields}
    final = fitted_target(target, values, source) if values else target
    return FitResult(final, values, search.values.get("host_overhead", 0.0), search.best[0], len(cases),
                     search.history, tuple(f for f in asked if f not in fields), search.trials)
