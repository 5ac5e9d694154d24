"""Reading a ``torch.profiler`` Chrome trace: events, their nesting, and GPU kernels linked to ops.

A trace is what ``prof.export_chrome_trace(path)`` writes (Kineto's JSON, optionally gzipped):
complete events (``ph == "X"``) with microsecond ``ts``/``dur``. CPU ops (``cat == "cpu_op"``)
nest per thread (``aten::linear`` holds ``aten::t`` and ``aten::addmm``); with
``record_shapes=True`` their ``args`` carry ``Input Dims``, ``Input type`` and ``Concrete Inputs``.
GPU work (``kernel``, ``gpu_memcpy``, ``gpu_memset``) runs on device streams and names the CPU op
that launched it by ``External id`` (and the ``cudaLaunchKernel`` call by ``correlation``).

This module only parses and links; what the numbers mean is :mod:`.diagnose`'s business. Older
Kineto spellings (``Operator``, ``Kernel``, ``Runtime``, ``Memcpy``) are read as the new ones.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import TraceError
from ...ir import DType

__all__ = ["TraceError", "Event", "Trace", "TensorArg", "load_trace", "read_trace_json", "merge", "union_length",
           "intersection_length", "parse_dtype", "CPU_OP", "KERNEL", "MEMCPY", "MEMSET", "RUNTIME"]

CPU_OP, KERNEL, MEMCPY, MEMSET, RUNTIME = "cpu_op", "kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime"
_CATEGORY = {"cpu_op": CPU_OP, "operator": CPU_OP, "kernel": KERNEL, "gpu_memcpy": MEMCPY,
             "memcpy": MEMCPY, "gpu_memset": MEMSET, "memset": MEMSET, "cuda_runtime": RUNTIME,
             "runtime": RUNTIME, "cuda_driver": RUNTIME}
_DEVICE = (KERNEL, MEMCPY, MEMSET)
_EPS_US = 1e-3  # timestamps carry ns decimals; a child may end a rounding error after its parent


@dataclass(frozen=True, slots=True)
class TensorArg:
    """One tensor input of a recorded op; ``dtype`` is None inside a TensorList (not recorded)."""

    shape: tuple[int, ...]
    dtype: DType | None


@dataclass(eq=False)
class Event:
    name: str
    cat: str
    ts: float                      # microseconds
    dur: float                     # microseconds
    pid: Any
    tid: Any
    args: dict[str, Any]
    parent: Event | None = None
    children: list[Event] = field(default_factory=list)

    @property
    def end(self) -> float:
        return self.ts + self.dur

    @property
    def ext_id(self) -> Any:
        return self.args.get("External id")

    @property
    def correlation(self) -> Any:
        return self.args.get("correlation")

    @property
    def has_shapes(self) -> bool:
        return "Input Dims" in self.args

    def inputs(self) -> list[TensorArg | list[TensorArg] | None]:
        """Each positional input: a tensor, a tensor list, or None (a scalar, list of ints, None)."""
        dims = self.args.get("Input Dims") or []
        types = self.args.get("Input type") or []
        out: list[TensorArg | list[TensorArg] | None] = []
        for i, d in enumerate(dims):
            t = str(types[i]) if i < len(types) else ""
            if t == "TensorList" and isinstance(d, list):
                out.append([TensorArg(_shape(x), None) for x in d if isinstance(x, list)])
                continue
            dtype = parse_dtype(t)
            out.append(TensorArg(_shape(d), dtype) if dtype is not None and isinstance(d, list) else None)
        return out

    def concrete(self) -> list[str]:
        return [str(c) for c in self.args.get("Concrete Inputs") or []]

    def signature(self) -> str:
        """Name, shapes, types and concrete values: events with equal signatures cost the same."""
        a = self.args
        return json.dumps([self.name, a.get("Input Dims"), a.get("Input type"), a.get("Concrete Inputs")],
                          separators=(",", ":"))

    def descendants(self) -> Iterable[Event]:
        for c in self.children:
            yield c
            yield from c.descendants()


def _shape(d: Any) -> tuple[int, ...]:
    return tuple(int(x) for x in d if isinstance(x, (int, float)))


_TYPES = {"float": DType.FP32, "double": DType.FP64, "c10::half": DType.FP16, "half": DType.FP16,
          "c10::bfloat16": DType.BF16, "bfloat16": DType.BF16, "long int": DType.INT64, "long": DType.INT64,
          "int64_t": DType.INT64, "int": DType.INT32, "short": DType.INT16, "signed char": DType.INT8,
          "unsigned char": DType.UINT8, "bool": DType.BOOL, "c10::float8_e4m3fn": DType.FP8_E4M3,
          "c10::float8_e4m3fnuz": DType.FP8_E4M3, "c10::float8_e5m2": DType.FP8_E5M2,
          "c10::float8_e5m2fnuz": DType.FP8_E5M2, "c10::complex<float>": DType.COMPLEX64,
          "c10::complex<double>": DType.COMPLEX128, "c10::float4_e2m1fn_x2": DType.FP4,
          "unsigned short": DType.UINT16, "unsigned int": DType.UINT32}
_NOT_TENSORS = frozenset({"", "scalar", "scalarlist", "tensorlist", "genericlist", "none", "device",
                          "string", "str", "layout", "memoryformat", "scalartype"})


def parse_dtype(text: str) -> DType | None:
    """A recorded ``Input type`` (``float``, ``c10::BFloat16``, ``long int``) or a c10 ScalarType
    name (``Float``, ``BFloat16``, as collectives record it); None for non-tensor arguments."""
    key = text.strip().lower()
    if key in _NOT_TENSORS:
        return None
    if key in _TYPES:
        return _TYPES[key]
    try:
        return DType.parse(key.removeprefix("c10::"))
    except ValueError:
        return None


@dataclass
class Trace:
    """The parsed trace: CPU op forests per thread, device activity, and the links between them."""

    path: str
    roots: list[Event]                       # top-level CPU ops, every thread, by start time
    device: list[Event]                      # kernels, memcpys and memsets, by start time
    runtime: list[Event]                     # cudaLaunchKernel and friends
    by_ext_id: dict[Any, Event]              # External id -> the CPU op that carries it
    record_shapes: bool
    window: tuple[float, float]              # first start, last end (microseconds)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def gpu(self) -> bool:
        return bool(self.device)

    def cpu_ops(self) -> Iterable[Event]:
        for r in self.roots:
            yield r
            yield from r.descendants()

    def launcher(self, device_event: Event) -> Event | None:
        """The CPU op that launched a kernel: by External id, else through its runtime call."""
        op = self.by_ext_id.get(device_event.ext_id) if device_event.ext_id is not None else None
        if op is not None:
            return op
        corr = device_event.correlation
        if corr is None:
            return None
        call = self.meta.setdefault("_runtime_by_corr", {e.correlation: e for e in self.runtime}).get(corr)
        return call.parent if call is not None else None


def read_trace_json(path: Path) -> Any:
    """The parsed JSON of a trace file (gzipped or not); a missing, unreadable or non-JSON file is a
    TraceError naming it."""
    if not path.exists():
        raise TraceError(path, "no such file")
    if path.is_dir():
        raise TraceError(path, "is a directory, not a trace file")
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as f:
                text = f.read()
        else:
            text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, EOFError) as e:
        raise TraceError(path, f"cannot be read as text ({e})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceError(path, f"is not JSON ({e.msg} at line {e.lineno} column {e.colno}); expected a "
                               "Chrome trace from torch.profiler's export_chrome_trace") from None


def load_trace(path: str | os.PathLike[str]) -> Trace:
    p = Path(path)
    data = read_trace_json(p)
    if isinstance(data, dict):
        raw = data.get("traceEvents")
    else:
        raw = data if isinstance(data, list) else None
    if not isinstance(raw, list):
        raise TraceError(p, "has no 'traceEvents' list: not a Chrome trace")
    events: list[Event] = []
    for e in raw:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = _CATEGORY.get(str(e.get("cat", "")).lower())
        if cat is None:
            continue
        try:
            ts, dur = float(e["ts"]), float(e.get("dur", 0.0))
        except (KeyError, TypeError, ValueError):
            continue
        name = str(e.get("name", ""))
        if not (math.isfinite(ts) and math.isfinite(dur)):
            raise TraceError(p, f"event {name!r} has a non-finite time (ts {ts}, dur {dur})")
        if dur < 0:   # clamped, its children would come loose from it and be counted twice
            raise TraceError(p, f"event {name!r} at ts {ts:.3f} us has a negative duration ({dur:g} us): the "
                                "profiler never writes one, so the trace was edited or damaged")
        args = e.get("args")
        if not isinstance(args, dict):
            args = {}
        if cat == CPU_OP:
            _check_args(p, name, ts, args)
        events.append(Event(name, cat, ts, dur, e.get("pid"), e.get("tid"), args))
    ops = [e for e in events if e.cat == CPU_OP]
    device = sorted((e for e in events if e.cat in _DEVICE), key=lambda e: e.ts)
    runtime = [e for e in events if e.cat == RUNTIME]
    if not ops and not device:
        raise TraceError(p, "has no CPU op or GPU kernel events (ph 'X', cat 'cpu_op'/'kernel'); "
                            "record it with torch.profiler and export_chrome_trace")
    flag = data.get("record_shapes") if isinstance(data, dict) else None
    if not any(e.has_shapes for e in ops) and not flag:
        # torch writes record_shapes=1 only when it was on; on, a trace with no shaped op is compiled
        # code (Inductor's kernels record no aten ops) and is diagnosed as unmodeled work
        raise TraceError(p, "was recorded without shapes (no op records 'Input Dims' and the trace's "
                            f"record_shapes flag is {'absent' if flag is None else repr(flag)}): profile with "
                            "torch.profiler.profile(..., record_shapes=True)")
    roots = _nest(ops + runtime)
    roots = [r for r in roots if r.cat == CPU_OP]
    by_ext: dict[Any, Event] = {}
    for op in ops:
        if op.ext_id is not None:
            by_ext.setdefault(op.ext_id, op)
    spans = [(e.ts, e.end) for e in (*roots, *device)]
    window = (min(s for s, _ in spans), max(t for _, t in spans))
    if window[1] <= window[0]:
        raise TraceError(p, "has no measured time: every op and kernel lasts 0 us")
    meta = {"device_properties": data.get("deviceProperties", []) if isinstance(data, dict) else []}
    return Trace(str(p), sorted(roots, key=lambda e: e.ts), device, runtime, by_ext, flag is None or bool(flag),
                 window, meta)


def _check_args(path: Path, name: str, ts: float, args: dict[str, Any]) -> None:
    """The recorded shapes and types have the forms the profiler writes: each input's dims a list of
    non-negative integers (a TensorList: a list of such lists, a scalar: an empty list), types and
    concrete values lists; anything else is a damaged trace, said here rather than costed wrong."""
    where = f"op {name!r} at ts {ts:g} us"
    dims = args.get("Input Dims")
    for key in ("Input Dims", "Input type", "Concrete Inputs"):
        if key in args and not isinstance(args[key], list):
            raise TraceError(path, f"{where}: '{key}' is {type(args[key]).__name__}, not a list")
    for i, d in enumerate(dims or []):
        if not isinstance(d, list):
            raise TraceError(path, f"{where}: input {i}'s dims {d!r} are not a list")
        for x in d:
            sizes = x if isinstance(x, list) else [x]
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
                       for v in sizes):
                raise TraceError(path, f"{where}: input {i} has dims {d!r}: sizes are non-negative integers")


def _nest(events: list[Event]) -> list[Event]:
    """Parent/child links by time containment on each thread; returns the roots."""
    threads: dict[tuple[Any, Any], list[Event]] = {}
    for e in events:
        threads.setdefault((e.pid, e.tid), []).append(e)
    roots: list[Event] = []
    for evs in threads.values():
        evs.sort(key=lambda e: (e.ts, -e.dur, e.cat != CPU_OP))
        stack: list[Event] = []
        for e in evs:
            while stack and e.end > stack[-1].end + _EPS_US:   # e does not fit in the open op
                stack.pop()
            if stack and stack[-1].cat == CPU_OP:
                e.parent = stack[-1]
                if e.cat == CPU_OP:
                    stack[-1].children.append(e)
            elif e.cat == CPU_OP:
                roots.append(e)
            if e.cat == CPU_OP:
                stack.append(e)
    return roots


# -- interval arithmetic (microseconds) --------------------------------------------------------

def merge(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    return sum(e - s for s, e in merge(intervals))


def intersection_length(a: Iterable[tuple[float, float]], b: Iterable[tuple[float, float]]) -> float:
    ma, mb = merge(a), merge(b)
    i = j = 0
    total = 0.0
    while i < len(ma) and j < len(mb):
        lo, hi = max(ma[i][0], mb[j][0]), min(ma[i][1], mb[j][1])
        if hi > lo:
            total += hi - lo
        if ma[i][1] < mb[j][1]:
            i += 1
        else:
            j += 1
    return total
