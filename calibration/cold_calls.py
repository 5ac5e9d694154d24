"""The eager host calls' cold-state cost: what each op of a large model pays because its state left the caches.

The eager per-op and per-module-call overheads (:mod:`.eager`, :mod:`.module_calls`) are measured
in hot loops of a small model: its Python module objects, tensor metadata, dispatcher tables and
weights stay in the caches from one forward to the next. In a real model each op runs once per
forward, and between two runs of it the whole forward passes through the caches: once the model's
footprint exceeds the last-level cache, every op finds its state in main memory. Measured here
directly: the same eager stack (:func:`.eager.eager_model`, hidden 64, 16 tokens) at several depths,
whose per-layer work is the same at every depth while its footprint grows past the LLC, each
forward timed in interleaved rounds on the thread's CPU clock (median: what a forward pays). A
deeper stack's time per host call (kernel or ``nn.Module`` call) beyond the shallowest one's, less
its weights read from main memory, is the cold-state cost at that footprint.

On the 2-core EPYC VM (32 MiB L3, 2026-12-03, a busy machine) the stack took 125-132 us per layer
at 4 to 160 layers (0.8 to 30 MiB) and 170 us per layer at 320 layers (61 MiB): 42 us more per layer
of 25 host calls, of which its 195 KiB of weights from memory explain about 10 us.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from ..backends import Target
from .eager import EAGER_MODEL, eager_model
from .measurement import Case, Measurement
from .robust import monotone
from .rounds import measure_in_rounds

__all__ = ["COLD_DEPTHS", "cold_call_cases", "measure_cold_calls", "fit_cold_calls", "stack_facts"]

#: Layers of the stacks timed: 4 (0.8 MiB, cache-resident: the reference) to 640 (122 MiB, four
#: times a large LLC).
COLD_DEPTHS = (4, 20, 40, 80, 160, 320, 640)
#: Smallest fraction written to the curve (the target format takes none of zero; 1% of a
#: microsecond is below anything this measures).
_FLOOR = 0.01

#: (host calls, weight bytes, footprint bytes) of a stack of the given shape.
Facts = Callable[[tuple[int, ...]], tuple[int, int, float]]


def cold_call_cases(depths: Sequence[int] = COLD_DEPTHS) -> list[Case]:
    """Kind ``eager_cold``: the stack's forward at each depth, shape (layers, hidden, heads,
    sequence) as :data:`.eager.EAGER_MODEL` but for the layers; each turn repeats the forward for
    20 ms with no warm-up (a shallow stack is a loop of forwards, a deep one one forward)."""
    _, hidden, heads, seq = EAGER_MODEL
    cases = []
    for d in depths:
        model, args = eager_model(d, hidden, heads, seq)
        cases.append(Case("eager_cold", "fp32", (d, hidden, heads, seq), 0, 0, partial(_forward, model, args),
                          warmup=0, min_seconds=0.02))
    return cases


def measure_cold_calls(depths: Sequence[int] = COLD_DEPTHS, rounds: int = 7) -> list[Measurement]:
    """:func:`cold_call_cases` measured alone in ``rounds`` interleaved rounds."""
    import torch
    with torch.no_grad():
        return measure_in_rounds(cold_call_cases(depths), rounds)


def _forward(model: Any, args: tuple[Any, ...]) -> Any:
    return model(*args)


def fit_cold_calls(target: Target, ms: Sequence[Measurement],
                   facts: Facts) -> tuple[float, tuple[tuple[float, float], ...]] | None:
    """(seconds per host call at the largest footprint measured, (footprint, fraction of it) curve)
    from :func:`measure_cold_calls`' records; None with fewer than two depths. Each deeper stack's
    seconds per host call minus the shallowest one's, its weights taken out at the target's
    large-transfer rate (a GEMM's cold weights are the GEMM's cost, measured so in the grid); the
    curve is made non-decreasing in the footprint."""
    recs = sorted((m.shape[0], m) for m in ms if m.kind == "eager_cold")
    if len(recs) < 2:
        return None
    dram = target.memory_bandwidth * target.memory_efficiency
    calls0, _, _ = facts(recs[0][1].shape)
    base = recs[0][1].seconds / calls0
    extra_us = []
    for _, m in recs[1:]:
        calls, weights, footprint = facts(m.shape)
        extra_us.append((footprint, max(0.0, (m.seconds - weights / dram) / calls - base) * 1e6))
    curve = monotone(extra_us)          # in microseconds: monotone() keeps four decimals
    full = curve[-1][1]
    if full <= 0.0:
        return 0.0, ()
    return full * 1e-6, tuple((x, round(max(_FLOOR, min(1.0, y / full)), 4)) for x, y in curve)


def stack_facts(target: Target) -> Facts:
    """(host calls, weight bytes, footprint) of a stack at any depth, as the CPU model counts them
    on ``target``: measured on one and two layers and extended linearly (every layer is the same,
    the peak of live activations does not grow with depth)."""
    one, two = (_analyzed(target, (d, *EAGER_MODEL[1:])) for d in (1, 2))

    def facts(shape: tuple[int, ...]) -> tuple[int, int, float]:
        n = shape[0] - 1
        return (one[0] + n * (two[0] - one[0]), one[1] + n * (two[1] - one[1]), one[2] + n * (two[2] - one[2]))
    return facts


def _analyzed(target: Target, shape: tuple[int, int, int, int]) -> tuple[int, int, float]:
    from ..costmodel.analyze import analyze
    from ..frontends.torch.frontend import MODULE_CALLS_META, from_torch
    model, args = eager_model(*shape)
    graph = from_torch(model, args)
    report = analyze(graph, target, fusion="none", eager_overhead=False)
    assert report.timing is not None
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return (report.timing.kernels + int(graph.meta.get(MODULE_CALLS_META, 0)), weights,
            float(report.timing.memory_required))
