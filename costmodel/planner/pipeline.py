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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import PlanError

__all__ = ["Stage", "assign_stages", "balance_devices", "refine_by_schedule", "pipeline_time", "bubble_fraction"]


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
    the bound: exact for contiguous chunks and fast enough for thousands of layers. Interleaved,
    that is not the goal (:func:`balance_devices` starts from it)."""
    chunks = pp * interleave
    n = len(costs)
    if n < chunks:
        raise PlanError(f"pipeline: {n} layers cannot fill {pp} stages x {interleave} chunks")
    lo, hi = max(costs), sum(costs)
    plain = memory is None and capacity is None
    for _ in range(60):
        mid = (lo + hi) / 2
        if _feasible(costs, mid, chunks) if plain else _parts(costs, mid, memory, capacity, chunks) is not None:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-12 * max(hi, 1e-30):
            break
    parts = _parts(costs, hi, memory, capacity, chunks)
    if parts is None:
        raise PlanError(f"pipeline: no split of {n} layers into {chunks} chunks fits each device's memory")
    return parts


def balance_devices(forward: list[float], backward: list[float], parts: list[list[int]], pp: int,
                    microbatches: int) -> list[list[int]]:
    """The contiguous split of the layers (per-layer ``forward`` and ``backward`` seconds) into
    ``len(parts)`` interleaved chunks, chunk ``c`` on device ``c % pp``, whose closed-form step
    (``m`` x the busiest device's total + the others' totals over ``v``, :func:`.step.step_time`) is
    shortest that single-layer boundary moves reach from any of three starts (:func:`_starts`: ``parts``,
    the linear partition; equal layer counts; rounds of ``pp`` chunks balanced in turn).
    :func:`refine_by_schedule` then moves boundaries on the simulated schedule
    for the strategies a search simulates.

    Why not the linear partition: interleaved 1F1B runs every chunk of a device once per microbatch,
    so the busiest device's total, not the largest chunk, paces the steady state. Llama-3-8B on pp=4,
    v=2, 32 microbatches: the linear partition's chunks ``[4,5,5,5,5,5,2,1]`` put ``9, 10, 7, 6`` layers
    on the devices, about 8% slower than ``[4,5,5,3,5,4,4,2]`` (``9, 9, 9, 5``; the last device holds
    the head). Descents from several starts because single moves stop in local minima."""
    chunks = len(parts)
    costs = [f + b for f, b in zip(forward, backward)]
    pc = _prefix(costs)            # one prefix of forward + backward: the descent's hot loop reads it
    total, v = pc[-1], chunks // pp

    def closed_form(cut: tuple[int, ...]) -> tuple[float, float]:
        loads = [0.0] * pp
        for c in range(chunks):
            loads[c % pp] += pc[cut[c + 1]] - pc[cut[c]]
        busiest = max(loads)
        return microbatches * busiest + (total - busiest) / v, sum(x * x for x in loads)

    starts = _starts(costs, parts, pp)
    best = min((_descend(cut, closed_form, total) for cut in starts), key=lambda cut: (closed_form(cut), cut))
    return [list(range(best[c], best[c + 1])) for c in range(chunks)]


def refine_by_schedule(forward: list[float], backward: list[float], chunks: list[list[int]], pp: int,
                       microbatches: int) -> list[list[int]]:
    """``chunks`` with single-layer boundary moves while the simulated schedule
    (:func:`.schedule.makespan` on compute times; sends and gathers add the same to every pass)
    shortens: chunks uneven within a round of ``pp`` make neighbours wait, which the closed form does
    not see (QA's Llama-3-8B tp2 pp4 v2 case: 1.632 s from the closed form's split, 1.604 s refined).
    Past ``3 pp`` microbatches the simulation is extrapolated: Megatron's order repeats every ``pp``
    microbatches once warmed up, so ``2 pp`` microbatches hold the warm-up and the cool-down and each
    further group adds what the third adds (an assumption that keeps each simulation short). Tens of
    milliseconds per layout: run only for the strategies a search simulates."""
    from .schedule import ChunkTimes, makespan
    n, v = len(forward), len(chunks) // pp
    pf, pb = _prefix(forward), _prefix(backward)
    seen: dict[tuple[int, ...], float] = {}

    def simulated(cut: tuple[int, ...]) -> float:
        got = seen.get(cut)
        if got is None:
            times = [ChunkTimes(pf[cut[c + 1]] - pf[cut[c]], 0.0, pb[cut[c + 1]] - pb[cut[c]], 0.0)
                     for c in range(len(chunks))]
            if microbatches <= 3 * pp:
                got = makespan(pp, microbatches, v, times)
            else:                                   # two groups, then the third group's slope
                two = makespan(pp, 2 * pp, v, times)
                got = two + (makespan(pp, 3 * pp, v, times) - two) * (microbatches - 2 * pp) / pp
            seen[cut] = got
        return got

    costs = [f + b for f, b in zip(forward, backward)]
    # the given split and the closed form's starts: single moves stop in local minima
    starts = sorted({tuple(c[0] for c in chunks) + (n,), *_starts(costs, assign_stages(costs, pp, v), pp)})
    best = min((_descend(cut, simulated, pf[-1] + pb[-1]) for cut in starts), key=lambda cut: (simulated(cut), cut))
    return [list(range(best[c], best[c + 1])) for c in range(len(chunks))]


def _starts(costs: list[float], linear: list[list[int]], pp: int) -> list[tuple[int, ...]]:
    """Chunk starts (and the end) to descend from: the ``linear`` partition, equal layer counts,
    and rounds of ``pp`` chunks balanced in turn (:func:`_by_rounds`, where every round has a layer
    per chunk)."""
    n, k = len(costs), len(linear)
    out = {tuple(p[0] for p in linear) + (n,), tuple(round(c * n / k) for c in range(k)) + (n,)}
    rounds_cut = _by_rounds(costs, pp, k // pp)
    if rounds_cut is not None:
        out.add(rounds_cut)
    return sorted(out)


def _prefix(xs: list[float]) -> list[float]:
    out = [0.0]
    for x in xs:
        out.append(out[-1] + x)
    return out


def _by_rounds(costs: list[float], pp: int, v: int) -> tuple[int, ...] | None:
    """Chunk starts (and the end) that balance each round of ``pp`` chunks: the layers split into
    ``v`` contiguous rounds of equal time, each round into ``pp`` chunks; None when a round has
    fewer than ``pp`` layers."""
    cut: list[int] = []
    for seg in assign_stages(costs, v):
        if len(seg) < pp:
            return None
        cut += [seg[0] + part[0] for part in assign_stages([costs[i] for i in seg], pp)]
    return tuple(cut) + (len(costs),)


def _descend(cut: tuple[int, ...], key: Callable[[tuple[int, ...]], Any], scale: float) -> tuple[int, ...]:
    """Move single chunk boundaries (one layer to the neighbouring chunk) while ``key`` strictly
    decreases (beyond rounding, ``scale`` the total seconds); every chunk keeps a layer."""
    best = key(cut)
    tol = 1e-12 * scale
    improved = True
    while improved:
        improved = False
        for b in range(1, len(cut) - 1):
            for step in (1, -1):
                if not cut[b - 1] < cut[b] + step < cut[b + 1]:
                    continue
                moved = cut[:b] + (cut[b] + step,) + cut[b + 1:]
                k = key(moved)
                if _less(k, best, tol):
                    cut, best, improved = moved, k, True
    return cut


def _less(a: Any, b: Any, tol: float) -> bool:
    """``a < b`` beyond ``tol``: numbers, or pairs compared in order (the second breaks ties)."""
    if isinstance(a, tuple):
        return a[0] < b[0] - tol or (a[0] <= b[0] + tol and a[1] < b[1] - tol * max(abs(b[1]), 1.0))
    return bool(a < b - tol)


def _feasible(costs: list[float], bound: float, chunks: int) -> bool:
    """Whether :func:`_parts` finds a cut under ``bound`` with no memory limit, without building it
    (the binary search asks this some forty times per split, and a search splits thousands of times)."""
    n, i, lim = len(costs), 0, bound * (1 + 1e-12)
    for c in range(chunks):
        stop = n - (chunks - c - 1)
        if i >= stop:
            return False
        t = costs[i]
        i += 1
        while i < stop and t + costs[i] <= lim:
            t += costs[i]
            i += 1
    return i == n


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
