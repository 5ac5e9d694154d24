"""The batch at which decode turns compute-bound, by the chip's ridge point and by the model.

Decode at batch B does ``B x f`` FLOPs (f: the FLOPs of one sequence's token, attention over the
context included) and moves ``W + B x b`` bytes (W: what a step reads once for the whole batch,
the weights; b: one sequence's KV cache traffic, ``context + 1`` tokens read and one written). It
turns compute-bound where
``B f / P = (W + B b) / BW`` with P and BW the achievable matrix rate and bandwidth:

    B* = (W / BW) / (f / P - b / BW) = R W / (f - R b),   R = P / BW (the ridge point, FLOP/byte)

P is the matrix rate of the GEMM format carrying most of the step's FLOPs (FP8 under W8A8, though the
head stays bf16). Without KV traffic (b = 0) and with 2-byte weights read once per 2 FLOPs per token (f = W), B* = R:
the chip's FLOP/byte ratio. The KV read raises it, and when one sequence's attention alone is
below the ridge (``f <= R b``: long contexts, GQA caches) decode never turns compute-bound.

``modelled`` asks the execution model instead: the first batch whose step spends more time
computing than moving memory (sums of the kernels' compute and memory terms), which includes tile
padding, wave quantization and L2 re-reads, so it differs from B* where the matrix units run
padded rows (see :func:`_first_compute_bound` for the search).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...ir import Op
from ..execution.common import matrix_rate
from ..execution.gemm import dot_gemm, grouped_gemm
from ..interpreter import interpret
from .replica import Replica
from .step import time_step

__all__ = ["Crossover", "crossover"]


@dataclass(frozen=True)
class Crossover:
    """``analytic``: B* from the ridge point (None: never compute-bound); ``modelled``: the
    execution model's first compute-bound batch (None: not below ``limit``)."""

    analytic: float | None
    modelled: int | None
    ridge: float                  # achievable FLOP/s over achievable bytes/s
    flops_per_sequence: float     # f
    bytes_per_sequence: float     # b
    shared_bytes: float           # W
    context: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _dtype(replica: Replica) -> Any:
    """The GEMM input format that carries most of a decode step's matrix FLOPs, whose rate sets P.
    Summed by format, not the largest GEMM's: W8A8 FP8 keeps ``lm_head`` in bf16, the one largest
    GEMM of Llama-3-8B, while its 224 FP8 projections carry 93% of the FLOPs (taking the head's
    format put the ridge at bf16's 279 FLOP/B, not FP8's 558)."""
    g = replica.decode_graph
    table = interpret(g.graph, g.bindings(1, 1, 0))
    by_dtype: dict[Any, int] = {}
    for node, cost in table.costs.items():
        if node.op is Op.DOT or node.op is Op.GROUPED_DOT:
            gemm = dot_gemm(table, node) if node.op is Op.DOT else grouped_gemm(table, node)
            by_dtype[gemm.dtype] = by_dtype.get(gemm.dtype, 0) + cost.flops
    return max(by_dtype, key=by_dtype.__getitem__) if by_dtype else None


def crossover(replica: Replica, context: int, *, limit: int = 1 << 14) -> Crossover:
    """The crossover batch of ``replica``'s per-device decode step at ``context``."""
    g, target = replica.decode_graph, replica.target
    one = time_step(g, target, batch=1, tokens=1, past=context, options=replica.options)
    two = time_step(g, target, batch=2, tokens=1, past=context, options=replica.options)
    f = float(two.flops - one.flops)
    w = float(2 * one.traffic - two.traffic)          # the batch-independent part of the fused traffic
    b = float(g.cache.bytes_per_token * (context + 2))
    peak = matrix_rate(target, _dtype(replica), replica.options).flops_per_s * target.matmul_efficiency
    bw = target.memory_bandwidth * target.memory_efficiency
    ridge = peak / bw
    analytic = ridge * w / (f - ridge * b) if f > ridge * b else None

    def compute_bound(batch: int) -> bool:
        s = time_step(g, target, batch=batch, tokens=1, past=context, options=replica.options)
        return s.compute_s >= s.memory_s

    modelled = _first_compute_bound(compute_bound, limit)
    return Crossover(analytic, modelled, ridge, f, b, w, context)


def _first_compute_bound(compute_bound: Callable[[int], bool], limit: int) -> int | None:
    """The first batch at which ``compute_bound`` holds. Tile padding makes it saw-toothed (a batch
    just past a tile boundary computes padded rows), so doubling finds a compute-bound power of
    two, the range from a quarter of it is scanned in 16 steps, and the first step that holds is
    bisected."""
    if compute_bound(1):
        return 1
    hi = 2
    while hi <= limit and not compute_bound(hi):
        hi *= 2
    if hi > limit:
        return None
    lo = max(1, hi // 4)
    stride = max(1, (hi - lo) // 16)
    prev = lo
    for b in range(lo + stride, hi + 1, stride):
        if compute_bound(b):
            hi = b
            break
        prev = b
    lo = prev
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if compute_bound(mid) else (mid, hi)
    return hi
