"""Predicted timelines as Chrome trace-event JSON, the format chrome://tracing and ui.perfetto.dev open.

:class:`TraceBuilder` is the small event API every timeline goes through: processes hold tracks,
tracks hold spans (and instants and counters), times in seconds on the run's clock. A report's
schedule becomes one process per device with a track per stream it uses (``compute``,
``memory``, ``communication``: see :mod:`narrowpipe.costmodel.timeline`), one span per launched
kernel with its roofline terms as arguments, the transfer to the next device as its own span on
the communication track, and a ``run`` track holding the whole predicted run. A comparison puts
each target's processes side by side from time zero. A planner that schedules pipeline stages or
overlapped collectives adds its own tracks with the same builder (``add_report`` hands back the
device -> process map).

A pipelined layout runs every kernel once per microbatch. Its kernels' slices are the first
microbatch's pass; each chip then gets one ``microbatches 2-m`` slice from the start of its second
pass to the end of its last (the chip runs a pass every ``every_us``, busy ``pass_us`` of it, the
rest waiting for a slower chip upstream; the arguments say how much of it re-reads the weights),
and a ``fill`` slice on a ``pipeline`` track before its first pass: the latencies paid once (its
kernels' launches, the hop into it). The chips' slices end when the run does. A tensor-parallel
kernel is a slice on every device that runs a shard of it, with one shard's FLOPs and bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import NarrowpipeError
from ..jsonout import dumps as dump_json
from .output_file import reports_of, write_output

if TYPE_CHECKING:
    from ..costmodel.compare import Comparison
    from ..costmodel.report import Report
    from ..costmodel.timeline import ScheduledKernel

__all__ = ["Track", "TraceBuilder", "add_report", "report_trace", "comparison_trace", "write_trace",
           "TRACE_FORMAT", "TRACE_VERSION", "KERNEL_CATEGORY"]

TRACE_FORMAT, TRACE_VERSION = "narrowpipe.trace", 1
#: Every kernel span's ``cat`` starts with this (then its bound): one such span per launched kernel.
KERNEL_CATEGORY = "kernel"
_US = 1e6   # trace-event times are microseconds


@dataclass(frozen=True)
class Track:
    """A thread of a process in trace-event terms: one horizontal lane in the viewer."""

    pid: int
    tid: int


@dataclass
class TraceBuilder:
    """Collects trace events; ``to_dict`` is the JSON object format (``traceEvents`` plus metadata)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    _next_pid: int = 1
    _tracks: dict[tuple[int, str], Track] = field(default_factory=dict)

    def process(self, name: str, *, sort_index: int | None = None) -> int:
        """A new process (a device, a host) named ``name``; returns its pid."""
        pid = self._next_pid
        self._next_pid += 1
        self.events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
        self.events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                            "args": {"sort_index": pid if sort_index is None else sort_index}})
        return pid

    def track(self, pid: int, name: str, *, sort_index: int | None = None) -> Track:
        """The track ``name`` of process ``pid``, created on first use."""
        key = (pid, name)
        if key not in self._tracks:
            tid = 1 + sum(1 for p, _ in self._tracks if p == pid)
            self._tracks[key] = Track(pid, tid)
            self.events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
            self.events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                                "args": {"sort_index": tid if sort_index is None else sort_index}})
        return self._tracks[key]

    def span(self, track: Track, name: str, start_s: float, dur_s: float, *, cat: str = "",
             args: dict[str, Any] | None = None) -> None:
        """A complete event (``ph: X``) from ``start_s`` lasting ``dur_s`` seconds."""
        if dur_s < 0:
            raise ValueError(f"span {name!r} has a negative duration ({dur_s} s)")
        self.events.append({"ph": "X", "name": name, "cat": cat, "pid": track.pid, "tid": track.tid,
                            "ts": start_s * _US, "dur": dur_s * _US, "args": args or {}})

    def instant(self, track: Track, name: str, at_s: float, *, cat: str = "",
                args: dict[str, Any] | None = None) -> None:
        self.events.append({"ph": "i", "s": "t", "name": name, "cat": cat, "pid": track.pid, "tid": track.tid,
                            "ts": at_s * _US, "args": args or {}})

    def counter(self, pid: int, name: str, at_s: float, values: dict[str, float]) -> None:
        """A counter sample (``ph: C``): the viewer draws each key of ``values`` as a step line."""
        self.events.append({"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": at_s * _US, "args": dict(values)})

    def to_dict(self) -> dict[str, Any]:
        return {"traceEvents": list(self.events), "displayTimeUnit": "ns",
                "otherData": {"format": TRACE_FORMAT, "version": TRACE_VERSION, **self.metadata}}

    def write(self, path: str | Path) -> Path:
        return write_output(path, dump_json(self.to_dict(), what="trace"), "trace")


def add_report(builder: TraceBuilder, report: Report, *, sort_base: int = 0) -> dict[int, int]:
    """Add ``report``'s predicted schedule; returns device index -> pid. Needs a timed report."""
    timing = report.timing
    if timing is None:
        raise NarrowpipeError("a trace needs a timed report: give a target (--target h100)")
    target = timing.target
    run_pid = builder.process(f"{target}: run", sort_index=sort_base)
    how = f", {timing.devices} devices" if timing.devices > 1 else ""
    builder.span(builder.track(run_pid, "run"), f"{report.graph} on {target}{how}", 0.0, timing.time_s, cat="run",
                 args={"time_s": timing.time_s, "mfu": timing.mfu, "bound_mix": timing.bound_mix,
                       "narrowest": timing.narrowest, "dims": dict(report.dims), "notes": list(timing.notes)})
    pids: dict[int, int] = {}
    for k in report.timeline:
        for shard, device in enumerate(range(k.device, k.device + k.shards)):
            if device not in pids:
                pids[device] = builder.process(f"{target}: device {device}", sort_index=sort_base + 1 + device)
            _first_pass(builder, pids[device], k, shard)
    _later_passes(builder, report.timeline, pids)
    return pids


def _first_pass(builder: TraceBuilder, pid: int, k: ScheduledKernel, shard: int = 0) -> None:
    """The kernel's slice (its first pass, for a pipelined one) and the transfer that ends it. A
    sharded kernel's first shard carries the full arguments, the others what differs (their trace
    would otherwise repeat them once per device)."""
    args: dict[str, Any] = {"flops": k.device_flops, "bytes": k.device_bytes, "bound": k.bound}
    if shard == 0:
        args.update(op=k.op, kind=k.kind, scope=k.scope, nodes=k.nodes, unit=k.unit, utilization=k.utilization,
                    comm_bytes=k.comm_bytes, compute_us=k.compute_s * _US, memory_us=k.memory_s * _US,
                    comm_us=k.comm_s * _US, overhead_us=k.overhead_s * _US)
    if k.shards > 1:
        args.update(shard=shard, shards=k.shards,
                    note=f"one of {k.shards} shards, one per device, run at once: FLOPs and bytes are one shard's")
    if k.passes > 1:
        args.update(passes=k.passes, pass_us=k.pass_s * _US, every_us=k.every_s * _US, busy_us=k.time_s * _US,
                    weight_rereads_us=k.reread_s * _US,
                    note=f"microbatch 1 of {k.passes}; flops, bytes and the roofline terms are the whole "
                         f"batch's, busy_us all {k.passes} passes")
    if not k.modeled:
        args["note"] = "no cost rule: not timed"
    cat = f"{KERNEL_CATEGORY},{k.bound if k.modeled else 'unmodeled'}"
    kernel_s = k.pass_s - k.pass_transfer_s
    builder.span(builder.track(pid, k.stream), k.name, k.start_s, kernel_s, cat=cat, args=args)
    if k.pass_transfer_s > 0:
        name = f"{k.name} -> next device" if k.shards == 1 else f"{k.name}: exchange between its {k.shards} shards"
        builder.span(builder.track(pid, "communication"), name, k.start_s + kernel_s, k.pass_transfer_s,
                     cat="transfer", args={"after": k.name, "transfer_us": k.pass_transfer_s * _US})


def _later_passes(builder: TraceBuilder, timeline: list[ScheduledKernel], pids: dict[int, int]) -> None:
    """A pipelined layout's chips: the fill before each one's first pass, and its passes 2..m."""
    if not any(k.passes > 1 or k.pass_s < k.time_s for k in timeline):   # none repeats or pays a latency once
        return
    chips: dict[int, list[ScheduledKernel]] = {}
    for k in timeline:
        chips.setdefault(k.device, []).append(k)
    first_pass_end = 0.0                            # of the chip before, in pipeline order
    for device, mine in sorted(chips.items(), key=lambda kv: kv[1][0].start_s):
        start = mine[0].start_s
        overheads = sum(k.overhead_s for k in mine)
        if start > first_pass_end:
            builder.span(builder.track(pids[device], "pipeline"), "fill", first_pass_end, start - first_pass_end,
                         cat="fill", args={"launch_overheads_us": overheads * _US,
                                           "hop_latency_us": max(start - first_pass_end - overheads, 0.0) * _US,
                                           "note": "latencies paid once, as the first microbatch reaches the chip"})
        pass_s = sum(k.pass_s for k in mine)
        first_pass_end = start + pass_s
        m, every = mine[0].passes, mine[0].every_s
        if m < 2:
            continue
        span = (m - 2) * every + pass_s
        builder.span(builder.track(pids[device], "compute"), f"microbatches 2-{m}", start + every, span,
                     cat="passes", args={"passes": m - 1, "pass_us": pass_s * _US, "every_us": every * _US,
                                         "busy_us": (m - 1) * pass_s * _US, "idle_us": (span - (m - 1) * pass_s) * _US,
                                         "weight_rereads_us": sum(k.reread_s for k in mine) * _US,
                                         "note": "each pass re-reads the chip's weights and does 1/m of the work"})


def report_trace(report: Report) -> TraceBuilder:
    """The trace of one timed report."""
    builder = TraceBuilder(metadata={"graph": report.graph, "dims": dict(report.dims), "targets": [report.target]})
    add_report(builder, report)
    return builder


def comparison_trace(comparison: Comparison) -> TraceBuilder:
    """Every target's schedule side by side, each from time zero, in the order compared."""
    builder = TraceBuilder(metadata={"graph": comparison.graph, "dims": dict(comparison.dims),
                                     "targets": [r.target for r in comparison.reports]})
    base = 0
    for report in comparison.reports:
        pids = add_report(builder, report, sort_base=base)
        base += 1 + max(pids, default=0) + 1
    return builder


def write_trace(path: str | Path, result: Report | Comparison) -> Path:
    """Write the trace of a timed report or a comparison to ``path``."""
    from ..costmodel.report import Report
    reports_of(result, "write_trace")
    builder = report_trace(result) if isinstance(result, Report) else comparison_trace(result)
    return builder.write(path)
