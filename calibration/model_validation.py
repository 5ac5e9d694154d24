"""Whole models against the machine: eager forward passes measured in interleaved rounds, and predicted.

Measured side: every (model, batch) of a run in interleaved rounds (:mod:`.interleave`) on the wall
clock and, at one torch thread, the thread's CPU clock. Per op type, ``torch.profiler``'s times of
the outermost aten calls: wall times (its ``cpu_time_total`` is the wall clock between the op's start
and end), the least of three profiled forwards (:data:`OP_CLOCK`). They have no CPU-clock column:
the profiler has no per-op CPU clock, and a forward's CPU/wall ratio says nothing about one op (QA
on a shared core: the thread lost the CPU mostly between ops, so ops rescaled by a ratio of 0.13-0.22
read 216 GFLOP/s on a core whose fp32 peak is 78). An op's wall time is never shorter than its work,
so a row faster than the target's peaks allow (:func:`physical_floor_s`) is flagged, not reported as
a measurement. Predicted side: the same module lowered with ``from_torch`` and timed on the
calibrated target with no fusion; the model row with the eager per-op and module-call glue (eager
runs one kernel per op, from Python), the per-op rows without it (``eager_overhead=False``), as the
profiler's in-op times have none.

Two probes run in the same rounds: a square GEMM and the plain-torch transformer stack
``calibrate`` fits the eager overhead on, both shapes calibration measured. Right after
``calibrate`` their predictions match them; what they are off by later is how far the machine
(other processes, clocks, caches) drifted from the state it was calibrated in, which the model
errors then include: a reader can tell a model error from a machine that changed under it.
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..backends import Target, get_target
from ..costmodel.analyze import analyze
from ..costmodel.diagnose.labels import TOO_FAST
from ..costmodel.execution.common import matrix_rate, vector_rate
from ..frontends.torch.frontend import from_torch
from ..ir import DType
from .cases import Case
from .contention import busy_validation
from .guards import (
    ValidationWarning,
    check_fits_in_memory,
    check_target_family,
    check_threads,
    quiet_native_stderr,
    warn_if_not_this_machine,
)
from .interleave import Samples, interleaved_samples
from .validation_models import (
    MODELS,
    build_validation_model,
    validation_inputs,
    validation_label,
    validation_param_count,
)

__all__ = ["ModelValidation", "ValidationRun", "validate_run", "validate_models", "validate_model", "PROBE_GEMM",
           "physical_floor_s", "OP_CLOCK", "OP_RUNS"]

#: The GEMM probe's side: one of calibration's square GEMMs (``sweeps.MATMUL_SQUARES``).
PROBE_GEMM = 768
#: Profiled forwards per model; each op type keeps its least total over them (other processes only
#: ever lengthen an op's wall time).
OP_RUNS = 3
#: What a per-op row's measured time is, and what its prediction is.
OP_CLOCK = (f"ops' own wall time (torch.profiler, outermost aten calls, least of {OP_RUNS} profiled forwards); "
            "predicted bare (no eager glue: the profiler's in-op times have none)")


@dataclass
class ModelValidation:
    model: str
    batch: int
    seq: int | None
    end_to_end: Case
    by_op: list[Case] = field(default_factory=list)
    kernels: int | None = None    # kernels the prediction launched (each pays dispatch and eager glue)
    #: Bytes of fresh pages the prediction charges (buffers of >= fresh_page_threshold), and the
    #: bytes the measured forwards faulted in (median over the repeats; None where the OS does not say).
    fresh_bytes: int | None = None
    faulted_bytes: int | None = None
    module_calls: int | None = None   # nn.Module calls of the exported forward (each pays a module call)
    #: Bytes the forward keeps (weights + peak live activations): what passes through the caches
    #: between two runs of one op, which sets the cold-state cost of its host calls.
    footprint: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "batch": self.batch, "seq": self.seq, "end_to_end": self.end_to_end.to_dict(),
                "by_op": [c.to_dict() for c in self.by_op], "kernels": self.kernels,
                "fresh_bytes": self.fresh_bytes, "faulted_bytes": self.faulted_bytes, "module_calls": self.module_calls,
                "footprint": self.footprint}


@dataclass
class ValidationRun:
    """A run's models, and the probes measured in the same rounds (empty when not asked for)."""

    models: list[ModelValidation]
    probes: list[Case] = field(default_factory=list)


def validate_model(name: str, target: Target | str, *, batch: int = 1, seq: int = 128, tiny: bool = False,
                   profile: bool = True, repeats: int = 5) -> ModelValidation:
    """One model at one batch size: :func:`validate_run` with a single subject."""
    return validate_run([name], target, batches=(batch,), seq=seq, tiny=tiny, profile=profile,
                        rounds=repeats, probes=False).models[0]


def validate_models(names: Sequence[str], target: Target | str, *, batches: Sequence[int] = (1, 8), seq: int = 128,
                    tiny: bool = False, profile: bool = True, rounds: int = 7, warmup: int = 2,
                    progress: Callable[[str], None] | None = None) -> list[ModelValidation]:
    """:func:`validate_run` without probes: the models' results."""
    return validate_run(names, target, batches=batches, seq=seq, tiny=tiny, profile=profile, rounds=rounds,
                        warmup=warmup, progress=progress, probes=False).models


def validate_run(names: Sequence[str], target: Target | str, *, batches: Sequence[int] = (1, 8), seq: int = 128,
                 tiny: bool = False, profile: bool = True, rounds: int = 7, warmup: int = 2, probes: bool = True,
                 progress: Callable[[str], None] | None = None) -> ValidationRun:
    """Measure eager forward passes of every model at every batch size, interleaved with each other
    (and with the probes), and compare them, and their per-op-type times, with the prediction of the
    same module's export. Refuses a non-CPU target, a calibrated host file at other threads than torch
    runs (:func:`.guards.check_threads`) and models that would not fit in this machine's memory, before
    building anything; warns where the target does not look like this machine."""
    import torch

    target = get_target(target)
    check_target_family(target)
    check_threads(target, torch.get_num_threads())
    warn_if_not_this_machine(target)
    check_fits_in_memory(" + ".join(names), sum(validation_param_count(n, tiny) for n in names))
    subjects = []
    for name in names:
        model, _, _ = build_validation_model(name, 1, seq, tiny)
        for b in batches:
            subjects.append((name, b, model, validation_inputs(name, model, b, seq)))
    probe_list = _probes() if probes else []
    one_thread = torch.get_num_threads() == 1
    with torch.no_grad():
        fns = [partial(_forward, m, (), kw) for _, _, m, kw in subjects]
        fns += [partial(_forward, m, args, {}) for _, m, args in probe_list]
        samples = interleaved_samples(fns, warmup=warmup, rounds=rounds, min_seconds=0.05, thread_clock=one_thread)
    results = []
    for (name, b, model, kwargs), s in zip(subjects, samples):
        graph = from_torch(model, (), kwargs)
        report = analyze(graph, target, fusion="none")
        assert report.time_s is not None and report.timing is not None
        label = validation_label(name, b, seq)
        how = _model_clock(s, warmup, rounds) + "; predicted with the eager per-op and module-call glue"
        result = ModelValidation(name, b, seq if MODELS[name].has_seq else None,
                                 _case("model", label, s, report.time_s, how), kernels=report.timing.kernels,
                                 fresh_bytes=_fresh_bytes(graph, target),
                                 faulted_bytes=int(statistics.median(s.faults)) * _PAGE if s.faults else None,
                                 module_calls=graph.meta.get("module_calls"),
                                 footprint=report.timing.memory_required)
        if profile:   # the bare ops, as the profiler times them: no Python glue between them
            bare = analyze(graph, target, fusion="none", eager_overhead=False)
            result.by_op = _by_op(bare, target, label, model, kwargs)
        results.append(result)
        if progress:
            progress(label)
    probe_cases = []
    for (label, module, args), s in zip(probe_list, samples[len(subjects):]):
        report = analyze(from_torch(module, args), target, fusion="none")
        assert report.time_s is not None
        probe_cases.append(_case("probe", label, s, report.time_s,
                                 _model_clock(s, warmup, rounds) + "; predicted with the eager glue"))
    busy = busy_validation([r.end_to_end for r in results] + probe_cases)
    if busy:
        warnings.warn(busy, ValidationWarning, stacklevel=2)
    return ValidationRun(results, probe_cases)


def _fresh_bytes(graph: Any, target: Target) -> int:
    """Bytes of the buffers the CPU model charges fresh pages for, for one forward."""
    from ..backends.defaults import default_value
    from ..costmodel.execution.fresh_pages import fresh_bytes
    from ..costmodel.interpreter import interpret
    from ..costmodel.kernels import fuse
    table = interpret(graph, {})
    threshold = default_value("cpu", "fresh_page_threshold", getattr(target, "fresh_page_threshold", None))
    return sum(fresh_bytes(k, table, threshold) for k in fuse(table, "none"))


def _page_size() -> int:
    try:
        import resource
    except ImportError:
        return 4096
    return resource.getpagesize()


_PAGE = _page_size()


def _case(group: str, label: str, s: Samples, predicted: float, how: str) -> Case:
    return Case(group, label, s.wall_median, predicted, s.wall_spread, s.cpu_median, s.cpu_spread, how)


def _model_clock(s: Samples, warmup: int, rounds: int) -> str:
    """How a whole-forward row was measured: warm-ups, rounds, samples, clocks."""
    clocks = "the wall clock and the thread's CPU clock" if s.cpu is not None else "the wall clock"
    return (f"whole forward, median of {len(s.wall)} calls in {rounds} interleaved rounds after {max(warmup, 1)} "
            f"warm-up call(s), on {clocks}")


def _probes() -> list[tuple[str, Any, tuple[Any, ...]]]:
    """(label, module, args) of the drift probes: shapes calibration measured."""
    import torch

    from .eager import EAGER_MODEL, eager_model

    class MatMul(torch.nn.Module):
        def forward(self, a: Any, b: Any) -> Any:
            return a @ b

    n = PROBE_GEMM
    g = torch.Generator().manual_seed(0)
    stack, stack_args = eager_model(*EAGER_MODEL)
    return [(f"GEMM {n}x{n}x{n}", MatMul(), (torch.randn(n, n, generator=g), torch.randn(n, n, generator=g))),
            ("eager transformer stack {}x{}x{}x{}".format(*EAGER_MODEL), stack, stack_args)]


def _forward(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return model(*args, **kwargs)


def _by_op(report: Any, target: Target, label: str, model: Any, kwargs: dict[str, Any]) -> list[Case]:
    """Predicted seconds per source (aten) op type, from ``report`` (the bare ops, no eager glue),
    against torch.profiler's wall times for the same ops (:data:`OP_CLOCK`); a measured time under
    the op type's :func:`physical_floor_s` is flagged (:attr:`.cases.Case.impossible`)."""
    predicted: dict[str, float] = {}
    floor: dict[str, float] = {}
    for row in report.ops:
        if row.time_s:
            key = row.source_op.split(".")[1] if row.source_op.startswith("aten.") else row.source_op
            predicted[key] = predicted.get(key, 0.0) + row.time_s
            floor[key] = floor.get(key, 0.0) + physical_floor_s(row.flops, row.bytes, row.dtype, target)
    measured = _profile_top_level(model, (), kwargs, set(predicted))
    return [Case(op, f"{label} {op}", measured[op], predicted[op], how=OP_CLOCK,
                 impossible=measured[op] * TOO_FAST < floor[op])
            for op in sorted(predicted, key=lambda k: -predicted[k]) if op in measured]


def physical_floor_s(flops: int, nbytes: int, dtype: str, target: Target) -> float:
    """The least time ``target`` can do this work in: its FLOPs at the fastest rate it lists for the
    dtype (matrix or vector units), or its bytes at its peak bandwidth, whichever is longer. Both
    counts are lower bounds on the real work (compulsory bytes), so a wall time below this (beyond
    ``TOO_FAST``) is not the machine's: another target, or time the profiler put elsewhere."""
    try:
        dt = DType.parse(dtype) if dtype else DType.FP32
    except (ValueError, KeyError):
        dt = DType.FP32
    rate = max(matrix_rate(target, dt).flops_per_s, vector_rate(target, dt if dt.is_float else DType.FP32).flops_per_s)
    compute = flops / rate if rate > 0 else 0.0
    memory = nbytes / target.memory_bandwidth if target.memory_bandwidth else 0.0
    return max(compute, memory)


def _profile_top_level(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], ops: set[str]) -> dict[str, float]:
    """Wall seconds of the outermost aten op calls named in ``ops`` per op type: the least of
    :data:`OP_RUNS` profiled runs (other processes only ever lengthen them). No CPU clock: the
    profiler has none per op, and scaling each op by the forward's CPU/wall ratio charged every op
    the descheduling that happened between ops (QA: addmm at 2.8x the core's fp32 peak)."""
    import os
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    import torch
    from torch.profiler import ProfilerActivity, profile
    runs: list[dict[str, float]] = []
    with torch.no_grad():
        model(*args, **kwargs)
        for _ in range(OP_RUNS):
            with quiet_native_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
                model(*args, **kwargs)
            totals: dict[str, float] = {}
            for ev in prof.events():
                name = ev.name.removeprefix("aten::")
                if name not in ops:
                    continue
                parent = ev.cpu_parent
                nested = False
                while parent is not None:
                    if parent.name.removeprefix("aten::") in ops:
                        nested = True
                        break
                    parent = parent.cpu_parent
                if not nested:
                    totals[name] = totals.get(name, 0.0) + ev.cpu_time_total / 1e6
            runs.append(totals)
    return {k: min(r.get(k, 0.0) for r in runs) for k in runs[0]}
