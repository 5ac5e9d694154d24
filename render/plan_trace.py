"""``narrowpipe plan --trace``: a training plan's step as a Chrome trace (ui.perfetto.dev, chrome://tracing).

One process per pipeline stage (the ``tp x cp x dp`` devices that run it in step), with tracks for
``compute`` (one span per forward or backward pass of a microbatch through a model chunk, then the
optimizer), ``collectives (exposed)`` (tensor/context/expert-parallel communication inside a pass
that no compute hides), ``pipeline p2p`` (the transfer to the neighbouring stage), ``data-parallel``
(ZeRO-3 parameter gathers, the gradient reduction: its hidden part beside the backward, its exposed
part after it) and ``idle (bubble)`` (where the stage waits). A ``step`` process holds the whole step.
The timing is :func:`~narrowpipe.costmodel.planner.schedule.step_timeline`'s; this module only draws.
"""

from __future__ import annotations

from pathlib import Path

from ..costmodel.planner.plan import Plan
from ..costmodel.planner.schedule import StepTimeline, step_timeline
from .trace import TraceBuilder

__all__ = ["plan_trace", "write_plan_trace", "SLOT_CATEGORY", "TRACKS"]

#: Every forward/backward pass span's ``cat`` starts with this: one per scheduled slot.
SLOT_CATEGORY = "slot"
TRACKS = ("compute", "collectives (exposed)", "pipeline p2p", "data-parallel", "idle (bubble)")
_EPS = 1e-15


def plan_trace(plan: Plan, timeline: StepTimeline | None = None) -> TraceBuilder:
    """The trace of ``plan``'s step (``timeline``: an already simulated one)."""
    tl = timeline or step_timeline(plan)
    par = plan.parallel
    b = TraceBuilder(metadata={"plan": {"model": plan.model, "target": plan.target, "system": plan.system,
                                        "devices": plan.devices, "parallel": par.to_dict(),
                                        "schedule": tl.schedule},
                               "step_s": tl.total_s, "plan_step_time_s": plan.step_time_s,
                               "closed_form_step_s": tl.closed_form_step_s, "pipeline_s": tl.pipeline_s,
                               "closed_form_pipeline_s": tl.closed_form_pipeline_s})
    step_pid = b.process("step", sort_index=0)
    run = b.track(step_pid, "step")
    b.span(run, f"{plan.model}: {par.describe()} ({tl.schedule})", 0.0, tl.total_s, cat="run",
           args={"simulated_step_s": tl.total_s, "plan_step_time_s": plan.step_time_s,
                 "closed_form_step_s": tl.closed_form_step_s, "difference_s": tl.difference_s,
                 "microbatches": tl.microbatches, "interleave": tl.interleave})
    if abs(tl.difference_s) > 1e-12 * max(tl.closed_form_step_s, 1e-30):
        b.span(b.track(step_pid, "closed form"), "closed-form step time", 0.0, tl.closed_form_step_s,
               cat="run", args={"note": "m*t_max + (sum(t) - t_max)/v, what the search first ranks by; the simulated "
                                        f"schedule (the plan's step) differs by {tl.difference_s * 1e3:+.3f} ms"})
    group = par.tp * par.cp * par.dp
    pids = {d: b.process(f"pipeline stage {d} ({group} devices)", sort_index=1 + d) for d in range(tl.pp)}
    tracks = {(d, name): b.track(pid, name, sort_index=i) for d, pid in pids.items() for i, name in enumerate(TRACKS)}
    layers = {int(c["chunk"]): c.get("layers", []) for s in plan.stages for c in s.get("chunks", [])}
    for s in tl.slots:
        tag = ("F" if s.phase == "forward" else "B") + f" mb{s.microbatch}" + (f" c{s.chunk}" if tl.interleave > 1
                                                                                else "")
        args = {"microbatch": s.microbatch, "chunk": s.chunk, "phase": s.phase, "layers": layers.get(s.chunk, []),
                "compute_us": s.compute_s * 1e6, "exposed_comm_us": s.comm_s * 1e6}
        b.span(tracks[(s.device, "compute")], tag, s.compute_start_s, s.compute_s,
               cat=f"{SLOT_CATEGORY},{s.phase}", args=args)
        if s.gather_s > _EPS:
            b.span(tracks[(s.device, "data-parallel")], f"gather params ({tag})", s.start_s, s.gather_s,
                   cat="comm,param_gather")
        if s.comm_s > _EPS:
            b.span(tracks[(s.device, "collectives (exposed)")], f"collectives ({tag})", s.comm_start_s, s.comm_s,
                   cat="comm,exposed")
        if s.p2p_s > _EPS:
            direction = "activation to the next stage" if s.phase == "forward" else "gradient to the previous stage"
            b.span(tracks[(s.device, "pipeline p2p")], f"send ({tag})", s.p2p_start_s, s.p2p_s, cat="comm,p2p",
                   args={"what": direction})
    _idle(b, tl, tracks)
    _once_per_step(b, tl, tracks)
    return b


def _idle(b: TraceBuilder, tl: StepTimeline, tracks: dict) -> None:
    """The bubble: each stage's gaps between passes until the pipeline drains."""
    for d in range(tl.pp):
        mine = sorted((s for s in tl.slots if s.device == d), key=lambda s: s.start_s)
        t = 0.0
        for s in mine + [None]:
            start = s.start_s if s is not None else tl.pipeline_s
            if start - t > 1e-12 * max(tl.pipeline_s, 1e-30):
                b.span(tracks[(d, "idle (bubble)")], "idle", t, start - t, cat="bubble")
            t = max(t, s.end_s) if s is not None else t


def _once_per_step(b: TraceBuilder, tl: StepTimeline, tracks: dict) -> None:
    """The gradient reduction (hidden beside the backward, exposed after the drain), the tied
    embedding's all-reduce and the optimizer."""
    end = tl.pipeline_s + tl.dp_exposed_s
    for d in range(tl.pp):
        if tl.dp_reduction_s > _EPS:
            start = max(0.0, end - tl.dp_reduction_s)
            hidden = max(0.0, tl.pipeline_s - start)
            if hidden > _EPS:
                b.span(tracks[(d, "data-parallel")], "gradient reduction (hidden)", start, hidden, cat="comm,hidden",
                       args={"note": "overlapped with the backward (the slowest stage's reduction)"})
            if tl.dp_exposed_s > _EPS:
                b.span(tracks[(d, "data-parallel")], "gradient reduction (exposed)", tl.pipeline_s, tl.dp_exposed_s,
                       cat="comm,exposed")
        if tl.tied_grad_s > _EPS and d in (0, tl.pp - 1):
            b.span(tracks[(d, "data-parallel")], "tied-embedding gradient all-reduce (exposed)", end, tl.tied_grad_s,
                   cat="comm,exposed", args={"note": "first and last pipeline stage, before the optimizer"})
        if tl.optimizer_s > _EPS:
            b.span(tracks[(d, "compute")], "optimizer step", end + tl.tied_grad_s, tl.optimizer_s, cat="optimizer")


def write_plan_trace(path: str | Path, plan: Plan) -> tuple[Path, StepTimeline]:
    """Write ``plan``'s trace; returns the file and the timeline (its simulated step time)."""
    tl = step_timeline(plan)
    return plan_trace(plan, tl).write(path), tl
