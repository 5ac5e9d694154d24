"""A strategy's step time from its simulated pipeline schedule, and the search's ranking by it.

Why: the closed form the search evaluates thousands of strategies with (``m * t_max + (sum(t) -
t_max) / v``, :func:`.step.step_time`) is the makespan of Megatron-LM's schedule only when the stages
are equal (or, for 1F1B, when the last stage is the slowest). With unequal interleaved chunks it can
be too low (a few percent on real layouts, more on skewed ones) and with a slow early 1F1B stage too
high, so a plan built on it could pick a strategy that runs slower than a runner-up and report a step
time its own timeline (``plan --trace``) contradicts. The plan therefore reports the simulated
schedule (:func:`.schedule.makespan`), and the search ranks by it without simulating everything:

* a valid lower bound of any strategy's simulated step is its device's busy time plus the fill and
  drain through the chunks before it: ``max_d (sum_{g<d} (F_g + B_g) + m t_d)`` (device ``d`` first
  waits for microbatch 0's forwards through global chunks ``0..d-1``, and its last pass, the
  backward of its first chunk, is followed by the backwards of those chunks), which equals the
  closed form with equal stages;
* the few best by the closed form are simulated first; then, cheapest bound first, every strategy
  whose bound is below the best simulated step so far is simulated; the rest cannot win. A cap
  bounds the work on pathological spaces, and a note says when it was reached.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .ep_overlap import applies as ep_overlap_applies
from .ep_overlap import block_hidden, paired_share
from .pipeline import refine_by_schedule
from .planner import Evaluation, Planner
from .schedule import ChunkTimes, makespan
from .step import ONCE_PER_STEP, layer_times

__all__ = ["chunk_rows", "chunk_times", "simulated", "refined", "best_by_schedule", "SEED", "LIMIT"]

#: How many of the best by the closed form are simulated before bounding (assumption: enough to
#: land near the simulated best, so the bound prunes most of the rest; exactness does not depend on it).
SEED = 8
#: At most this many strategies simulated per search (assumption: a bound on work; each simulation
#: places ``2 m v p`` passes at about a microsecond each). Reaching it is said in the plan's notes.
LIMIT = 2000


def chunk_rows(planner: Planner, ev: Evaluation) -> list[dict[str, Any]]:
    """Per global model chunk (on device ``chunk % pp``): its layers and per-microbatch forward and
    backward seconds (recomputation in the backward) with the collectives exposed inside each:
    ``forward_s``/``backward_s`` are whole passes, their ``*_comm_s`` included (a part, not an addition)."""
    lay = ev.step.layout
    hit = lay.cache.get("chunk_rows")
    if hit is not None:
        return hit
    layers, pro, epi = planner.costs(ev.parallel)
    chunks = lay.chunks
    rows = []
    overlap = ep_overlap_applies(ev.parallel, planner.runtime)
    for g, idx in enumerate(chunks):
        blocks = ([pro] if g == 0 and pro is not None else []) + [layers[i] for i in idx]
        blocks += [epi] if g == len(chunks) - 1 and epi is not None else []
        comm = {ph: sum(u.exposed_s for b in blocks for u in b.collectives if u.phase in phases)
                for ph, phases in (("forward", ("forward",)), ("backward", ("recompute", "backward")))}
        hid_f, hid_b = (sum(x) for x in zip(*(block_hidden(b) for b in blocks))) if overlap and blocks else (0.0, 0.0)
        paired = paired_share(ev.parallel, g % ev.parallel.pp)
        hid_f, hid_b = hid_f * paired, hid_b * paired
        rows.append({"chunk": g, "layers": list(idx), "forward_s": sum(b.forward_s for b in blocks) - hid_f,
                     "backward_s": sum(b.backward_s for b in blocks) - hid_b, "forward_comm_s": comm["forward"] - hid_f,
                     "backward_comm_s": comm["backward"] - hid_b})
    lay.cache["chunk_rows"] = rows
    return rows


def chunk_times(rows: list[dict[str, Any]]) -> list[ChunkTimes]:
    """:class:`ChunkTimes` of chunk rows (from :func:`chunk_rows` or a saved plan's stages)."""
    return [ChunkTimes(float(c["forward_s"]) - float(c["forward_comm_s"]), float(c["forward_comm_s"]),
                       float(c["backward_s"]) - float(c["backward_comm_s"]), float(c["backward_comm_s"]))
            for c in rows]


def _sends(ev: Evaluation) -> float:
    return ev.step.collectives.get("p2p_each", 0.0) if ev.parallel.pp > 1 else 0.0


def _exact_closed_form(ev: Evaluation) -> bool:
    """One stage, or 1F1B with the last stage the slowest: the closed form is the schedule's makespan."""
    p = ev.parallel
    if p.pp == 1:
        return True
    times = [s.time_s for s in ev.step.stages]
    return p.interleave == 1 and times[-1] >= max(times)


def _once_per_step(ev: Evaluation) -> float:
    return sum(ev.step.breakdown.get(k, 0.0) for k in ONCE_PER_STEP)


def lower_bound(planner: Planner, ev: Evaluation) -> float:
    """A step no shorter than the simulated one can be (see the module doc)."""
    p = ev.parallel
    rows = chunk_rows(planner, ev)
    send, v = _sends(ev), p.interleave
    gathers = ev.step.gather_s or [0.0] * p.pp
    fill, best = 0.0, 0.0
    for d, stage in enumerate(ev.step.stages):
        best = max(best, fill + p.microbatches * stage.time_s)
        c = rows[d]
        fill += c["forward_s"] + c["backward_s"] + 2 * send + gathers[d] / v
    return best + _once_per_step(ev)


def refined(planner: Planner, ev: Evaluation) -> Evaluation:
    """``ev`` simulated, and for an interleaved strategy its chunks refined on the schedule
    (:func:`.pipeline.refine_by_schedule`): the refined layout is kept when it fits and simulates
    faster. Only the search's pick and the runners-up it shows are refined: the ranking compares
    every strategy on the split its closed form chose, which keeps :func:`lower_bound` a bound of
    what it compares."""
    best = simulated(planner, ev)
    p = ev.parallel
    if p.pp > 1 and p.interleave > 1 and planner.runtime.stage_split != "uniform":
        layers, pro, epi = planner.costs(p)
        chunks = [list(c) for c in ev.step.layout.chunks]
        split = refine_by_schedule(*layer_times(layers, pro, epi), chunks, p.pp, p.microbatches)
        if split != chunks:
            other = planner.evaluate(p, chunks=split)
            if other.fits or not ev.fits:
                other = simulated(planner, other)
                if other.step.total_s < best.step.total_s:
                    best = other
    return best


def simulated(planner: Planner, ev: Evaluation) -> Evaluation:
    """``ev`` with the simulated schedule's step time (``step.closed_form_s`` keeps the closed form)
    and the bubble the simulation leaves (so the breakdown still adds up to the step)."""
    step = ev.step
    if step.closed_form_s is not None:
        return ev
    closed = step.total_s
    if _exact_closed_form(ev):
        return dataclasses.replace(ev, step=dataclasses.replace(step, closed_form_s=closed))
    p = ev.parallel
    gathers = step.gather_s if any(step.gather_s) else None
    pipeline = makespan(p.pp, p.microbatches, p.interleave, chunk_times(chunk_rows(planner, ev)),
                        p2p_s=_sends(ev), gather_s=gathers)
    busy = p.microbatches * max(s.time_s for s in step.stages)
    breakdown = dict(step.breakdown)
    breakdown["bubble"] = pipeline - busy
    total = pipeline + _once_per_step(ev)
    return dataclasses.replace(ev, step=dataclasses.replace(step, total_s=total, breakdown=breakdown,
                                                            closed_form_s=closed))


def best_by_schedule(planner: Planner, fitting: list[Evaluation]) -> tuple[Evaluation, int, bool]:
    """The strategy of ``fitting`` (sorted by the closed form) whose simulated step is shortest:
    ``(it, strategies simulated, whether the cap stopped the ranking early)``."""
    count = 0

    def sim(e: Evaluation) -> Evaluation:
        nonlocal count
        count += 0 if _exact_closed_form(e) else 1
        return simulated(planner, e)

    best = min((sim(e) for e in fitting[:SEED]), key=lambda e: e.step.total_s)
    bound = best.step.total_s
    rest = [e for e in fitting[SEED:] if e.step.total_s - e.step.breakdown["bubble"] < bound]  # busy time first
    ranked = sorted(((lower_bound(planner, e), i, e) for i, e in enumerate(rest)), key=lambda x: (x[0], x[1]))
    for lb, _, e in ranked:
        if lb >= best.step.total_s:
            break
        if count >= LIMIT:
            return best, count, True
        s = sim(e)
        if s.step.total_s < best.step.total_s:
            best = s
    return best, count, False
