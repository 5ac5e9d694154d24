"""The predicted timeline: every launched kernel of a schedule with its device, stream and start time.

A :class:`~narrowpipe.costmodel.execution.Schedule` holds per-kernel times in program order and a
placement; people read a schedule as a timeline (a trace viewer, a roofline, a sortable table), and
those renderers must not need the program or the graph. So the timeline is plain data, built once
per timed report and written to its JSON.

Times are device busy times. A one-device schedule's kernels run end to end and add up to its
total. A pipelined layout (dataflow chips as stages, ``m`` microbatches streaming through) runs
each kernel ``m`` times, once per microbatch's pass: an entry holds its first pass (``start_s``,
``pass_s``) and the interval to the next (``every_s``), and its ``time_s`` is all it is busy for,
the fixed latency paid once plus every pass, so the weight re-reads of passes 2..m (``reread_s``)
are in it. Where the passes run is :func:`~narrowpipe.costmodel.execution.pipeline.pass_schedule`'s
flow shop, the same run the execution model charges: the last pass ends at the schedule's total.
A kernel whose next kernel runs on another device ends with the transfer to it (its communication
term: the hop the dataflow layout adds), kept apart from the kernel's own work. A tensor-parallel
layout runs every kernel as ``shards`` equal shards on as many devices at once: an entry's times
are one device's, its ``flops`` and ``bytes`` the whole kernel's (``device_flops`` and
``device_bytes`` one shard's), and an exchange of partial results that follows it (the all-reduce
closing a block) is its trailing transfer.

Streams say what a slot occupies: ``communication`` for collectives and transfers between devices,
``memory`` for kernels that only move data (no FLOPs: copies, gathers, concatenations) and
``compute`` for the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from ..ir import OpGroup

if TYPE_CHECKING:   # report.py reads the result type without pulling in the execution models
    from .execution import KernelTime, Program, Schedule
    from .kernels import Kernel

__all__ = ["ScheduledKernel", "timeline", "STREAMS", "COMPUTE_STREAM", "MEMORY_STREAM", "COMM_STREAM"]

COMPUTE_STREAM, MEMORY_STREAM, COMM_STREAM = "compute", "memory", "communication"
STREAMS = (COMPUTE_STREAM, MEMORY_STREAM, COMM_STREAM)


class ScheduledKernel(NamedTuple):
    """One launched kernel in the predicted run (a named tuple: a 2,000-kernel model on five targets
    builds 10,000 of them, and a frozen dataclass's ``__init__`` costs as much as the timing).

    ``start_s`` places its first pass on the run's clock, on ``device`` (and, when ``shards`` > 1,
    on the devices after it, one shard each, at the same time); ``time_s`` is what it keeps each of
    them busy for over the run. It includes ``transfer_s``, the trailing transfer of its output to
    the device of the next kernel (or between its shards), if any. The roofline terms
    (``compute_s``, ``memory_s``, ``comm_s``, ``overhead_s``) and ``bound`` are the execution
    model's for the whole batch in one pass; ``flops`` and ``bytes`` are the kernel's work and
    external traffic (fused intermediates excluded), over all its shards; ``executed_flops`` the
    work the hardware does for it (a causal attention's skipped blocks out, tile padding in), which
    its time and ``utilization`` are for, while ``flops`` keeps the model's count (FlopCounterMode's
    convention, the count MFU divides). ``modeled`` is False for a
    kernel without a cost rule (0 s: not timed).

    A pipelined kernel runs ``passes`` times: pass ``i`` from ``start_s + i * every_s`` for
    ``pass_s`` (the last ``pass_transfer_s`` of it the transfer); ``time_s`` is its fixed latency
    (launch overhead, a hop's latency: paid once, as the pipeline fills) plus ``passes * pass_s``,
    and ``reread_s`` the part of it that passes 2..``passes`` spend reading the weights again. Any
    other kernel runs once: ``pass_s`` is ``time_s``.
    """

    name: str
    kind: str
    op: str
    group: str
    scope: str
    nodes: int
    device: int
    stream: str
    start_s: float
    time_s: float
    transfer_s: float
    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float
    bound: str
    unit: str
    utilization: float
    flops: int
    bytes: int
    comm_bytes: int
    modeled: bool = True
    passes: int = 1
    every_s: float = 0.0
    pass_s: float = 0.0
    pass_transfer_s: float = 0.0
    reread_s: float = 0.0
    shards: int = 1
    executed_flops: int = 0

    @property
    def end_s(self) -> float:
        return self.start_s + self.time_s

    @property
    def kernel_s(self) -> float:
        """The kernel's own time, without the trailing transfer."""
        return self.time_s - self.transfer_s

    @property
    def last_pass_end_s(self) -> float:
        """When its last pass ends (its end, for a kernel that runs once)."""
        return self.start_s + (self.passes - 1) * self.every_s + self.pass_s

    @property
    def device_flops(self) -> float:
        """One shard's FLOPs: what each device that runs it does."""
        return self.flops / self.shards

    @property
    def device_bytes(self) -> float:
        """One shard's external traffic: the 1/shards share each device's memory time is charged for."""
        return self.bytes / self.shards

    @property
    def device_executed_flops(self) -> float:
        """One shard's executed FLOPs (a causal attention's skipped blocks out, tile padding in): the
        work its time is for. Files written before report 6 have none: the model's count stands in."""
        return (self.executed_flops or self.flops) / self.shards

    @property
    def device_useful_flops(self) -> float:
        """One shard's useful FLOPs, what the roofline plots: the executed work where it is less than
        the model's count (a causal attention's skipped blocks), the model's count where the kernel
        executes more (tile padding is waste, and the point shows it below the roof)."""
        return min(self.device_executed_flops, self.device_flops) if self.flops > 0 else self.device_executed_flops

    @property
    def intensity(self) -> float | None:
        """FLOPs per byte of the kernel's external traffic (None when it moves no bytes)."""
        return self.flops / self.bytes if self.bytes else None

    @property
    def achieved_flops_per_s(self) -> float | None:
        """One device's executed FLOPs over its own time: the height of its point on a per-device
        roofline (the model's count over a causal attention's time read above the peak)."""
        return self.device_executed_flops / self.kernel_s if self.kernel_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScheduledKernel:
        """An entry read back; one from a report before version 5 ran once, on one device."""
        data = {"pass_s": data["time_s"], "pass_transfer_s": data["transfer_s"], **data}
        return cls(**data)


def _stream(kernel_group: OpGroup, flops: int, comm_bytes: int) -> str:
    if kernel_group is OpGroup.COLLECTIVE or comm_bytes:
        return COMM_STREAM
    return COMPUTE_STREAM if flops else MEMORY_STREAM


def timeline(program: Program, schedule: Schedule) -> list[ScheduledKernel]:
    """Every non-free kernel of ``program`` as ``schedule`` places it, in program order.

    A pipelined schedule places every pass (:func:`_pipelined`). Otherwise each device runs its
    kernels back to back in program order, each for its busy time, and devices start one after
    another, each when the devices before it have finished, so a one-device run is its kernels end
    to end, ending at the schedule's total.

    Views launch nothing and take no time, so they are left out; a kernel without a cost rule stays
    in, with 0 s and ``modeled=False``, so a timeline never hides what it could not time.
    """
    placed = [(i, k, t) for i, (k, t) in enumerate(zip(program.kernels, schedule.times)) if not k.is_free]
    devices = [schedule.placement.get(k.name, 0) for _, k, _ in placed]
    if schedule.pipelining is not None:
        return _pipelined(program, schedule, placed)
    following = _next_devices(placed, devices)
    busy: dict[int, float] = {}
    for d, (_, _, t) in zip(devices, placed):
        busy[d] = busy.get(d, 0.0) + t.time_s
    clock: dict[int, float] = {}
    start = 0.0
    for d in busy:                      # devices in the order the program first reaches them
        clock[d] = start
        start += busy[d]
    unmodeled = {id(n) for n in program.table.unmodeled}
    out: list[ScheduledKernel] = []
    for (_, k, t), device, nxt in zip(placed, devices, following):
        # a sharded kernel's comm term is the exchange between its shards that closes it
        trailing = (nxt is not None and nxt != device) or (schedule.shards > 1 and t.comm_s > 0)
        transfer = min(t.comm_s, t.time_s) if trailing else 0.0
        out.append(_entry(k, t, device, clock[device], t.time_s, transfer, unmodeled, pass_s=t.time_s,
                          pass_transfer_s=transfer, shards=schedule.shards,
                          executed_flops=round(t.executed_flops * schedule.shards)))
        clock[device] += t.time_s
    return out


def _next_devices(placed: list[tuple[int, Kernel, KernelTime]], devices: list[int]) -> list[int | None]:
    """Where each timed kernel's next timed kernel runs (None for the last, and for untimed kernels)."""
    out: list[int | None] = [None] * len(placed)
    following: int | None = None
    for i in range(len(placed) - 1, -1, -1):
        if placed[i][2].time_s > 0:
            out[i] = following
            following = devices[i]
    return out


def _pipelined(program: Program, schedule: Schedule,
               placed: list[tuple[int, Kernel, KernelTime]]) -> list[ScheduledKernel]:
    """Each chip a stage, each kernel run once per microbatch; a kernel split over chips is an entry
    per piece, on its chip, with its share of the kernel's terms, FLOPs and bytes. A chip's passes
    are placed by :func:`pass_schedule`; its fill (what it adds once before its first pass) is its
    kernels' launch overheads and the latency of the hop into it, which the execution model charges
    to the chip that sends (the same latencies in total, so the run ends when the model says)."""
    from .execution.pipeline import pass_schedule  # here: report.py imports this module, not the models
    split = schedule.pipelining
    assert split is not None
    m = split.microbatches
    # the schedule's times are shares of the pipelined total; the entries hold the kernels' own terms
    latency = float(schedule.layout.get("latency_s") or schedule.total_s)
    unscale = latency / schedule.total_s if schedule.total_s > 0 else 1.0
    # (kernel index, kernel, its time, chip, share, fixed, reads, work) per piece, in program order
    pieces: list[tuple[int, Kernel, KernelTime, int, float, float, float, float, bool]] = []
    for i, k, t in placed:
        pieces.extend((i, k, t, *part, n == 0) for n, part in enumerate(split.pieces[i]))
    nexts = _next_devices([(i, k, t) for i, k, t, *_ in pieces], [p[3] for p in pieces])
    fill: dict[int, float] = {}
    pace: dict[int, float] = {}
    for (i, _, t, chip, _, fixed, reads, work, first), nxt in zip(pieces, nexts):
        pace[chip] = pace.get(chip, 0.0) + reads + work / m
        own = split.own[i].overhead_s if split.own else t.overhead_s * unscale
        overhead = min(own, fixed) if first else 0.0     # the first piece launches it
        fill[chip] = fill.get(chip, 0.0) + overhead
        receiver = nxt if nxt is not None and nxt != chip else chip
        fill[receiver] = fill.get(receiver, 0.0) + fixed - overhead   # a hop's latency
    order = list(pace)                  # chips in the order the program reaches them: the stages
    stages = dict(zip(order, pass_schedule([fill.get(d, 0.0) for d in order], [pace[d] for d in order], m)))
    clock = {d: stages[d].start_s for d in order}
    unmodeled = {id(n) for n in program.table.unmodeled}
    out: list[ScheduledKernel] = []
    for (i, k, t, chip, share, fixed, reads, work, _), nxt in zip(pieces, nexts):
        one = split.own[i].scaled(share) if split.own else t.scaled(unscale * share)
        pass_s = reads + work / m
        busy = fixed + m * pass_s
        moved = nxt is not None and nxt != chip
        transfer = min(one.comm_s, busy) if moved else 0.0
        hop_latency = max(fixed - one.overhead_s, 0.0) if moved else 0.0
        out.append(_entry(k, one, chip, clock[chip], busy, transfer, unmodeled, share=share, passes=m,
                          every_s=stages[chip].every_s if m > 1 else 0.0, pass_s=pass_s,
                          pass_transfer_s=min(max(transfer - hop_latency, 0.0) / m, pass_s),
                          reread_s=(m - 1) * reads, executed_flops=round(one.executed_flops)))
        clock[chip] += pass_s
    return out


def _entry(k: Kernel, t: KernelTime, device: int, start_s: float, time_s: float, transfer_s: float,
           unmodeled: set[int], share: float = 1.0, **passes: Any) -> ScheduledKernel:
    """One timeline entry: ``t`` holds the kernel's roofline terms, ``passes`` how it repeats;
    ``share`` is the part of the kernel this entry is (a piece of a kernel split over chips)."""
    c, anchor = k.cost, k.anchor
    return ScheduledKernel(
        name=k.name, kind=k.kind, op=anchor.op.value, group=anchor.group.value, scope=anchor.source.scope,
        nodes=len(k.nodes), device=device, stream=_stream(anchor.group, c.flops, c.comm_bytes), start_s=start_s,
        time_s=time_s, transfer_s=transfer_s, compute_s=t.compute_s, memory_s=t.memory_s, comm_s=t.comm_s,
        overhead_s=t.overhead_s, bound=t.bound, unit=t.unit, utilization=t.utilization,
        flops=round(c.flops * share), bytes=round(c.bytes * share), comm_bytes=round(c.comm_bytes * share),
        modeled=id(anchor) not in unmodeled, **passes)
