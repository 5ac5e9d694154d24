"""The batch at which decode turns compute-bound, by the chip's ridge point and by the model.

Decode at batch B does ``B x f`` FLOPs (f: the FLOPs of one sequence's token, attention over the
context included) and moves ``W + B x b`` bytes (W: what a step reads once for the whole batch,
the weights; b: one sequence's KV cache traffic, ``context + 1`` tokens read and one written). It
turns compute-bound where
``B f / P = (W + B b) / BW`` with P and BW the achievable matrix rate and bandwidth:

    B* = (W / BW) / (f / P - b / BW) = R W / (f - R b),   R = P / BW (the ridge point, FLOP/byte)

Without KV traffic (b = 0) and with 2-byte weights read once per 2 FLOPs per token (f = W), B* = R:
the chip's FLOP/byte ratio. The KV read raises it, and when one sequence's attention alone is
below the ridge (``f <= R b``: long contexts, GQA caches) decode never turns compute-bound.

``modelled`` asks the execution model instead: the smallest batch whose step spends more time
computing than moving memory (sums of the kernels' compute and memory terms), which includes tile
padding and wave quantization, so it differs from B* where the matrix units run padded rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...ir import Op
from ..execution.common import matrix_rate
from ..execution.gemm import dot_gemm
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
    g = replica.device_graph
    table = interpret(g.graph, g.bindings(1, 1, 0))
    best, dtype = -1, None
    for node, cost in table.costs.items():
        if node.op is Op.DOT and cost.flops > best:
            best, dtype = cost.flops, dot_gemm(table, node).dtype
    return dtype


def crossover(replica: Replica, context: int, *, limit: int = 1 << 14) -> Crossover:
    """The crossover batch of ``replica``'s per-device decode step at ``context``."""
    g, target = replica.device_graph, replica.target
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

    modelled: int | None = None
    if compute_bound(1):
        modelled = 1
    else:
        lo, hi = 1, 2
        while hi <= limit and not compute_bound(hi):
            lo, hi = hi, hi * 2
        if hi <= limit:
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if compute_bound(mid) else (mid, hi)
            modelled = hi
    return Crossover(analytic, modelled, ridge, f, b, w, context)
