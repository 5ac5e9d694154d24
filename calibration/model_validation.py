"""Whole models against the machine: eager forward passes measured in interleaved rounds, and predicted.

Measured side: every (model, batch) of a run in interleaved rounds (:mod:`.interleave`) on the wall
clock and, at one torch thread, the thread's CPU clock; per op type, ``torch.profiler``'s times of
the outermost aten calls, which are wall times (its ``cpu_time_total`` is the wall clock between the
op's start and end). At one thread each op's time on the CPU clock is its wall time times the
profiled forward's CPU/wall ratio (the share of that forward the thread held the CPU, spread over
its ops by their wall time): what a per-op row is judged on, as the model row is, so a loaded
machine no longer reads -70% per op beside -14% end to end. Predicted side: the same module lowered
with ``from_torch`` and timed on the calibrated target with no fusion and the eager per-op overhead
(eager runs one kernel per op).

Two probes run in the same rounds: a square GEMM and the plain-torch transformer stack
``calibrate`` fits the eager overhead on, both shapes calibration measured. Right after
``calibrate`` their predictions match them; what they are off by later is how far the machine
(other processes, clocks, caches) drifted from the state it was calibrated in, which the model
errors then include: a reader can tell a model error from a machine that changed under it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..backends import Target, get_target
from ..costmodel.analyze import analyze
from ..frontends.torch.frontend import from_torch
from .cases import Case
from .guards import (
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
           "on_cpu_clock"]

#: The GEMM probe's side: one of calibration's square GEMMs (``sweeps.MATMUL_SQUARES``).
PROBE_GEMM = 768


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
        result = ModelValidation(name, b, seq if MODELS[name].has_seq else None,
                                 _case("model", label, s, report.time_s), kernels=report.timing.kernels,
                                 fresh_bytes=_fresh_bytes(graph, target),
                                 faulted_bytes=int(statistics.median(s.faults)) * _PAGE if s.faults else None,
                                 module_calls=graph.meta.get("module_calls"),
                                 footprint=report.timing.memory_required)
        if profile:
            result.by_op = _by_op(report, label, model, kwargs)
        results.append(result)
        if progress:
            progress(label)
    probe_cases = []
    for (label, module, args), s in zip(probe_list, samples[len(subjects):]):
        report = analyze(from_torch(module, args), target, fusion="none")
        assert report.time_s is not None
        probe_cases.append(_case("probe", label, s, report.time_s))
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


def _case(group: str, label: str, s: Samples, predicted: float) -> Case:
    return Case(group, label, s.wall_median, predicted, s.wall_spread, s.cpu_median, s.cpu_spread)


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


def _by_op(report: Any, label: str, model: Any, kwargs: dict[str, Any]) -> list[Case]:
    """Predicted seconds per source (aten) op type against torch.profiler's for the same ops."""
    predicted: dict[str, float] = {}
    for row in report.ops:
        if row.time_s:
            key = row.source_op.split(".")[1] if row.source_op.startswith("aten.") else row.source_op
            predicted[key] = predicted.get(key, 0.0) + row.time_s
    measured_ops = _profile_top_level(model, (), kwargs, set(predicted))
    return [Case(op, f"{label} {op}", measured_ops[op][0], predicted[op], cpu_s=measured_ops[op][1])
            for op in sorted(predicted, key=lambda k: -predicted[k]) if op in measured_ops]


def on_cpu_clock(wall_by_op: dict[str, float], wall_s: float, cpu_s: float) -> dict[str, float]:
    """Each op's wall seconds on the thread's CPU clock: times the forward's CPU/wall ratio (at most
    1: a thread cannot hold the CPU longer than the wall clock runs). The profiler has no per-op CPU
    clock; the time the thread waited for the CPU is spread over the ops by their wall time."""
    ratio = min(cpu_s / wall_s, 1.0) if wall_s > 0 else 1.0
    return {k: v * ratio for k, v in wall_by_op.items()}


def _profile_top_level(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                       ops: set[str]) -> dict[str, tuple[float, float | None]]:
    """(wall seconds, CPU-clock seconds or None) of the outermost aten op calls named in ``ops``:
    the least of three profiled runs (other processes only ever lengthen them). The CPU clock is
    the thread's (:func:`on_cpu_clock`), only at one torch thread, as the model rows'."""
    import os
    import time
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    import torch
    from torch.profiler import ProfilerActivity, profile
    one_thread = torch.get_num_threads() == 1
    runs: list[dict[str, float]] = []
    cpu_runs: list[dict[str, float]] = []
    with torch.no_grad():
        model(*args, **kwargs)
        for _ in range(3):
            with quiet_native_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
                w0, c0 = time.perf_counter(), time.thread_time()
                model(*args, **kwargs)
                wall, cpu = time.perf_counter() - w0, time.thread_time() - c0
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
            cpu_runs.append(on_cpu_clock(totals, wall, cpu))
    return {k: (min(r.get(k, 0.0) for r in runs), min(r.get(k, 0.0) for r in cpu_runs) if one_thread else None)
            for k in runs[0]}


