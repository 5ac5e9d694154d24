"""Pipeline schedules as arithmetic: stage assignment, 1F1B and interleaved 1F1B step times, bubbles.

Why closed forms instead of simulating the schedule: with per-microbatch stage times known, the
synchronous schedules Megatron-LM runs have exact makespans in the steady state (Narayanan et al.,
SC'21, section 2.2): with ``p`` stages, ``m`` microbatches and ``v`` model chunks per device, 1F1B
takes ``(m + p - 1)`` stage-times and interleaved 1F1B ``m + (p - 1)/v``, so the bubble is
``(p - 1)/(v m)`` of the ideal time. Unequal stages (the first holds the embedding, the last the
head) generalize this as ``m * t_max + (sum(t) - t_max) / v``: the slowest stage paces the steady
state and the fill and drain pass once through every stage's chunk. Both reduce to the paper's
formulas for equal stages; the tests check that against the paper's own numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import PlanError

__all__ = ["Stage", "assign_stages", "pipeline_time", "bubble_fraction"]


@dataclass(frozen=True)
class Stage:
    """One pipeline device's share: ``layers`` (indices, over all its chunks) and its per-microbatch
    times summed over its chunks: forward, backward (recomputation included) and point-to-point."""

    index: int
    layers: tuple[int, ...]
    forward_s: float
    backward_s: float
    p2p_s: float = 0.0

    @property
    def time_s(self) -> float:
        return self.forward_s + self.backward_s + self.p2p_s


def bubble_fraction(p: int, m: int, v: int = 1) -> float:
    """The pipeline bubble as a fraction of the ideal (bubble-free) time: ``(p - 1) / (v m)``."""
    return (p - 1) / (v * m) if p > 1 else 0.0


def pipeline_time(stages: list[Stage], microbatches: int, interleave: int = 1) -> tuple[float, float]:
    """``(step time, bubble time)`` of a synchronous 1F1B (``interleave`` 1) or interleaved 1F1B
    schedule over ``stages``, each running ``microbatches`` forward and backward passes."""
    if not stages:
        return 0.0, 0.0
    times = [s.time_s for s in stages]
    slowest = max(times)
    total = microbatches * slowest + (sum(times) - slowest) / interleave
    return total, total - microbatches * slowest


def assign_stages(costs: list[float], pp: int, interleave: int = 1, capacity: list[float] | None = None,
                  memory: list[float] | None = None) -> list[list[int]]:
    """Which layers each of the ``pp * interleave`` model chunks holds, in order: contiguous runs
    balanced by time (``costs`` per layer), each chunk within ``capacity`` bytes when given
    (``memory`` per layer). Chunk ``c`` runs on device ``c % pp``.

    Balancing is the classic linear partition (minimize the largest chunk) by binary search over
    the bound: exact for contiguous chunks and fast enough for thousands of layers."""
    chunks = pp * interleave
    n = len(costs)
    if n < chunks:
        raise PlanError(f"pipeline: {n} layers cannot fill {pp} stages x {interleave} chunks")
    lo, hi = max(costs), sum(costs)
    for _ in range(60):
        mid = (lo + hi) / 2
        if _parts(costs, mid, memory, capacity, chunks) is not None:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-12 * max(hi, 1e-30):
            break
    parts = _parts(costs, hi, memory, capacity, chunks)
    if parts is None:
        raise PlanError(f"pipeline: no split of {n} layers into {chunks} chunks fits each device's memory")
    return parts


def _parts(costs: list[float], bound: float, memory: list[float] | None, capacity: list[float] | None,
           chunks: int) -> list[list[int]] | None:
    """Greedy contiguous cut under ``bound``, leaving at least one layer for every later chunk."""
    n = len(costs)
    parts: list[list[int]] = []
    i = 0
    for c in range(chunks):
        left = chunks - c - 1
        cur: list[int] = []
        t = 0.0
        mem = 0.0
        cap = capacity[c % len(capacity)] if capacity else float("inf")
        while i < n - left:
            m = memory[i] if memory else 0.0
            if cur and (t + costs[i] > bound * (1 + 1e-12) or mem + m > cap):
                break
            if not cur and mem + m > cap:
                return None
            cur.append(i)
            t += costs[i]
            mem += m
            i += 1
        if not cur:
            return None
        parts.append(cur)
    return parts if i == n else None
