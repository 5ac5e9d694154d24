"""Diagnose a measured run: which pipe was narrowest, judged from a ``torch.profiler`` trace.

Each op recorded with shapes is lowered to a one-op IR graph (:mod:`.diagnose_aten`) and costed by
the same rules as every graph (:mod:`.rules`), so its FLOPs and bytes are exact; its measured time
(the op's duration on a CPU trace, the sum of the kernels it launched on a GPU trace) turns them into
achieved FLOP/s and bandwidth, compared with the target's datasheet peaks:

* ``compute utilization`` = (FLOPs at the peak rate for the dtype: matrix units for matmul, conv and
  attention, vector units otherwise, plus transcendentals) / measured time;
* ``memory utilization`` = (compulsory bytes / peak memory bandwidth) / measured time; compulsory
  bytes are a lower bound on real traffic, so this is too.

Per op (rows are grouped by op name and recorded shapes), the bound is:

* ``interconnect`` for communication (NCCL kernels, ``c10d::``, ``record_param_comms``);
* ``overhead`` if both utilizations are below :data:`OVERHEAD_UTILIZATION` (5%): the time goes to
  launch, dispatch or latency, not to moving or computing data;
* else ``compute`` if the op needs more time at peak FLOP/s than at peak bandwidth, else ``memory``.

The run gets one label, :data:`RUN_LABELS`:

1. ``interconnect``: communication busy time >= compute busy time (time with at least one
   communication kernel running against time with at least one other kernel running);
2. otherwise the largest of three buckets: *launch* = idle gaps (no kernel, or on a CPU trace no op,
   running) + overhead-bound ops + host copies + wrapper ops' own time; *memory* = memory-bound ops;
   *compute* = compute-bound ops. Unmodeled ops are listed with their time and count for no bucket.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from ..backends import Target, get_target
from ..ir import DType, Op, OpGroup
from .diagnose_aten import PASS_THROUGH, Call, collective_graph, collective_kind, lower_call
from .diagnose_trace import MEMCPY, Event, Trace, intersection_length, load_trace, parse_dtype, union_length
from .execution.common import (COMPUTE, INTERCONNECT, MEMORY, OVERHEAD, TimingOptions, matrix_rate,
                               transcendental_rate, vector_rate)
from .interpreter import interpret
from .kernels import fuse
from .targeted import time_program

__all__ = ["diagnose", "Diagnosis", "OpStat", "UnmodeledStat", "OVERHEAD_UTILIZATION", "RUN_LABELS",
           "DIAGNOSIS_FORMAT"]

DIAGNOSIS_FORMAT, DIAGNOSIS_VERSION = "narrowpipe.diagnosis", 1
#: Below this fraction of both peak FLOP/s and peak bandwidth, an op is bound by overhead.
OVERHEAD_UTILIZATION = 0.05
#: An overhead-bound op whose calls last longer than this many launch overheads is latency-bound, not launch-bound.
LONG_CALL_LAUNCHES = 20
#: A compute-bound matmul below this fraction of peak gets shape and precision advice.
LOW_COMPUTE_UTILIZATION = 0.5
RUN_LABELS = {"launch": "input/CPU-launch bound", "memory": "memory-bound", "compute": "compute-bound",
              "interconnect": "interconnect-bound"}
HOST_COPY, UNMODELED = "host-copy", "unmodeled"
_HEAVY = frozenset({Op.DOT, Op.CONV, Op.ATTENTION, Op.ATTENTION_BACKWARD})


@dataclass(frozen=True)
class OpStat:
    """One op name at one recorded shape, all its calls together: work, time, rates, bound, advice."""

    name: str
    op: str                     # canonical op(s), e.g. "dot+add"
    group: str
    shapes: str
    calls: int
    time_s: float
    share: float                # of all op/kernel time
    flops: int
    transcendentals: int
    bytes: int
    comm_bytes: int
    achieved_flops_per_s: float
    achieved_bytes_per_s: float
    compute_utilization: float
    memory_utilization: float
    link_utilization: float | None
    predicted_s: float | None   # the target's execution model, all calls
    bound: str
    advice: tuple[str, ...]
    kernel: str = ""            # the longest GPU kernel it launched

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["advice"] = list(self.advice)
        return d


@dataclass(frozen=True)
class UnmodeledStat:
    """Time the diagnosis cannot cost: an op without a lowering, or a kernel no op launched."""

    name: str
    calls: int
    time_s: float
    share: float


@dataclass
class Diagnosis:
    trace: str
    target: str
    mode: str                                # "gpu" (kernel times) or "cpu" (op times)
    label: str                               # a key of RUN_LABELS
    reasons: list[str]
    window_s: float
    busy_s: float
    idle_s: float
    compute_s: float
    comm_s: float
    overlap_s: float
    op_time_s: float
    time_by_bound: dict[str, float]
    flops: int
    matmul_flops: int
    bytes: int
    mfu: float
    peak_flops: float
    dtype: str
    bandwidth_utilization: float
    ops: list[OpStat]
    unmodeled: list[UnmodeledStat]
    advice: list[str]
    notes: list[str] = field(default_factory=list)

    @property
    def label_text(self) -> str:
        return RUN_LABELS[self.label]

    @property
    def idle_fraction(self) -> float:
        return self.idle_s / self.window_s if self.window_s else 0.0

    def top(self, n: int = 10) -> list[OpStat]:
        return self.ops[:n]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(format=DIAGNOSIS_FORMAT, version=DIAGNOSIS_VERSION, label_text=self.label_text,
                 idle_fraction=self.idle_fraction, ops=[o.to_dict() for o in self.ops],
                 thresholds={"overhead_utilization": OVERHEAD_UTILIZATION, "long_call_launches": LONG_CALL_LAUNCHES,
                             "low_compute_utilization": LOW_COMPUTE_UTILIZATION})
        return d

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


# -- costing one recorded call ----------------------------------------------------------------

@dataclass(frozen=True)
class _Costed:
    op: str
    group: str
    dtype: str
    flops: int
    matmul_flops: int
    transcendentals: int
    bytes: int
    comm_bytes: int
    compute_s: float      # at the datasheet peak
    memory_s: float       # at the datasheet bandwidth
    link_s: float | None  # at the link bandwidth (collectives)
    predicted_s: float


class _Coster:
    """Costs recorded calls through the IR and the rules, once per distinct signature."""

    def __init__(self, target: Target, options: TimingOptions, default_dtype: DType) -> None:
        self.target, self.options, self.default_dtype = target, options, default_dtype
        self.cache: dict[str, _Costed | None] = {}

    def op(self, ev: Event) -> _Costed | None:
        key = ev.signature()
        if key not in self.cache:
            graph = lower_call(Call(ev.name, ev.inputs(), ev.concrete(), self.default_dtype))
            self.cache[key] = self._cost(graph) if graph is not None else None
        return self.cache[key]

    def comm(self, name: str, info: dict[str, Any]) -> _Costed | None:
        _, op = collective_kind(f"{info.get('Collective name', '')} {name}")
        nin, nout = info.get("In msg nelems"), info.get("Out msg nelems")
        if op is None or not isinstance(nin, (int, float)):
            return None
        dtype = parse_dtype(str(info.get("dtype", ""))) or self.default_dtype
        group = int(info.get("Group size") or 1)
        graph = collective_graph(name, op, int(nin), int(nout if isinstance(nout, (int, float)) else nin), dtype, group)
        return self._cost(graph, group)

    def _cost(self, graph: Any, group: int = 1) -> _Costed | None:
        table = interpret(graph, {})
        if table.unmodeled:
            return None
        t, opts = self.target, self.options
        kernels = fuse(table, "full")
        flops = mm = trans = comm = 0
        compute_s = 0.0
        heavy = max(table.costs, key=lambda n: (n.op in _HEAVY, table.costs[n].flops))
        for node, cost in table.costs.items():
            flops, trans, comm = flops + cost.flops, trans + cost.transcendentals, comm + cost.comm_bytes
            if node.group is OpGroup.COLLECTIVE:
                continue
            x = node.inputs[0] if node.inputs else None
            dtype = x.type.dtype if x is not None else node.outputs[0].type.dtype
            if node.op in _HEAVY:
                mm += cost.flops
                compute_s += cost.flops / matrix_rate(t, dtype, opts).flops_per_s
            elif cost.flops:
                compute_s += cost.flops / vector_rate(t, dtype if dtype.is_float else DType.FP32).flops_per_s
            compute_s += cost.transcendentals / transcendental_rate(t) if cost.transcendentals else 0.0
        nbytes = sum(k.cost.bytes for k in kernels if not k.is_free)
        link_s = None
        if comm:
            bw = (t.scale_up_bandwidth if group <= t.scale_up_domain else t.scale_out_bandwidth) or t.scale_up_bandwidth
            link_s = comm / bw if bw else None
        _, predicted, _ = time_program(kernels, table, t, self.options)
        x = heavy.inputs[0] if heavy.inputs and heavy.inputs[0] is not None else heavy.outputs[0]
        return _Costed("+".join(dict.fromkeys(n.op.value for n in table.costs)), heavy.group.value,
                       x.type.dtype.value, flops, mm, trans, nbytes, comm, compute_s,
                       nbytes / t.memory_bandwidth, link_s, predicted)


# -- units: what each piece of measured time is charged to ------------------------------------

@dataclass
class _Unit:
    kind: str                       # "op", UNMODELED, "comm", HOST_COPY, "wrapper"
    name: str
    key: str
    costed: _Costed | None = None
    calls: int = 1
    time_us: float = 0.0
    intervals: list[tuple[float, float]] = field(default_factory=list)
    kernels: dict[str, float] = field(default_factory=dict)
    shapes: str = ""
    nbytes: float = 0.0             # host copies: bytes the trace records

    def charge(self, ev: Event) -> None:
        self.time_us += ev.dur
        self.intervals.append((ev.ts, ev.end))
        self.kernels[ev.name] = self.kernels.get(ev.name, 0.0) + ev.dur


def _shapes(ev: Event) -> str:
    parts = []
    for x in ev.inputs():
        if isinstance(x, list):
            parts.append(f"[{len(x)} tensors]")
        elif x is not None:
            parts.append(f"{x.dtype.value if x.dtype else '?'}{list(x.shape)}")
    return ", ".join(parts)


def _does_work(c: _Costed | None) -> bool:
    """Costed and not a view or allocation: worth looking inside an unmapped op for."""
    return c is not None and (c.flops > 0 or c.bytes > 0)


def _comm_info(ev: Event | None) -> dict[str, Any]:
    """Collective sizes recorded by ``record_param_comms`` on the op, its ancestors or its descendants."""
    chain: list[Event] = []
    e = ev
    while e is not None:
        chain.append(e)
        e = e.parent
    for e in (*chain, *(ev.descendants() if ev is not None else ())):
        if "In msg nelems" in e.args:
            return e.args
    return {}


class _Charger:
    """Walks the CPU op forest once, deciding which op owns each piece of measured time."""

    def __init__(self, trace: Trace, coster: _Coster) -> None:
        self.trace, self.coster = trace, coster
        self.units: dict[str, _Unit] = {}
        self.owner: dict[int, _Unit] = {}
        self._modelable: dict[int, bool] = {}

    def unit(self, kind: str, name: str, key: str, costed: _Costed | None = None, shapes: str = "") -> _Unit:
        k = f"{kind}|{key}"
        u = self.units.get(k)
        if u is None:
            u = self.units[k] = _Unit(kind, name, key, costed, 0, shapes=shapes)
        return u

    def has_model(self, ev: Event) -> bool:
        """Whether some op below ``ev`` does costed work (then ``ev`` is only a wrapper)."""
        if id(ev) not in self._modelable:
            self._modelable[id(ev)] = any(collective_kind(c.name)[0] or _does_work(self.coster.op(c))
                                          or self.has_model(c) for c in ev.children)
        return self._modelable[id(ev)]

    def walk(self, ev: Event) -> None:
        base = ev.name.split("::", 1)[-1]
        if collective_kind(ev.name)[0]:
            u = self.unit("comm", ev.name, ev.name)
            if not self.trace.gpu:
                info = _comm_info(ev)
                u.costed = u.costed or self.coster.comm(ev.name, info)
        elif base in PASS_THROUGH and ev.children or (self.coster.op(ev) is None and self.has_model(ev)):
            u = self.unit("wrapper", ev.name, ev.name)
            self.owner[id(ev)] = u
            if not self.trace.gpu:
                u.time_us += max(ev.dur - sum(c.dur for c in ev.children), 0.0)
            for c in ev.children:
                self.walk(c)
            return
        elif (costed := self.coster.op(ev)) is not None:
            u = self.unit("op", ev.name, ev.signature(), costed, _shapes(ev))
        else:
            u = self.unit(UNMODELED, ev.name, ev.name)
        u.calls += 1
        self.owner[id(ev)] = u
        for d in ev.descendants():
            self.owner[id(d)] = u
        if not self.trace.gpu:
            u.charge(ev)

    def charge_device(self) -> None:
        for k in self.trace.device:
            launcher = self.trace.launcher(k)
            if k.cat == MEMCPY and ("HtoD" in k.name or "DtoH" in k.name or "Host" in k.name):
                u = self.unit(HOST_COPY, k.name, k.name)
                u.calls += 1
                u.nbytes += float(k.args.get("bytes", 0) or 0)
                u.charge(k)
                continue
            if collective_kind(k.name)[0]:
                info = k.args if "In msg nelems" in k.args else _comm_info(launcher)
                key = f"{k.name}|{info.get('In msg nelems', '')}|{info.get('Group size', '')}"
                u = self.unit("comm", k.name, key)
                u.costed = u.costed or self.coster.comm(k.name, info)
                u.calls += 1
                u.charge(k)
                continue
            owner = None
            ev = launcher
            while ev is not None and owner is None:
                owner = self.owner.get(id(ev))
                ev = ev.parent
            if owner is None:
                owner = self.unit(UNMODELED, k.name, k.name)
                owner.calls += 1
            elif owner.kind == "wrapper":
                owner = self.unit(UNMODELED, f"{owner.name} (own kernels)", owner.name)
                owner.calls += 1
            owner.charge(k)


# -- the diagnosis ------------------------------------------------------------------------------

def diagnose(trace_path: str | os.PathLike[str], target: Target | str, *, allow_tf32: bool = False) -> Diagnosis:
    """Read a ``torch.profiler`` Chrome trace recorded with ``record_shapes=True`` and judge it on
    ``target`` (a catalog name, alias, TOML path or Target). ``allow_tf32`` rates fp32 matmuls at
    the TF32 tensor-core peak (torch's default is off for matmuls)."""
    trace = load_trace(trace_path)
    tgt = get_target(target)
    options = TimingOptions(allow_tf32, False, "full")
    coster = _Coster(tgt, options, _dominant_float(trace))
    charger = _Charger(trace, coster)
    for root in trace.roots:
        charger.walk(root)
    if trace.gpu:
        charger.charge_device()
    return _summarize(trace, tgt, options, charger)


def _dominant_float(trace: Trace) -> DType:
    counts: dict[DType, int] = {}
    for i, ev in enumerate(trace.cpu_ops()):
        if i > 20000:
            break
        for x in ev.inputs():
            if x is not None and not isinstance(x, list) and x.dtype is not None and x.dtype.is_float:
                counts[x.dtype] = counts.get(x.dtype, 0) + 1
    return max(counts, key=counts.get) if counts else DType.FP32  # type: ignore[arg-type]


def _op_bound(compute_s: float, memory_s: float, time_s: float) -> tuple[str, float, float]:
    uc = compute_s / time_s if time_s > 0 else 0.0
    um = memory_s / time_s if time_s > 0 else 0.0
    if max(uc, um) < OVERHEAD_UTILIZATION:
        return OVERHEAD, uc, um
    return (COMPUTE if compute_s >= memory_s else MEMORY), uc, um


def _stat(u: _Unit, target: Target, op_time_s: float, gpu: bool) -> OpStat:
    t = u.time_us * 1e-6
    c, n = u.costed, u.calls
    kernel = max(u.kernels, key=u.kernels.get) if u.kernels else ""  # type: ignore[arg-type]
    if u.kind == HOST_COPY:
        bw = target.host_bandwidth
        return OpStat(u.name, "copy", "data_movement", "", n, t, t / op_time_s, 0, 0, int(u.nbytes), 0, 0.0,
                      u.nbytes / t if t else 0.0, 0.0, 0.0, (u.nbytes / bw / t) if bw and t else None, None,
                      HOST_COPY, _advice(HOST_COPY, "", "", 0.0), kernel)
    if c is None:   # communication whose sizes the trace does not record
        return OpStat(u.name, "collective", "collective", "", n, t, t / op_time_s, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0,
                      None, None, INTERCONNECT, _advice(INTERCONNECT, "collective", "", 0.0), kernel)
    if u.kind == "comm":
        bound, uc, um = INTERCONNECT, 0.0, 0.0
    else:
        bound, uc, um = _op_bound(c.compute_s * n, c.memory_s * n, t)
    link = c.link_s * n / t if c.link_s is not None and t else None
    return OpStat(u.name, c.op, c.group, u.shapes, n, t, t / op_time_s if op_time_s else 0.0, c.flops * n,
                  c.transcendentals * n, c.bytes * n, c.comm_bytes * n, c.flops * n / t if t else 0.0,
                  c.bytes * n / t if t else 0.0, uc, um, link, c.predicted_s * n, bound,
                  _advice(bound, c.group, c.dtype, uc, c.bytes == 0 and c.flops == 0, gpu,
                          t / n > LONG_CALL_LAUNCHES * target.launch_overhead), kernel)


@dataclass(frozen=True)
class _Timeline:
    """Wall-clock facts of the trace window (seconds): what ran when, overlaps and gaps."""

    window_s: float
    busy_s: float
    idle_s: float
    compute_s: float
    comm_s: float
    overlap_s: float


def _timeline(trace: Trace, units: list[_Unit]) -> _Timeline:
    start, end = trace.window
    window = (end - start) * 1e-6
    busy = union_length((e.ts, e.end) for e in (trace.device if trace.gpu else trace.roots)) * 1e-6
    comm_iv = [iv for u in units if u.kind == "comm" for iv in u.intervals]
    work_iv = [iv for u in units if u.kind in ("op", UNMODELED) for iv in u.intervals]
    return _Timeline(window, busy, max(window - busy, 0.0), union_length(work_iv) * 1e-6,
                     union_length(comm_iv) * 1e-6, intersection_length(work_iv, comm_iv) * 1e-6)


def _label(tl: _Timeline, by_bound: dict[str, float], gpu: bool) -> tuple[str, list[str]]:
    """The run's label by the rules in the module docstring, with the numbers that decided it."""
    ms = lambda x: f"{x * 1e3:.3g} ms"  # noqa: E731
    buckets = {"launch": tl.idle_s + by_bound[OVERHEAD] + by_bound[HOST_COPY] + by_bound["dispatch"],
               "memory": by_bound[MEMORY], "compute": by_bound[COMPUTE]}
    where = "device" if gpu else "host (no op running)"
    reasons = [f"window {ms(tl.window_s)}; {where} idle {ms(tl.idle_s)} ({_pct(tl.idle_s, tl.window_s)})",
               "time by bound: " + ", ".join(f"{k} {ms(v)}" for k, v in by_bound.items() if v > 0)]
    if tl.comm_s > 0 and tl.comm_s >= tl.compute_s:
        reasons.insert(0, f"communication busy {ms(tl.comm_s)} >= compute busy {ms(tl.compute_s)} "
                          f"({_pct(tl.overlap_s, tl.comm_s)} of it overlapped)")
        return "interconnect", reasons
    label = max(buckets, key=buckets.get)  # type: ignore[arg-type]
    comm = f"; communication {ms(tl.comm_s)} < compute {ms(tl.compute_s)}" if tl.comm_s else ""
    reasons.insert(0, f"largest bucket: {label} {ms(buckets[label])} of "
                      + ", ".join(f"{k} {ms(v)}" for k, v in buckets.items()) + comm)
    return label, reasons


def _summarize(trace: Trace, target: Target, options: TimingOptions, ch: _Charger) -> Diagnosis:
    units = [u for u in ch.units.values() if u.kind != "wrapper" and u.time_us > 0]
    op_time_s = sum(u.time_us for u in units) * 1e-6 or 1e-12
    tl = _timeline(trace, units)
    ops = sorted((_stat(u, target, op_time_s, trace.gpu) for u in units if u.kind != UNMODELED),
                 key=lambda o: -o.time_s)
    unmodeled = sorted((UnmodeledStat(u.name, u.calls, u.time_us * 1e-6, u.time_us * 1e-6 / op_time_s)
                        for u in units if u.kind == UNMODELED), key=lambda s: -s.time_s)
    by_bound = {b: 0.0 for b in (COMPUTE, MEMORY, OVERHEAD, INTERCONNECT, HOST_COPY)}
    for o in ops:
        by_bound[o.bound] += o.time_s
    by_bound.update(idle=tl.idle_s, unmodeled=sum(s.time_s for s in unmodeled),
                    dispatch=sum(u.time_us for u in ch.units.values() if u.kind == "wrapper") * 1e-6)

    mm_by_dtype: dict[str, int] = {}
    for u in units:
        if u.costed is not None and u.costed.matmul_flops:
            mm_by_dtype[u.costed.dtype] = mm_by_dtype.get(u.costed.dtype, 0) + u.costed.matmul_flops * u.calls
    matmul_flops = sum(mm_by_dtype.values())
    top_dtype = max(mm_by_dtype, key=mm_by_dtype.get) if mm_by_dtype else None  # type: ignore[arg-type]
    dtype = DType.parse(top_dtype) if top_dtype else ch.coster.default_dtype
    peak = matrix_rate(target, dtype, options).flops_per_s
    nbytes = sum(o.bytes for o in ops if o.bound != HOST_COPY)
    mfu = matmul_flops / (tl.window_s * peak) if tl.window_s else 0.0
    bw_util = nbytes / (tl.window_s * target.memory_bandwidth) if tl.window_s else 0.0

    label, reasons = _label(tl, by_bound, trace.gpu)
    reasons.append(f"MFU {mfu:.1%} ({dtype.value} peak {peak / 1e12:.4g} TFLOP/s); memory bandwidth used "
                   f"{bw_util:.1%} of {target.memory_bandwidth / 1e9:.4g} GB/s")
    notes = ["bytes are compulsory traffic (inputs read once, outputs written once): memory utilization is a "
             "lower bound"]
    if by_bound["unmodeled"]:
        notes.append(f"{len(unmodeled)} unmodeled op(s)/kernel(s) take {_pct(by_bound['unmodeled'], op_time_s)} of "
                     "op time and count toward no bucket")
    if not trace.gpu:
        notes.append("CPU trace: op durations on the host are the measured times")
    long_overhead = sum(o.time_s for o in ops if o.bound == OVERHEAD and o.calls and o.flops + o.bytes > 0
                        and o.time_s / o.calls > LONG_CALL_LAUNCHES * target.launch_overhead)
    if long_overhead > 0.5 * op_time_s:
        notes.append(f"{_pct(long_overhead, op_time_s)} of op time is in long calls reaching < "
                     f"{OVERHEAD_UTILIZATION:.0%} of {target.name}'s peaks: was the trace recorded on {target.name}? "
                     "(for a CPU host, describe the host as a target TOML)")
    if dtype is DType.FP32 and not options.allow_tf32 and "tf32" in target.matrix_flops:
        notes.append("fp32 matmuls are rated without TF32; pass allow_tf32=True (--tf32) if TF32 was on")
    return Diagnosis(trace.path, target.name, "gpu" if trace.gpu else "cpu", label, reasons, tl.window_s,
                     tl.busy_s, tl.idle_s, tl.compute_s, tl.comm_s, tl.overlap_s, op_time_s, by_bound,
                     sum(o.flops for o in ops), matmul_flops, nbytes, mfu, peak, dtype.value, bw_util, ops,
                     unmodeled, _run_advice(label, trace.gpu, tl.idle_s / tl.window_s if tl.window_s else 0.0,
                                            mfu, ops), notes)


def _pct(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def _advice(bound: str, group: str, dtype: str, uc: float, free: bool = False, gpu: bool = True,
            long_calls: bool = False) -> tuple[str, ...]:
    """What would move an op, in the words engineers use."""
    heavy = group in ("contraction", "convolution", "attention")
    if bound == INTERCONNECT:
        return ("overlap it with compute (DDP bucketing, FSDP prefetch)", "bucket small collectives into fewer, "
                "larger ones", "send bf16 instead of fp32; keep the group inside the NVLink domain or use a "
                "faster link")
    if bound == HOST_COPY:
        return ("pin host memory and copy with non_blocking=True", "prefetch the next batch on a side stream "
                "(DataLoader pin_memory, more workers)", "device-to-host copies are syncs: avoid .item()/.cpu() "
                "in the loop")
    if bound == OVERHEAD:
        if free:
            return ("views and allocations cost only dispatch: drop needless reshapes/copies",)
        if long_calls:
            return ("long calls far below both peaks: latency-bound (too little parallel work, serial loops, "
                    "scattered access) or a trace from another machine than the target",
                    "give it more parallel work (bigger batch) or a better kernel (torch.compile)")
        if not gpu:
            return ("per-op dispatch dominates: give each op more work (bigger batch/tensors)",
                    "fewer small ops: fuse them (torch.compile)")
        return ("tiny kernels: CUDA graphs or torch.compile(mode='reduce-overhead')", "fuse small ops "
                "(torch.compile) and give each launch more work (bigger batch)")
    if bound == MEMORY:
        if group == "contraction":
            return ("memory-bound matmul (few rows per weight read): batch more rows (larger batch, batched "
                    "decode)", "quantize the weights (int8/fp8/int4) to cut bytes")
        if group == "attention":
            return ("use a fused attention kernel (SDPA flash/efficient backends)", "keep the KV cache in bf16/fp8")
        return (f"memory-bound {group}: fuse it with its neighbours (torch.compile)",
                "lower precision (bf16) halves its bytes" if dtype in ("fp32", "fp64") else
                "avoid materializing intermediates (views instead of copies)")
    if heavy and uc < LOW_COMPUTE_UTILIZATION:
        tips = [f"compute-bound at {uc:.0%} of peak: pad/align M, N, K to multiples of 8 (16-bit) or 16 (fp8), "
                "ideally 64/128", "larger matmuls fill the chip better (batch more)"]
        if dtype == "fp32":
            tips.insert(1, "fp32 matmul: use bf16 autocast or TF32 (torch.backends.cuda.matmul.allow_tf32)")
        return tuple(tips)
    if heavy:
        return ("near the compute roof: fp8 or 2:4 sparsity, fewer FLOPs, or a faster chip",)
    return (f"compute-bound {group} (vector/transcendental units): fuse it into the matmul epilogue or use a "
            "cheaper approximation",)


def _run_advice(label: str, gpu: bool, idle: float, mfu: float, ops: list[OpStat]) -> list[str]:
    out: list[str] = []
    if label == "interconnect":
        out += ["overlap communication with compute (DDP bucket_cap_mb, FSDP prefetch, async tensor parallel)",
                "fewer, larger collectives; bf16 gradients; keep tensor parallel inside the NVLink domain"]
    elif label == "launch":
        if gpu:
            out.append(f"the GPU is idle {idle:.0%} of the window: CUDA graphs / torch.compile(mode="
                       "'reduce-overhead'), a bigger batch, DataLoader(num_workers>0, pin_memory=True), no host "
                       "syncs (.item(), .cpu()) in the loop")
        else:
            out.append(f"no op runs {idle:.0%} of the window: the time is Python, dispatch or the input "
                       "pipeline; batch more work per op, move loading to DataLoader workers, torch.compile")
    elif label == "memory":
        out.append("fuse elementwise chains (torch.compile), use bf16 activations and fp8/int8 weights, batch "
                   "weight-bound matmuls")
    else:
        out.append(f"MFU {mfu:.0%}: bf16/TF32/fp8 matmuls with dims aligned to 64/128; beyond the roof only fewer "
                   "FLOPs or a faster chip help")
    for o in ops[:3]:
        out.append(f"{o.name} ({o.bound}, {o.share:.0%} of op time): {o.advice[0]}")
    return out
