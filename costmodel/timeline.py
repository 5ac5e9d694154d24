"""The predicted timeline: every launched kernel of a schedule with its device, stream and start time.

A :class:`~narrowpipe.costmodel.execution.Schedule` holds per-kernel times in program order and a
placement; people read a schedule as a timeline (a trace viewer, a roofline, a sortable table), and
those renderers must not need the program or the graph. So the timeline is plain data, built once
per timed report and written to its JSON.

Times are device busy times. A one-device schedule's kernels run end to end and add up to its
total. A pipelined layout (dataflow chips as stages, ``m`` microbatches streaming through) scales
its kernel times to their share of the pipelined run; the timeline scales them back to what each
chip is busy for and starts each chip when the first microbatch reaches it, so the chips overlap as
a pipeline does and a kernel's FLOPs over its time is the rate its own chip achieves. A kernel
whose next kernel runs on another device ends with the transfer to it (its communication term: the
hop the dataflow layout adds), kept apart from the kernel's own work.

Streams say what a slot occupies: ``communication`` for collectives and transfers between devices,
``memory`` for kernels that only move data (no FLOPs: copies, gathers, concatenations) and
``compute`` for the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from ..ir import OpGroup

if TYPE_CHECKING:   # report.py reads the result type without pulling in the execution models
    from .execution import Program, Schedule

__all__ = ["ScheduledKernel", "timeline", "STREAMS", "COMPUTE_STREAM", "MEMORY_STREAM", "COMM_STREAM"]

COMPUTE_STREAM, MEMORY_STREAM, COMM_STREAM = "compute", "memory", "communication"
STREAMS = (COMPUTE_STREAM, MEMORY_STREAM, COMM_STREAM)


class ScheduledKernel(NamedTuple):
    """One launched kernel in the predicted run (a named tuple: a 2,000-kernel model on five targets
    builds 10,000 of them, and a frozen dataclass's ``__init__`` costs as much as the timing).

    ``start_s`` and ``time_s`` place it on the run's clock, busy on ``device`` (``time_s`` includes
    ``transfer_s``, the trailing transfer of its output to the device of the next kernel, if any). The
    roofline terms (``compute_s``, ``memory_s``, ``comm_s``, ``overhead_s``) and ``bound`` are the
    execution model's; ``flops`` and ``bytes`` are the kernel's work and external traffic (fused
    intermediates excluded). ``modeled`` is False for a kernel without a cost rule (0 s: not timed).
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

    @property
    def end_s(self) -> float:
        return self.start_s + self.time_s

    @property
    def kernel_s(self) -> float:
        """The kernel's own time, without the trailing transfer."""
        return self.time_s - self.transfer_s

    @property
    def intensity(self) -> float | None:
        """FLOPs per byte of the kernel's external traffic (None when it moves no bytes)."""
        return self.flops / self.bytes if self.bytes else None

    @property
    def achieved_flops_per_s(self) -> float | None:
        """FLOPs over the kernel's own time: the height of its point on a roofline."""
        return self.flops / self.kernel_s if self.kernel_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScheduledKernel:
        return cls(**data)


def _stream(kernel_group: OpGroup, flops: int, comm_bytes: int) -> str:
    if kernel_group is OpGroup.COLLECTIVE or comm_bytes:
        return COMM_STREAM
    return COMPUTE_STREAM if flops else MEMORY_STREAM


def _pipelining(schedule: Schedule) -> tuple[float, int]:
    """(busy time per unit of scheduled time, microbatches). A pipelined layout (the dataflow
    family's) scales its kernels' times to their share of the pipelined run and records the
    unpipelined ``latency_s`` (the sum of its stages) and its ``microbatches``; every other
    schedule's times are the devices' busy times, one batch."""
    latency = schedule.layout.get("latency_s")
    m = int(schedule.layout.get("microbatches", 1) or 1)
    if latency and schedule.total_s > 0:
        return float(latency) / schedule.total_s, m
    return 1.0, 1


def timeline(program: Program, schedule: Schedule) -> list[ScheduledKernel]:
    """Every non-free kernel of ``program`` as ``schedule`` places it, in program order.

    Each device runs its kernels back to back in program order, each for its busy time. Devices
    start one after another: device ``d`` starts when the first of ``m`` microbatches has passed
    the devices before it (their busy time / ``m``), so a pipelined layout's chips overlap and a
    one-device run is its kernels end to end, ending at the schedule's total. A chip of a pipeline
    is drawn busy from its start (its idle gaps between microbatches are not drawn), so no chip
    ends after the run does.

    Views launch nothing and take no time, so they are left out; a kernel without a cost rule stays
    in, with 0 s and ``modeled=False``, so a timeline never hides what it could not time.
    """
    unmodeled = {id(n) for n in program.table.unmodeled}
    placed = [(k, t) for k, t in zip(program.kernels, schedule.times) if not k.is_free]
    scale, microbatches = _pipelining(schedule)
    devices = [schedule.placement.get(k.name, 0) for k, _ in placed]
    next_device: list[int | None] = [None] * len(placed)   # where the next timed kernel runs
    following: int | None = None
    for i in range(len(placed) - 1, -1, -1):
        next_device[i] = following
        if placed[i][1].time_s > 0:
            following = devices[i]
    busy: dict[int, float] = {}
    for d, (_, t) in zip(devices, placed):
        busy[d] = busy.get(d, 0.0) + t.time_s * scale
    clock: dict[int, float] = {}
    start = 0.0
    for d in busy:                      # devices in the order the program first reaches them
        clock[d] = start
        start += busy[d] / microbatches
    out: list[ScheduledKernel] = []
    for i, (k, t) in enumerate(placed):
        device = devices[i]
        moves = t.time_s > 0 and next_device[i] is not None and next_device[i] != device
        time_s = t.time_s * scale
        transfer = min(t.comm_s * scale, time_s) if moves else 0.0
        c = k.cost
        anchor = k.anchor
        out.append(ScheduledKernel(
            name=k.name, kind=k.kind, op=anchor.op.value, group=anchor.group.value, scope=anchor.source.scope,
            nodes=len(k.nodes), device=device, stream=_stream(anchor.group, c.flops, c.comm_bytes),
            start_s=clock[device], time_s=time_s, transfer_s=transfer, compute_s=t.compute_s * scale,
            memory_s=t.memory_s * scale, comm_s=t.comm_s * scale, overhead_s=t.overhead_s * scale, bound=t.bound,
            unit=t.unit, utilization=t.utilization, flops=c.flops, bytes=c.bytes, comm_bytes=c.comm_bytes,
            modeled=id(anchor) not in unmodeled))
        clock[device] += time_s
    return out
