"""The eager host calls' cold-state cost: what each op of a large model pays because its state left the caches.

The eager per-op and per-module-call overheads (:mod:`.eager`, :mod:`.module_calls`) are measured
in hot loops: the same small model runs again and again, and the Python module objects, tensor
metadata, dispatcher tables and code its ops touch stay in the caches. In a real model each op runs
once per forward, and between two runs of it the whole forward passes through the caches (hundreds
of MB of weights at BERT size): the op finds its state in main memory. Measured here on the same
eager stack: its forward right after reading a buffer of a given size (the bytes a model would have
touched in between) against the same forward run twice in a row, in interleaved rounds on the
thread's CPU clock, the median of each (what a forward pays, not the best case).

On the 2-core EPYC VM (32 MiB L3) this measured 2026-12-03 the stack's 73 kernels and 30 module calls
at ~370 us hot; after reading 8-48 MiB its first forward took 10-50 us longer, after 96 MiB about
150 us longer on a quiet machine and 400-700 us longer while other processes loaded the memory system.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

from ..backends import Target
from .eager import EAGER_MODEL, eager_model
from .robust import monotone
from .sweeps import Measurement

__all__ = ["EVICT_MIB", "measure_cold_calls", "fit_cold_calls", "stack_host_calls"]

#: Buffer sizes (MiB) read between the stack's forwards: inside L2 to three times a large LLC.
EVICT_MIB = (1, 4, 16, 32, 64, 128)
#: Smallest fraction written to the curve (the target format takes none of zero; 1% of a
#: microsecond is below anything this measures).
_FLOOR = 0.01


def measure_cold_calls(shape: tuple[int, int, int, int] = EAGER_MODEL, sizes: Sequence[int] = EVICT_MIB,
                       rounds: int = 15) -> list[Measurement]:
    """Kind ``eager_cold``: the stack's forward (median seconds) right after reading ``bytes`` of a
    buffer, one record per size, and the forward run right after itself as ``bytes`` 0 (hot)."""
    import torch
    model, args = eager_model(*shape)
    bufs = {s: torch.ones(s * 2**20 // 4) for s in sizes}
    clock = time.thread_time if torch.get_num_threads() == 1 else time.perf_counter
    first: dict[int, list[float]] = {s: [] for s in sizes}
    hot: list[float] = []

    def timed() -> float:
        c0 = clock()
        model(*args)
        return clock() - c0

    with torch.no_grad():
        for _ in range(5):
            model(*args)
        order = list(sizes)
        for r in range(rounds):
            for s in order[r % len(order):] + order[:r % len(order)]:
                bufs[s].sum()        # read: clean lines, as a forward reads its weights
                first[s].append(timed())
                hot.append(timed())
    out = [Measurement("eager_cold", "fp32", shape, 0, 0, statistics.median(hot))]
    out += [Measurement("eager_cold", "fp32", shape, 0, s * 2**20, statistics.median(first[s])) for s in sizes]
    return out


def fit_cold_calls(target: Target, ms: Sequence[Measurement], host_calls: int,
                   weight_bytes: int) -> tuple[float, tuple[tuple[float, float], ...]] | None:
    """(seconds per host call when fully cold, (bytes read in between, fraction of it) curve) from
    :func:`measure_cold_calls`' records; None without a hot and a cold record. Each size's extra is
    its forward minus the hot one, less the stack's weights read from main memory at the target's
    large-transfer rate (GEMMs already pay for cold weights: the GEMM grid is measured so), over the
    stack's ``host_calls`` (kernels + module calls); the curve is made non-decreasing."""
    hot = [m.seconds for m in ms if m.kind == "eager_cold" and m.bytes == 0]
    cold = sorted((m.bytes, m.seconds) for m in ms if m.kind == "eager_cold" and m.bytes > 0)
    if not hot or not cold or host_calls <= 0:
        return None
    weights = weight_bytes / (target.memory_bandwidth * target.memory_efficiency) if weight_bytes else 0.0
    # in microseconds: monotone() keeps four decimals
    extra_us = [(float(b), max(0.0, (t - hot[-1] - weights) / host_calls) * 1e6) for b, t in cold]
    curve = monotone(extra_us)
    full = curve[-1][1]
    if full <= 0.0:
        return 0.0, ()
    return full * 1e-6, tuple((b, round(max(_FLOOR, min(1.0, y / full)), 4)) for b, y in curve)



def stack_host_calls(target: Target, shape: tuple[int, int, int, int] = EAGER_MODEL) -> tuple[int, int]:
    """(launched kernels + ``nn.Module`` calls, parameter bytes) of the eager stack of ``shape``, as
    the CPU model counts them on ``target``."""
    from ..costmodel.analyze import analyze
    from ..frontends.torch.frontend import MODULE_CALLS_META, from_torch
    model, args = eager_model(*shape)
    graph = from_torch(model, args)
    report = analyze(graph, target, fusion="none", eager_overhead=False)
    assert report.timing is not None
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return report.timing.kernels + int(graph.meta.get(MODULE_CALLS_META, 0)), weights
