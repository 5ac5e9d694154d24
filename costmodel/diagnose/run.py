"""Diagnose a measured run: which pipe was narrowest, judged from a ``torch.profiler`` trace.

Each op recorded with shapes is lowered to a one-op IR graph (:mod:`narrowpipe.frontends.trace.lower`) and costed by
the same rules as every graph (:mod:`.rules`), so its FLOPs and bytes are exact; its measured time
(the op's duration on a CPU trace, the sum of the kernels it launched on a GPU trace) turns them into
achieved FLOP/s and bandwidth, compared with the target's datasheet peaks. Utilizations are judged on
an op's typical call (one call's work over its median call time, :func:`_typical_call_s`): one
preempted call is time in the run, not evidence of what bounds the op.

* ``compute utilization`` = (FLOPs at the peak rate for the dtype: matrix units for matmul, conv and
  attention, vector units otherwise, plus transcendentals) / measured time;
* ``memory utilization`` = (compulsory bytes / peak memory bandwidth) / measured time; compulsory
  bytes are a lower bound on real traffic, so this is too;
* ``memory reach utilization``: the same bytes at the bandwidth the target reaches for each kernel's
  transfer size (the execution model's :func:`~..execution.common.memory_time` at its family's
  bandwidth: the calibrated curve, the catalog efficiency, a CPU's cache-resident tier) over the
  measured time. The bound is judged on it: a host calibrated in cache reaches a twentieth of its
  best add bandwidth on a DRAM-sized stream.

Per op (rows are grouped by op name and recorded shapes), the bound is:

* ``interconnect`` for communication (NCCL kernels, ``c10d::``, ``record_param_comms``);
* if compute and memory reach utilization are both below :data:`OVERHEAD_UTILIZATION` (5%):
  ``latency`` for an op doing work in calls longer than :data:`LONG_CALL_LAUNCHES` launch overheads
  (its own kernel is slow: serial loops, scattered access), else ``overhead`` (the time goes to
  launch or dispatch);
* else ``compute`` if the op needs more time at peak FLOP/s than at the bandwidth it can reach,
  else ``memory``.

The run gets one label, :data:`RUN_LABELS`:

1. ``interconnect``: communication busy time >= compute busy time (time with at least one
   communication kernel running against time with at least one other kernel running);
2. otherwise the largest of four buckets: *launch* = idle gaps (no kernel, or on a CPU trace no op,
   running) + overhead-bound ops + host copies + wrapper ops' own time; *latency* = latency-bound
   ops; *memory* = memory-bound ops; *compute* = compute-bound ops. Unmodeled ops are listed with
   their time and count for no bucket;
3. ``unmodeled`` where the unmodeled ops' time exceeds every bucket: what bounds most of the run is
   unknown, which no bucket's label may hide (a trace that is 98% ``aten::_linalg_svd`` read as
   latency-bound from its other 0.6 ms).

This module runs the steps and sums up; each step has its own module: reading the trace
(:mod:`narrowpipe.frontends.trace.read`), costing one call (:mod:`.cost`), charging measured time to ops
(:mod:`.charge`), thresholds, labels and advice (:mod:`.labels`) and the result
types (:mod:`.report`).
"""

from __future__ import annotations

import os
import statistics
import warnings
from pathlib import Path

from ...backends import Target, get_target
from ...errors import NarrowpipeWarning, TraceError
from ...frontends.trace.read import Trace, intersection_length, load_trace, union_length
from ...frontends.trace.read import read_trace_json as read_json
from ...ir import DType
from ..execution.common import COMPUTE, INTERCONNECT, MEMORY, OVERHEAD, TimingOptions, conv_options, matrix_rate
from .charge import UNMODELED, Charger, Unit
from .cost import Costed, Coster
from .labels import (
    HOST_COPY,
    LATENCY,
    LONG_CALL_LAUNCHES,
    LOW_COMPUTE_UTILIZATION,
    OVERHEAD_UTILIZATION,
    RUN_LABELS,
    TOO_FAST,
    Machine,
    Timeline,
    op_advice,
    op_bound,
    pct,
    run_advice,
    run_label,
    share_of_peak,
    slow_dtypes,
)
from .report import DIAGNOSIS_FORMAT, DIAGNOSIS_VERSION, Diagnosis, OpStat, UnmodeledStat

__all__ = ["diagnose", "Diagnosis", "OpStat", "UnmodeledStat", "OVERHEAD_UTILIZATION", "RUN_LABELS",
           "DIAGNOSIS_FORMAT", "DIAGNOSIS_VERSION", "LONG_CALL_LAUNCHES", "LOW_COMPUTE_UTILIZATION", "HOST_COPY",
           "LATENCY", "UNMODELED"]


def diagnose(trace_path: str | os.PathLike[str], target: Target | str, *, allow_tf32: bool = False,
             fp32_conv: str = "default") -> Diagnosis:
    """Read a ``torch.profiler`` Chrome trace recorded with ``record_shapes=True`` and judge it on
    ``target`` (a catalog name, alias, TOML path or Target). ``allow_tf32`` rates fp32 matmuls at
    the TF32 tensor-core peak (torch's default is off for matmuls); ``fp32_conv`` is the fp32
    convolutions' precision ("default": the library's, TF32 under cuDNN on Ampere and later as torch
    leaves ``torch.backends.cudnn.allow_tf32``; "highest" if the run turned it off)."""
    trace = _load(trace_path)
    tgt = get_target(target)
    mismatch = _warn_mismatch(trace, tgt, allow_tf32)
    options = TimingOptions(allow_tf32, False, "full", fp32_conv=fp32_conv)
    coster = Coster(tgt, options, _dominant_float(trace), trace.path)
    charger = Charger(trace, coster)
    for root in trace.roots:
        charger.walk(root)
    if trace.gpu:
        charger.charge_device()
    d = _summarize(trace, tgt, options, charger)
    d.machine_mismatch = mismatch
    return d


def _load(trace_path: str | os.PathLike[str]) -> Trace:
    """The trace; a file it refuses that is narrowpipe's own predicted trace (``--trace``, format
    ``narrowpipe.trace``) is named so: it holds the model's prediction, not a measured run."""
    try:
        return load_trace(trace_path)
    except TraceError:
        try:
            data = read_json(Path(trace_path))
        except TraceError:
            data = None
        other = data.get("otherData") if isinstance(data, dict) else None
        if isinstance(other, dict) and other.get("format") == "narrowpipe.trace":
            raise TraceError(trace_path, "is narrowpipe's own predicted trace (--trace output: the model's timeline, "
                                         "not a measured run); diagnose reads a torch.profiler trace of the run, "
                                         "recorded with record_shapes=True") from None
        raise


def _warn_mismatch(trace: Trace, target: Target, allow_tf32: bool) -> str:
    """Warn where the question asked cannot mean what it says: ``--tf32`` on a target with no TF32
    rate (a CPU), or a trace judged on a target of another family (a GPU's kernel times against a
    TPU's or CPU's peaks; a CPU's op times against a GPU's). Returns the family mismatch in words
    ("" where there is none), which the diagnosis carries beside its label."""
    if allow_tf32 and "tf32" not in target.matrix_flops:
        warnings.warn(f"--tf32 does nothing on {target.name} ({target.family}): it has no TF32 rate, so fp32 "
                      "matmuls are rated at fp32", NarrowpipeWarning, stacklevel=3)
    names = _gpu_names(trace)
    mismatch = ""
    if trace.gpu and target.family != "gpu":
        device = f"on {names[0]}" if names else "on a GPU (it records device kernels)"
        mismatch = (f"the trace was recorded {device} but is judged on {target.name}, a {target.family} target: "
                    "its kernel times are held against another family's peaks; judge it on the GPU it ran on")
    elif _launch_times_only(trace):
        warnings.warn(f"the run used {names[0] if names else 'a CUDA GPU'} but the trace records no kernel events "
                      "(profiled with CPU activity only): op durations are the host's launch times, not the GPU's "
                      "times; profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]",
                      NarrowpipeWarning, stacklevel=3)
    elif not trace.gpu and target.family != "cpu":
        mismatch = (f"the trace was recorded on a CPU (no device kernels) but is judged on {target.name}, a "
                    f"{target.family} target: its host op times are held against another family's peaks, so the "
                    f"label and MFU say nothing about a run on {target.name}; judge it on the host it ran on "
                    "(narrowpipe calibrate --out host.toml)")
    if mismatch:
        warnings.warn(mismatch, NarrowpipeWarning, stacklevel=3)
    return mismatch


def _gpu_names(trace: Trace) -> list[str]:
    """The GPUs the trace's ``deviceProperties`` lists (torch writes them when CUDA was initialized)."""
    return [str(d.get("name")) for d in trace.meta.get("device_properties", []) if isinstance(d, dict)
            and d.get("name")]


def _launch_times_only(trace: Trace) -> bool:
    """A CUDA run profiled with CPU activity only: a GPU listed (or CUDA runtime calls recorded) but no
    kernel events, so each op's duration is its launch on the host, not its work on the GPU."""
    return not trace.gpu and bool(_gpu_names(trace) or trace.runtime)


def _machine(trace: Trace, target: Target) -> Machine:
    rates = target.matrix_flops
    simd = getattr(target, "simd_width_bits", None)
    if getattr(target, "amx_ops_per_cycle", 0):
        simd = 512      # AMX tiles take 64-byte rows
    return Machine(trace.gpu, target.family, "tf32" in rates, rates.get("bf16", 0.0) > rates.get("fp32", 0.0),
                   any(k.startswith("fp8") for k in rates), simd if target.family == "cpu" else None,
                   target.family == "cpu" and getattr(target, "vendor", "") == "host", slow_dtypes(rates))


def _dominant_float(trace: Trace) -> DType:
    """The float type most tensor inputs have: what a call whose own types are missing defaults to.
    A 0-dim input is not counted: the profiler records a Python scalar (``t + 1.0``, and the
    ``aten::to`` that wraps it) as a 0-dim double tensor, and 200 such adds on fp32[8] read "fp64"."""
    counts: dict[DType, int] = {}
    for i, ev in enumerate(trace.cpu_ops()):
        if i > 20000:
            break
        for x in ev.inputs():
            if x is not None and not isinstance(x, list) and x.dtype is not None and x.dtype.is_float and x.shape:
                counts[x.dtype] = counts.get(x.dtype, 0) + 1
    return max(counts, key=counts.get) if counts else DType.FP32  # type: ignore[arg-type]


def _typical_call_s(u: Unit) -> float:
    """A call's typical time: the median of the unit's charged intervals (one per call on the host,
    one per kernel on a GPU) times the intervals per call. The mean let one preempted call flip an op
    of twenty 3 us additions from overhead- to latency-bound (a 1 ms stall is 50 us on average)."""
    if not u.intervals or not u.calls:
        return u.time_us * 1e-6 / max(u.calls, 1)
    return statistics.median(end - start for start, end in u.intervals) * 1e-6 * len(u.intervals) / u.calls


def _stat(u: Unit, target: Target, op_time_s: float, machine: Machine) -> OpStat:
    t = u.time_us * 1e-6
    c, n = u.costed, u.calls
    kernel = max(u.kernels, key=u.kernels.get) if u.kernels else ""  # type: ignore[arg-type]
    if u.kind == HOST_COPY:
        bw = target.host_bandwidth
        return OpStat(u.name, "copy", "data_movement", "", n, t, t / op_time_s, 0, 0, int(u.nbytes), 0, 0.0,
                      u.nbytes / t if t else 0.0, 0.0, 0.0, (u.nbytes / bw / t) if bw and t else None, None,
                      HOST_COPY, op_advice(HOST_COPY, "", "", 0.0), kernel)
    if c is None:   # communication whose sizes the trace does not record
        return OpStat(u.name, "collective", "collective", "", n, t, t / op_time_s, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0,
                      None, None, INTERCONNECT, op_advice(INTERCONNECT, "collective", "", 0.0), kernel)
    free = c.bytes == 0 and c.flops == 0
    # utilizations are the typical call's (one call's work over its median time): a preempted call
    # is time in the run (share, achieved rates) but says nothing about what bounds the op
    typical = _typical_call_s(u)
    if u.kind == "comm":
        bound, uc, reach = INTERCONNECT, 0.0, 0.0
    else:
        bound, uc, reach = op_bound(c.compute_s, c.reach_memory_s, typical,
                                    typical > LONG_CALL_LAUNCHES * target.launch_overhead, free)
    um = c.memory_s / typical if typical and u.kind != "comm" else 0.0
    link = c.link_s * n / t if c.link_s is not None and t else None
    return OpStat(u.name, c.op, c.group, u.shapes, n, t, t / op_time_s if op_time_s else 0.0, c.flops * n,
                  c.transcendentals * n, c.bytes * n, c.comm_bytes * n, c.flops * n / t if t else 0.0,
                  c.bytes * n / t if t else 0.0, uc, um, link, c.predicted_s * n, bound,
                  op_advice(bound, c.group, c.dtype, uc, free, machine, c.gemm, _memory_note(c, reach, um, target)),
                  kernel, reach)


def _memory_note(c: Costed, reach: float, um: float, target: Target) -> str:
    """How the op's bandwidth compares with what the target reaches at its transfer size, where that
    is well below the peak (a DRAM stream on a host calibrated in cache): the words that explain a
    memory bound whose share of the peak is small."""
    if not c.reach_memory_s or c.reach_memory_s <= c.memory_s * 1.25 or reach > TOO_FAST:
        return ""   # near the peak anyway, or faster than the target allows (a note says so)
    reachable = c.bytes / c.reach_memory_s
    size = next(f"{c.bytes / k:.3g} {unit}" for k, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1, "B"))
                if c.bytes >= k or k == 1)
    return (f"{reach:.0%} of the {reachable / 1e9:.3g} GB/s {target.name} reaches at {size} per call ({um:.1%} of "
            f"its {target.memory_bandwidth / 1e9:.4g} GB/s peak)")


def _timeline(trace: Trace, units: list[Unit]) -> Timeline:
    start, end = trace.window
    window = (end - start) * 1e-6
    busy = union_length((e.ts, e.end) for e in (trace.device if trace.gpu else trace.roots)) * 1e-6
    comm_iv = [iv for u in units if u.kind == "comm" for iv in u.intervals]
    work_iv = [iv for u in units if u.kind in ("op", UNMODELED) for iv in u.intervals]
    return Timeline(window, busy, max(window - busy, 0.0), union_length(work_iv) * 1e-6,
                    union_length(comm_iv) * 1e-6, intersection_length(work_iv, comm_iv) * 1e-6)


def _summarize(trace: Trace, target: Target, options: TimingOptions, ch: Charger) -> Diagnosis:
    units = [u for u in ch.units.values() if u.kind != "wrapper" and u.time_us > 0]
    op_time_s = sum(u.time_us for u in units) * 1e-6 or 1e-12
    tl = _timeline(trace, units)
    machine = _machine(trace, target)
    ops = sorted((_stat(u, target, op_time_s, machine) for u in units if u.kind != UNMODELED),
                 key=lambda o: -o.time_s)
    unmodeled = sorted((UnmodeledStat(u.name, u.calls, u.time_us * 1e-6, u.time_us * 1e-6 / op_time_s)
                        for u in units if u.kind == UNMODELED), key=lambda s: -s.time_s)
    by_bound = {b: 0.0 for b in (COMPUTE, MEMORY, OVERHEAD, LATENCY, INTERCONNECT, HOST_COPY)}
    for o in ops:
        by_bound[o.bound] += o.time_s
    by_bound.update(idle=tl.idle_s, unmodeled=sum(s.time_s for s in unmodeled),
                    dispatch=sum(u.time_us for u in ch.units.values() if u.kind == "wrapper") * 1e-6)

    # MFU's peak: the rate of the dtype, and the kind (a convolution's fp32 precision can differ from
    # a matmul's), of the contractions with the most FLOPs
    mm_by_dtype: dict[tuple[str, bool], int] = {}
    for u in units:
        if u.costed is not None and u.costed.matmul_flops:
            key = (u.costed.dtype, "conv" in u.costed.op.split("+"))
            mm_by_dtype[key] = mm_by_dtype.get(key, 0) + u.costed.matmul_flops * u.calls
    matmul_flops = sum(mm_by_dtype.values())
    top = max(mm_by_dtype, key=mm_by_dtype.get) if mm_by_dtype else None  # type: ignore[arg-type]
    dtype = DType.parse(top[0]) if top else ch.coster.default_dtype
    rate = matrix_rate(target, dtype, conv_options(options, target) if top and top[1] else options)
    peak = rate.flops_per_s
    peak_label = rate.runs_as or rate.dtype   # the rate used: never a dtype the target has no rate for
    nbytes = sum(o.bytes for o in ops if o.bound != HOST_COPY)
    mfu = matmul_flops / (tl.window_s * peak) if tl.window_s else 0.0
    bw_util = nbytes / (tl.window_s * target.memory_bandwidth) if tl.window_s else 0.0

    label, reasons = run_label(tl, by_bound, trace.gpu)
    reach_s = sum(u.costed.reach_memory_s * u.calls for u in units if u.kind == "op" and u.costed is not None)
    reach = f" ({share_of_peak(reach_s / tl.window_s)} of what it reaches at these ops' transfer sizes)" \
        if tl.window_s and reach_s > max(1.25 * bw_util * tl.window_s, 1e-3 * tl.window_s) else ""
    reasons.append(f"MFU {share_of_peak(mfu)} ({peak_label} peak {peak / 1e12:.4g} TFLOP/s); memory bandwidth used "
                   f"{share_of_peak(bw_util)} of {target.memory_bandwidth / 1e9:.4g} GB/s{reach}")
    notes = ["bytes are compulsory traffic (inputs read once, outputs written once): memory utilization is a "
             "lower bound"]
    if by_bound["unmodeled"]:
        notes.append(f"{len(unmodeled)} unmodeled op(s)/kernel(s) take {pct(by_bound['unmodeled'], op_time_s)} of "
                     "op time and count toward no bucket")
    if _launch_times_only(trace):
        notes.append("CUDA run without kernel events: op durations are host launch times, not GPU times")
    elif not trace.gpu:
        notes.append("CPU trace: op durations on the host are the measured times")
    notes += _other_machine(ops, target)
    too_fast = [o for o in ops if max(o.compute_utilization or 0.0, o.memory_utilization or 0.0,
                                      o.link_utilization or 0.0) > TOO_FAST]
    if too_fast:
        names = ", ".join(dict.fromkeys(o.name for o in too_fast[:5]))
        notes.append(f"{len(too_fast)} op(s) ran faster than {target.name}'s peaks allow ({names}): the trace was "
                     f"not recorded on {target.name}, or their FLOPs/bytes are miscounted; their utilization "
                     "shows as >100%")
    if matmul_flops and dtype is DType.FP32 and not options.allow_tf32 and "tf32" in target.matrix_flops:
        notes.append("fp32 matmuls are rated without TF32; pass allow_tf32=True (--tf32) if TF32 was on")
    return Diagnosis(trace.path, target.name, "gpu" if trace.gpu else "cpu", label, reasons, tl.window_s,
                     tl.busy_s, tl.idle_s, tl.compute_s, tl.comm_s, tl.overlap_s, op_time_s, by_bound,
                     sum(o.flops for o in ops), matmul_flops, nbytes, mfu, peak, peak_label, bw_util, ops,
                     unmodeled, run_advice(label, machine, tl, by_bound, mfu, ops, unmodeled), notes)


#: Matmul-like ops this many times slower than the target's model predicts suggest the trace was
#: recorded on another machine: on the machine a target describes they land within about 2x (0.97x
#: to 2.3x over twenty CPU traces QA recorded on the host it calibrated, 1.06x for a synthetic H100
#: trace), while the same CPU traces judged on a 128-core catalog EPYC read 28x to 198x.
SLOWER_THAN_MODEL = 4.0


def _other_machine(ops: list[OpStat], target: Target) -> list[str]:
    """A note asking whether the trace was recorded on ``target``, only on evidence: the ops the model
    times best (matmuls, convolutions, attention, in calls long enough that launch overhead is not
    their time) ran far slower than it predicts. Slow calls alone are no evidence: a sort or a CPU
    max-pool is far below the peaks on the very machine a target was calibrated on."""
    floor = LONG_CALL_LAUNCHES * target.launch_overhead
    heavy = [o for o in ops if o.group in ("contraction", "convolution", "attention") and o.flops > 0
             and o.predicted_s and o.time_s / o.calls > floor]
    measured, predicted = sum(o.time_s for o in heavy), sum(o.predicted_s or 0.0 for o in heavy)
    if not predicted or measured < SLOWER_THAN_MODEL * predicted:
        return []
    cpu = target.family == "cpu"
    shared = (" or was its CPU shared with other processes while it ran (a preempted op's duration counts the "
              "time it waited for the core: profile on a quiet machine, and compare the run's wall time with "
              "its CPU time)?") if cpu else "?"
    hint = " (for a CPU host, calibrate it: narrowpipe calibrate --out host.toml)" if cpu and \
        getattr(target, "vendor", "") != "host" else ""
    return [f"matmul-like ops ran {measured / predicted:.3g}x slower than {target.name}'s model predicts "
            f"({measured * 1e3:.3g} ms measured, {predicted * 1e3:.3g} ms predicted): was the trace recorded on "
            f"{target.name}{shared}{hint}"]

