"""A plan's training step as timed slots: every forward and backward pass of every microbatch on every
pipeline device, placed by the schedule Megatron-LM runs (1F1B or interleaved 1F1B).

Why a simulation beside the closed form of :mod:`.pipeline`: the search needs the step time of
thousands of strategies and uses ``m * t_max + (sum(t) - t_max) / v``; a timeline needs the order
itself, so that the bubble shows as the gap where a device waits and exposed communication as a
span no compute overlaps. The order per device is Megatron-LM's
(``megatron/core/pipeline_parallel/schedules.py``): ``p - r - 1`` warm-up forwards on rank ``r``
(interleaved: ``2 (p - r - 1) + (v - 1) p``), then one forward and one backward in turn, then the
remaining backwards; virtual microbatch ``k`` runs model chunk ``(k mod pv) div p`` (backwards in
reverse chunk order) of microbatch ``(k div pv) p + k mod p``. A pass starts when its device is free
and its input has arrived: the previous chunk's forward (or the next chunk's backward) of the same
microbatch, with its pipeline transfer.

Each pass takes what the plan's step model charges it, so a device's busy time per microbatch is
exactly the stage time the closed form uses: its compute, the collectives exposed inside it, an
even share of the exposed ZeRO-3 parameter gathers, and one stage-to-stage transfer. With equal
stages the simulated makespan equals the closed form (the paper's ``(m + p - 1)`` and
``m + (p - 1) / v`` stage-times); with unequal ones the two differ (1F1B: the closed form is an
upper bound; interleaved with unequal chunks it can be below), and :class:`StepTimeline` carries both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from ...errors import PlanError
from .plan import Plan

__all__ = ["Slot", "StepTimeline", "ChunkTimes", "schedule_order", "simulate", "makespan", "step_timeline"]

FORWARD, BACKWARD = "forward", "backward"


@dataclass(frozen=True)
class ChunkTimes:
    """Per-microbatch seconds of one model chunk's forward and backward pass (backward includes
    recomputation), each split into compute and the collectives exposed inside it."""

    forward_compute_s: float
    forward_comm_s: float
    backward_compute_s: float
    backward_comm_s: float


@dataclass(frozen=True)
class Slot:
    """One pass: ``phase`` of model chunk ``chunk`` (global index: device ``chunk % p``) for
    ``microbatch``. In order from ``start_s``: the exposed parameter gather, the compute, the exposed
    collectives, then the transfer to the neighbouring stage."""

    device: int
    chunk: int
    microbatch: int
    phase: str
    start_s: float
    gather_s: float
    compute_s: float
    comm_s: float
    p2p_s: float

    @property
    def compute_start_s(self) -> float:
        return self.start_s + self.gather_s

    @property
    def comm_start_s(self) -> float:
        return self.compute_start_s + self.compute_s

    @property
    def p2p_start_s(self) -> float:
        return self.comm_start_s + self.comm_s

    @property
    def end_s(self) -> float:
        return self.p2p_start_s + self.p2p_s


@dataclass(frozen=True)
class StepTimeline:
    """The simulated step: slots, then the once-per-step terms after the pipeline drains. ``total_s``
    is the simulated step, equal to the plan's ``step_time_s`` (``plan_step_s``) for a plan made by
    this version; ``closed_form_step_s`` the closed form's step (the plan's, or ``plan_step_s`` for a
    version 1 plan, whose step time was the closed form)."""

    schedule: str
    pp: int
    microbatches: int
    interleave: int
    slots: list[Slot]
    pipeline_s: float
    closed_form_pipeline_s: float
    dp_reduction_s: float
    dp_exposed_s: float
    optimizer_s: float
    plan_step_s: float
    closed_form_step_s: float
    #: The tied-embedding gradient all-reduce between the first and last stage (:mod:`.tied_grads`),
    #: after the data-parallel reduction and before the optimizer.
    tied_grad_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.pipeline_s + self.dp_exposed_s + self.tied_grad_s + self.optimizer_s

    @property
    def difference_s(self) -> float:
        """Simulated minus closed-form step (0 with equal stages)."""
        return self.total_s - self.closed_form_step_s


@cache
def schedule_order(p: int, m: int, v: int, rank: int) -> tuple[tuple[str, int, int], ...]:
    """``(phase, local chunk, microbatch)`` in the order pipeline rank ``rank`` runs them (cached:
    the order depends on the shape only, and a search times many strategies of one shape)."""
    total = m * v
    if v == 1:
        warmup = min(p - rank - 1, m)
    else:
        warmup = total if m == p else min((p - rank - 1) * 2 + (v - 1) * p, total)

    def virtual(k: int, forward: bool) -> tuple[str, int, int]:
        in_group = k % (p * v)
        chunk = in_group // p
        microbatch = (k // (p * v)) * p + k % p
        return (FORWARD, chunk, microbatch) if forward else (BACKWARD, v - 1 - chunk, microbatch)

    order = [virtual(k, True) for k in range(warmup)]
    steady = total - warmup
    for i in range(steady):
        order += [virtual(warmup + i, True), virtual(i, False)]
    order += [virtual(i, False) for i in range(steady, total)]
    return tuple(order)


#: One pass of a rank's order, compiled: its index, the index of the pass it waits for (-1: none),
#: its global chunk, whether it is a forward, and ``(phase, local chunk, microbatch)`` as ordered.
_Pass = tuple[int, int, int, bool, tuple[str, int, int]]


@cache
def _compiled(p: int, m: int, v: int) -> tuple[tuple[_Pass, ...], ...]:
    """Each rank's order with its dependencies as indices (pass ``(phase, g, j)`` is index
    ``(phase * p v + g) m + j``): the structure depends on the shape only, so a search that times
    thousands of layouts of one shape resolves it once and :func:`_run` indexes lists."""
    last = p * v - 1

    def index(forward: bool, g: int, j: int) -> int:
        return ((0 if forward else p * v) + g) * m + j

    out = []
    for r in range(p):
        passes = []
        for step in schedule_order(p, m, v, r):
            phase, local, j = step
            g = local * p + r
            forward = phase == FORWARD
            if forward:
                dep = index(True, g - 1, j) if g > 0 else -1
            else:
                dep = index(False, g + 1, j) if g < last else index(True, g, j)
            passes.append((index(forward, g, j), dep, g, forward, step))
        out.append(tuple(passes))
    return tuple(out)


def _run(p: int, m: int, v: int, forward_s: Sequence[float], backward_s: Sequence[float],
         record: list[tuple[int, str, int, int, float]] | None = None) -> float:
    """The makespan of Megatron's order with pass ``(phase, g)`` taking ``forward_s[g]`` /
    ``backward_s[g]`` seconds; each pass ``(rank, phase, g, microbatch, start)`` appended to
    ``record`` when given. Event-driven: a rank runs its passes in order until one waits for an
    input, and resumes when that input's pass ends, so every pass is placed once."""
    orders = _compiled(p, m, v)
    n = 2 * p * v * m
    nxt = [0] * p
    free = [0.0] * p
    done = [-1.0] * n                       # end of each pass (-1: not run yet)
    waiting = [-1] * n                      # the rank waiting for each pass (-1: none)
    ready = list(range(p - 1, -1, -1))
    makespan = 0.0
    while ready:
        r = ready.pop()
        order = orders[r]
        i, t = nxt[r], free[r]
        while i < len(order):
            key, dep, g, forward, step = order[i]
            if dep >= 0:
                arrived = done[dep]
                if arrived < 0.0:
                    waiting[dep] = r
                    break
                if arrived > t:
                    t = arrived
            if record is not None:
                record.append((r, step[0], g, step[2], t))
            t += forward_s[g] if forward else backward_s[g]
            done[key] = t
            if t > makespan:
                makespan = t
            i += 1
            woken = waiting[key]
            if woken >= 0:
                waiting[key] = -1
                ready.append(woken)
        nxt[r], free[r] = i, t
    if any(nxt[r] < len(orders[r]) for r in range(p)):   # cannot happen with Megatron's order
        raise PlanError(f"schedule: pp={p}, m={m}, v={v} deadlocks")
    return makespan


def _pass_times(p: int, v: int, chunks: Sequence[ChunkTimes], p2p_s: float,
                gather_s: Sequence[float] | None) -> tuple[list[float], list[float], list[float]]:
    """Per global chunk: the gather share of one pass, and each phase's whole pass seconds."""
    if len(chunks) != p * v:
        raise PlanError(f"schedule: {len(chunks)} chunk times for pp={p} x interleave={v} chunks")
    send = p2p_s if p > 1 else 0.0
    gather = [gather_s[g % p] / (2 * v) if gather_s else 0.0 for g in range(p * v)]
    fwd = [gather[g] + c.forward_compute_s + c.forward_comm_s + send for g, c in enumerate(chunks)]
    bwd = [gather[g] + c.backward_compute_s + c.backward_comm_s + send for g, c in enumerate(chunks)]
    return gather, fwd, bwd


def makespan(p: int, m: int, v: int, chunks: Sequence[ChunkTimes], *, p2p_s: float = 0.0,
             gather_s: Sequence[float] | None = None) -> float:
    """When the last pass of :func:`simulate`'s schedule ends, without building its slots (what a
    search ranks strategies by)."""
    _, fwd, bwd = _pass_times(p, v, chunks, p2p_s, gather_s)
    return _run(p, m, v, fwd, bwd)


def simulate(p: int, m: int, v: int, chunks: Sequence[ChunkTimes], *, p2p_s: float = 0.0,
             gather_s: Sequence[float] | None = None) -> list[Slot]:
    """Every pass of ``m`` microbatches through ``p * v`` chunks (``chunks[g]`` on device ``g % p``),
    timed: ``p2p_s`` per pass transfer, ``gather_s[d]`` per microbatch on device ``d`` (spread over
    its ``2 v`` passes)."""
    gather, fwd, bwd = _pass_times(p, v, chunks, p2p_s, gather_s)
    record: list[tuple[int, str, int, int, float]] = []
    _run(p, m, v, fwd, bwd, record)
    send = p2p_s if p > 1 else 0.0
    slots = []
    for r, phase, g, j, start in record:
        c = chunks[g]
        compute, comm = ((c.forward_compute_s, c.forward_comm_s) if phase == FORWARD
                         else (c.backward_compute_s, c.backward_comm_s))
        slots.append(Slot(r, g, j, phase, start, gather[g], compute, comm, send))
    return slots


def _chunk_times(plan: Plan) -> list[ChunkTimes]:
    """Chunk times in global chunk order from the plan's stages; a plan saved without per-chunk
    times splits each device's times evenly over its chunks."""
    p, v = plan.parallel.pp, plan.parallel.interleave
    out: list[ChunkTimes | None] = [None] * (p * v)
    for stage in plan.stages:
        d = int(stage["device"])
        listed = stage.get("chunks")
        if listed:
            for c in listed:
                out[int(c["chunk"])] = ChunkTimes(
                    float(c["forward_s"]) - float(c["forward_comm_s"]), float(c["forward_comm_s"]),
                    float(c["backward_s"]) - float(c["backward_comm_s"]), float(c["backward_comm_s"]))
        else:
            f, b = float(stage["forward_s"]) / v, float(stage["backward_s"]) / v
            for local in range(v):
                out[local * p + d] = ChunkTimes(f, 0.0, b, 0.0)
    missing = [g for g, c in enumerate(out) if c is None]
    if missing:
        raise PlanError(f"schedule: the plan has no times for pipeline chunk(s) {missing}")
    return [c for c in out if c is not None]


def step_timeline(plan: Plan) -> StepTimeline:
    """The plan's step as a timeline (see the module doc)."""
    par = plan.parallel
    p, m, v = par.pp, par.microbatches, par.interleave
    p2p = max((float(s.get("p2p_each_s", 0.0)) for s in plan.stages), default=0.0)
    gathers = [float(s.get("param_gather_s", 0.0)) for s in sorted(plan.stages, key=lambda s: int(s["device"]))]
    slots = simulate(p, m, v, _chunk_times(plan), p2p_s=p2p, gather_s=gathers if any(gathers) else None)
    pipeline = max((s.end_s for s in slots), default=0.0)
    dp_exposed = plan.breakdown.get("dp_comm", 0.0)
    optimizer = plan.breakdown.get("optimizer", 0.0)
    tied = plan.breakdown.get("tied_grad", 0.0)
    dp_total = sum(float(c["seconds"]) for c in plan.collectives
                   if c.get("purpose") in ("data-parallel gradient reduction",
                                           "expert data-parallel gradient reduction"))
    closed = plan.closed_form_step_s or plan.step_time_s
    return StepTimeline(par.schedule, p, m, v, slots, pipeline, closed - dp_exposed - tied - optimizer,
                        dp_total, dp_exposed, optimizer, plan.step_time_s, closed, tied)
