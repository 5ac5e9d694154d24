"""Predictions checked against the machine: per-op sweeps and end-to-end eager forward passes.

Measured side: torch eager on this machine (``torch.no_grad``; bare ops: warm-up, repeats, median;
whole models: interleaved rounds on the wall and thread-CPU clocks, :mod:`.interleave`), and for the
per-op-type breakdown of a model, ``torch.profiler`` CPU times of the top-level aten ops.
Predicted side: the same module lowered with ``from_torch`` and timed on the calibrated target with
no fusion (eager runs one kernel per op). Errors are (predicted - measured) / measured.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from ..backends import Target, get_target
from ..costmodel.analyze import analyze
from ..frontends.torch.frontend import from_torch
from .guards import check_fits_in_memory, check_target_family, quiet_native_stderr
from .interleave import interleaved_samples
from .timer import median_time
from .validation_models import (
    MODELS,
    VALIDATION_MODELS,
    build_validation_model,
    validation_inputs,
    validation_label,
    validation_param_count,
)

__all__ = ["Case", "op_sweep", "validate_model", "validate_models", "ModelValidation", "build_validation_model",
           "summarize", "VALIDATION_MODELS", "validation_param_count"]


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

    @property
    def error(self) -> float:
        return (self.predicted_s - self.measured_s) / self.measured_s if self.measured_s else 0.0

    @property
    def cpu_error(self) -> float | None:
        return (self.predicted_s - self.cpu_s) / self.cpu_s if self.cpu_s else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "error": self.error, "cpu_error": self.cpu_error}


def _predict(module: Any, args: tuple[Any, ...], target: Target, kwargs: dict[str, Any] | None = None) -> float:
    """A bare op's time: timed alone in a loop, it pays its dispatch but not a model's per-op glue."""
    report = analyze(from_torch(module, args, kwargs or {}), target, fusion="none", eager_overhead=False)
    assert report.time_s is not None
    return report.time_s


def _measure(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None,
             min_seconds: float = 0.05) -> float:
    import torch
    with torch.no_grad():
        return median_time(lambda: module(*args, **(kwargs or {})), warmup=2, repeats=5, min_seconds=min_seconds)


def _measure_cold(group: str, make: Callable[[], tuple[Any, tuple[Any, ...]]]) -> float:
    """Median time with the weights cold (a matmul's second operand, a conv's weights), as in a
    forward pass where each layer's weights are read once, and the activations hot."""
    import torch

    from .sweeps import cold_copies
    module, args = make()
    if group == "matmul":
        w_bytes = args[1].numel() * args[1].element_size()
        weights = cold_copies(lambda: torch.randn_like(args[1]), w_bytes)
        return _measure(lambda: module.forward(args[0], weights()), ())
    if group == "conv":
        w = module.weight
        modules = cold_copies(lambda: make()[0], w.numel() * w.element_size())
        return _measure(lambda: modules()(*args), ())
    return _measure(module.forward, args)


def _sweep_cases() -> Iterator[tuple[str, str, Callable[[], tuple[Any, tuple[Any, ...]]]]]:
    """Held-out shapes: none of them is a shape the calibration sweep measured."""
    import torch
    from torch import nn

    class MatMul(nn.Module):
        def forward(self, a, b):
            return a @ b

    class Bin(nn.Module):
        def __init__(self, fn: Callable[..., Any]) -> None:
            super().__init__()
            self.fn = fn

        def forward(self, *xs):
            return self.fn(*xs)

    # The factories are bound with partial, not closures: callers may call them after the loop moved on.
    def matmul(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> tuple[Any, tuple[Any, ...]]:
        return MatMul(), (torch.randn(*a_shape), torch.randn(*b_shape))

    def conv(cin: int, cout: int, k: int, s: int, hw: int, batch: int) -> tuple[Any, tuple[Any, ...]]:
        return (nn.Conv2d(cin, cout, k, stride=s, padding=k // 2, bias=False).eval(),
                (torch.randn(batch, cin, hw, hw),))

    def elementwise(fn: Callable[..., Any], size: int, arity: int) -> tuple[Any, tuple[Any, ...]]:
        return Bin(fn), tuple(torch.randn(size) for _ in range(arity))

    for m, n, k in [(100, 100, 100), (300, 500, 700), (1000, 200, 1000), (777, 777, 777), (1, 4096, 1024),
                    (4, 1024, 4096), (64, 3072, 768), (512, 768, 3072), (1536, 1024, 256)]:
        yield "matmul", f"mm {m}x{n}x{k}", partial(matmul, (m, k), (k, n))
    for b, m, n, k in [(12, 128, 128, 64), (48, 64, 64, 128), (8, 256, 64, 256)]:
        yield "matmul", f"bmm {b}x{m}x{n}x{k}", partial(matmul, (b, m, k), (b, k, n))
    for cin, cout, k, s, hw, batch in [(3, 64, 7, 2, 224, 1), (64, 64, 3, 1, 56, 1), (64, 256, 1, 1, 56, 1),
                                       (128, 128, 3, 2, 56, 2), (256, 256, 3, 1, 14, 8), (512, 2048, 1, 1, 7, 4),
                                       (32, 32, 3, 1, 64, 2)]:
        yield "conv", f"conv {cin}->{cout} k{k} s{s} {hw}px b{batch}", partial(conv, cin, cout, k, s, hw, batch)
    elementwise_cases: list[tuple[str, Callable[..., Any], tuple[int, ...]]] = [
        ("add", torch.add, (1000, 100_000, 1_000_000, 3_000_000)),
        ("mul", torch.mul, (50_000, 2_000_000)),
        ("relu", torch.relu, (30_000, 5_000_000)),
        ("gelu", torch.nn.functional.gelu, (200_000, 2_000_000)),
        ("exp", torch.exp, (10_000, 1_000_000)),
        ("tanh", torch.tanh, (500_000,))]
    for name, fn, sizes in elementwise_cases:
        for size in sizes:
            arity = 2 if name in ("add", "mul") else 1
            yield "elementwise", f"{name} {size}", partial(elementwise, fn, size, arity)
    yield "elementwise", "add broadcast 512x3072 + 3072", \
        lambda: (Bin(torch.add), (torch.randn(512, 3072), torch.randn(3072)))


def op_sweep(target: Target | str, *, groups: tuple[str, ...] = ("matmul", "conv", "elementwise"),
             limit: int | None = None, progress: Callable[[str], None] | None = None) -> list[Case]:
    target = get_target(target)
    cases: list[Case] = []
    for group, name, make in _sweep_cases():
        if group not in groups:
            continue
        if limit is not None and sum(c.group == group for c in cases) >= limit:
            continue
        module, args = make()
        cases.append(Case(group, name, _measure_cold(group, make), _predict(module, args, target)))
        if progress:
            progress(name)
    return cases


@dataclass
class ModelValidation:
    model: str
    batch: int
    seq: int | None
    end_to_end: Case
    by_op: list[Case] = field(default_factory=list)
    kernels: int | None = None    # kernels the prediction launched (each pays dispatch and eager glue)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "batch": self.batch, "seq": self.seq, "end_to_end": self.end_to_end.to_dict(),
                "by_op": [c.to_dict() for c in self.by_op], "kernels": self.kernels}


def validate_model(name: str, target: Target | str, *, batch: int = 1, seq: int = 128, tiny: bool = False,
                   profile: bool = True, repeats: int = 5) -> ModelValidation:
    """One model at one batch size: :func:`validate_models` with a single subject."""
    return validate_models([name], target, batches=(batch,), seq=seq, tiny=tiny, profile=profile,
                           rounds=repeats)[0]


def validate_models(names: Sequence[str], target: Target | str, *, batches: Sequence[int] = (1, 8), seq: int = 128,
                    tiny: bool = False, profile: bool = True, rounds: int = 7, warmup: int = 2,
                    progress: Callable[[str], None] | None = None) -> list[ModelValidation]:
    """Measure eager forward passes of every model at every batch size, interleaved (one repeat of
    each per round, :mod:`.interleave`) on the wall and thread-CPU clocks, and compare them, and
    their per-op-type times, with the prediction of the same module's export. Refuses a non-CPU
    target and models that would not fit in this machine's memory, before building anything."""
    import torch

    target = get_target(target)
    check_target_family(target)
    check_fits_in_memory(" + ".join(names), sum(validation_param_count(n, tiny) for n in names))
    subjects = []
    for name in names:
        model, _, _ = build_validation_model(name, 1, seq, tiny)
        for b in batches:
            subjects.append((name, b, model, validation_inputs(name, model, b, seq)))
    one_thread = torch.get_num_threads() == 1
    with torch.no_grad():
        samples = interleaved_samples([partial(_forward, m, kw) for _, _, m, kw in subjects], warmup=warmup,
                                      rounds=rounds, min_seconds=0.05, thread_clock=one_thread)
    results = []
    for (name, b, model, kwargs), s in zip(subjects, samples):
        report = analyze(from_torch(model, (), kwargs), target, fusion="none")
        assert report.time_s is not None and report.timing is not None
        label = validation_label(name, b, seq)
        case = Case("model", label, s.wall_median, report.time_s, s.wall_spread, s.cpu_median, s.cpu_spread)
        result = ModelValidation(name, b, seq if MODELS[name].has_seq else None, case,
                                 kernels=report.timing.kernels)
        if profile:
            result.by_op = _by_op(report, label, model, kwargs)
        results.append(result)
        if progress:
            progress(label)
    return results


def _forward(model: Any, kwargs: dict[str, Any]) -> Any:
    return model(**kwargs)


def _by_op(report: Any, label: str, model: Any, kwargs: dict[str, Any]) -> list[Case]:
    """Predicted seconds per source (aten) op type against torch.profiler's for the same ops."""
    predicted: dict[str, float] = {}
    for row in report.ops:
        if row.time_s:
            key = row.source_op.split(".")[1] if row.source_op.startswith("aten.") else row.source_op
            predicted[key] = predicted.get(key, 0.0) + row.time_s
    measured_ops = _profile_top_level(model, (), kwargs, set(predicted))
    return [Case(op, f"{label} {op}", measured_ops[op], predicted[op])
            for op in sorted(predicted, key=lambda k: -predicted[k]) if op in measured_ops]


def _profile_top_level(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], ops: set[str]) -> dict[str, float]:
    """CPU seconds of the outermost aten op calls named in ``ops`` (median of three profiled runs)."""
    import os
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    import torch
    from torch.profiler import ProfilerActivity, profile
    runs: list[dict[str, float]] = []
    with torch.no_grad():
        model(*args, **kwargs)
        for _ in range(3):
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
    return {k: statistics.median(r.get(k, 0.0) for r in runs) for k in runs[0]}


def summarize(cases: list[Case]) -> dict[str, dict[str, float]]:
    """Median and max absolute error per group."""
    out: dict[str, dict[str, float]] = {}
    for group in sorted({c.group for c in cases}):
        errs = [abs(c.error) for c in cases if c.group == group]
        out[group] = {"cases": len(errs), "median_abs_error": statistics.median(errs), "max_abs_error": max(errs)}
    return out
