"""A chip pipeline with its inputs in microbatches: the closed-form run time and where every pass runs.

The dataflow layout makes each chip a stage and streams ``m`` microbatches through the stages. A
stage's time splits three ways (:class:`StageParts`): fixed latencies paid once as the pipeline
fills (kernel launches, chip-to-chip hop latencies), the weight reads every microbatch's pass
repeats, and the work of the whole batch, shared out over the passes. :func:`pipelined_seconds` is
the run the execution model charges; :func:`pass_schedule` places every pass on the run's clock so
that a timeline draws the same run, and ends when it does.

Keeping both here keeps them one model: the placement is the classic flow shop of identical jobs
(stage ``d`` runs pass ``j`` when it has finished pass ``j - 1`` and pass ``j`` has left stage
``d - 1``), whose last pass ends at the sum of the passes plus ``m - 1`` times the slowest one. The
fixed latencies sit between stages (a microbatch reaches a stage that much after it left the one
before), so every microbatch crosses each of them once and the run's end adds each once, as
:func:`pipelined_seconds` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .common import KernelTime, bound_of

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["StageParts", "Pipelining", "StagePasses", "pipelined_seconds", "pass_schedule", "shares_of_run"]


@dataclass
class StageParts:
    """One chip's kernels under one layout, split by how microbatching changes them: ``fixed``
    (kernel and hop latencies), ``per_pass`` (weights read from fast memory by each microbatch) and
    ``work`` (what the whole batch's inputs need: FLOPs, activation bytes, hop bytes)."""

    fixed: float = 0.0
    per_pass: float = 0.0
    work: float = 0.0

    def add(self, fixed: float, per_pass: float, work: float) -> None:
        self.fixed += fixed
        self.per_pass += per_pass
        self.work += max(work, 0.0)


def pipelined_seconds(stages: list[StageParts], m: int) -> float:
    """The run with its inputs in ``m`` microbatches: the pipeline fills (every stage's fixed
    latency and the first microbatch's pass), then the slowest stage's pass repeats ``m - 1``
    times; a pass is the stage's weight reads plus its share of the work. With ``m = 1`` this is the
    sum of the stages; more microbatches overlap the stages but re-read the weights, so the time
    never falls as the batch grows."""
    passes = [s.per_pass + s.work / m for s in stages]
    return sum(s.fixed for s in stages) + sum(passes) + (m - 1) * max(passes, default=0.0)


@dataclass(frozen=True)
class Pipelining:
    """Where a pipelined schedule's kernels run and how their times split, one entry per kernel in
    program order, unscaled (the schedule's own times are scaled to their share of the pipelined
    total): ``pieces`` holds ``(chip, share, fixed_s, reads_s, work_s)`` per chip the kernel occupies
    (a kernel too large for one chip is split over several, each piece timed on its own chip).
    ``fixed_s`` is paid once (launch overhead, and the hop latency after a chip's last kernel),
    ``reads_s`` by every one of the ``microbatches`` passes (its weights read from fast memory),
    ``work_s`` once over all passes together (the batch's FLOPs and activation bytes, a pass doing
    1/m of it)."""

    microbatches: int
    pieces: tuple[tuple[tuple[int, float, float, float, float], ...], ...]
    #: each kernel's own time, unpipelined (its roofline terms for the whole batch in one pass), which
    #: the schedule's shares of the run (:func:`shares_of_run`) no longer are; empty: the shares are
    #: the own times scaled by one factor (schedules built before the fill was kept apart)
    own: tuple[KernelTime, ...] = ()


@dataclass(frozen=True)
class StagePasses:
    """Where one stage's passes run: the first starts at ``start_s`` and each next one ``every_s``
    later (the slowest pass among this stage and those before it: a faster stage waits for its
    inputs), each lasting ``pass_s``."""

    start_s: float
    every_s: float
    pass_s: float
    passes: int

    @property
    def end_s(self) -> float:
        """When the stage's last pass ends."""
        return self.start_s + (self.passes - 1) * self.every_s + self.pass_s


def pass_schedule(fills: list[float], passes: list[float], m: int) -> list[StagePasses]:
    """Every stage's passes on the run's clock: stage ``d``'s first pass starts ``fills[d]`` after the
    first microbatch leaves stage ``d - 1`` (at time ``fills[0]`` for the first stage), and its later
    passes follow at the pace of the slowest stage up to it. The last stage's last pass ends at
    ``sum(fills) + sum(passes) + (m - 1) * max(passes)``: :func:`pipelined_seconds` with the fills as
    its fixed latencies (any split of the same total over the stages)."""
    out: list[StagePasses] = []
    left, pace = 0.0, 0.0
    for fill, p in zip(fills, passes):
        pace = max(pace, p)
        stage = StagePasses(left + fill, pace, p, m)
        out.append(stage)
        left = stage.start_s + p
    return out


def shares_of_run(times: Sequence[KernelTime], fixed: Sequence[float], latency: float,
                  total: float) -> list[KernelTime]:
    """Each kernel's share of a pipelined run of ``total`` seconds whose unpipelined sum is ``latency``.

    The run is the fill (every kernel's ``fixed`` latency: its launch and any hop latency after it,
    paid once) plus the passes, which overlap across stages; only the passes shrink (or grow) with
    the microbatching. So a kernel keeps its fixed latency and the rest of its time is scaled by
    ``(total - F) / (latency - F)``, ``F`` the sum of the fixed latencies: the shares still add up
    to ``total``, and the launch latencies that pipelining leaves on the critical path show as
    overhead in the bound mix (QA: Llama-3-70B prefill on 4 wafers read "C 72% O 14%" while halving
    the overhead sped it up 1.34x: a uniform scaling had shrunk the fill with the passes)."""
    f_sum = sum(fixed)
    r = (total - f_sum) / (latency - f_sum) if latency > f_sum else 0.0
    out = []
    for t, f in zip(times, fixed, strict=True):
        if t.time_s <= 0:
            out.append(t)
            continue
        f = min(f, t.time_s)
        hop = min(max(f - t.overhead_s, 0.0), t.comm_s)        # a hop's latency: in the comm term, fixed
        compute, memory = t.compute_s * r, t.memory_s * r
        comm = hop + (t.comm_s - hop) * r
        time_s = f + (t.time_s - f) * r
        k = time_s / t.time_s
        bound = bound_of(compute, memory, comm, t.overhead_s)
        out.append(KernelTime(time_s, compute, memory, comm, t.overhead_s, bound, t.unit, t.utilization,
                              t.executed_flops * k, t.note, t.traffic_bytes * k, t.scale * k, t.busy_fraction))
    return out
