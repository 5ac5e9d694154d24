"""Predictions checked against the machine: per-op sweeps of held-out shapes here, whole models in
:mod:`.model_validation` (re-exported here).

Measured side: torch eager on this machine (``torch.no_grad``; warm-up, repeats, median, weights
cold as in a forward pass). Predicted side: the same module lowered with ``from_torch`` and timed on
the calibrated target with no fusion and without the eager per-op overhead (a bare op timed in a
loop does not pay a model's glue). Errors are (predicted - measured) / measured.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from ..backends import Target, get_target
from ..costmodel.analyze import analyze
from ..frontends.torch.frontend import from_torch
from .cases import Case, summarize
from .interleave import interleaved_samples
from .model_validation import ModelValidation, ValidationRun, validate_model, validate_models, validate_run
from .timer import median_time
from .validation_models import VALIDATION_MODELS, build_validation_model, validation_param_count

__all__ = ["Case", "op_sweep", "validate_model", "validate_models", "validate_run", "ValidationRun",
           "ModelValidation", "build_validation_model", "summarize", "VALIDATION_MODELS", "validation_param_count"]


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
    """Median time with the weights cold (a matmul's second operand), as in a forward pass where
    each layer's weights are read once, and the activations hot."""
    import torch

    from .sweeps import cold_copies
    module, args = make()
    if group == "matmul":
        w_bytes = args[1].numel() * args[1].element_size()
        weights = cold_copies(lambda: torch.randn_like(args[1]), w_bytes)
        return _measure(lambda: module.forward(args[0], weights()), ())
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
    """Held-out shapes, measured and predicted bare (no eager glue). Convolutions are measured as a
    network runs them, as calibrate measures them: in turn, one cold call each per round (a hot loop
    of one shape runs 10-50% faster than the same shapes in turn)."""
    target = get_target(target)
    cases: list[Case] = []
    convs: list[tuple[str, Any, tuple[Any, ...], Callable[[], Any]]] = []
    for group, name, make in _sweep_cases():
        if group not in groups:
            continue
        if limit is not None and sum(c.group == group for c in cases) + (len(convs) if group == "conv" else 0) >= limit:
            continue
        module, args = make()
        if group == "conv":
            convs.append((name, module, args, make))
            continue
        cases.append(Case(group, name, _measure_cold(group, make), _predict(module, args, target)))
        if progress:
            progress(name)
    if convs:
        cases += _conv_cases(convs, target)
    return cases


def _conv_cases(convs: list[tuple[str, Any, tuple[Any, ...], Callable[[], Any]]], target: Target) -> list[Case]:
    import torch

    from .sweeps import call_next, cold_copies
    calls = []
    for _, module, args, make in convs:
        w = module.weight
        modules = cold_copies(lambda make=make: make()[0], w.numel() * w.element_size())  # type: ignore[misc]
        calls.append(partial(call_next, modules, *args))
    with torch.no_grad():
        samples = interleaved_samples(calls, warmup=1, rounds=8, min_seconds=0.0,
                                      thread_clock=torch.get_num_threads() == 1)
    return [Case("conv", name, s.cpu_median if s.cpu_median is not None else s.wall_median,
                 _predict(module, args, target)) for (name, module, args, _), s in zip(convs, samples)]

