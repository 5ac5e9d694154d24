"""Charging measured time: which op owns each piece of it (CPU op durations, GPU kernels, copies,
collectives), grouped into units of one op name at one recorded signature.

A ``torch.compile`` region (``Torch-Compiled Region: 0/0``, ``## Call CompiledFxGraph ...``) is work
whose ops the trace does not record (Inductor's fused C++ or Triton kernels): its time outside
recorded children, and the kernels it launched, are one unmodeled row, :data:`COMPILED_REGION`,
whether or not eager ops sit inside or beside it (as a read-through wrapper its time read as dispatch
and called a compiled matmul launch-bound).

An op with no lowering that wraps costed ops is read through: a wrapper's own time (a pass-through
op such as ``reshape``, or a non-aten frame: autograd's engine, a ``record_function`` range) is
dispatch, while an aten op's own time is work done outside its costed children, unmodeled
(``aten::foo (own time)``; booking it as dispatch would call a step with unmapped heavy ops
launch-bound). An autograd frame with no work below it (``evaluate_function: ViewBackward0`` over
``aten::reshape``, or ``AddBackward0`` over nothing) is dispatch too: the engine's bookkeeping for a
view, not work of unknown size. A kernel is charged to the nearest op above its launcher that owns
time; what has no owner is unmodeled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ...frontends.trace.collectives import collective_kind
from ...frontends.trace.lower import PASS_THROUGH
from ...frontends.trace.read import MEMCPY, Event, Trace
from .cost import Costed, Coster
from .labels import HOST_COPY

__all__ = ["Unit", "Charger", "UNMODELED", "COMPILED_REGION", "is_compiled_region"]

#: The kind of a unit whose work is unknown: an op without a lowering, or a kernel no op launched.
UNMODELED = "unmodeled"
#: The unmodeled row holding compiled regions' own time and the kernels they launched.
COMPILED_REGION = "torch.compile region"

#: Frames of code torch.compile generated: Dynamo's region and the call into Inductor's compiled graph.
_COMPILED_FRAME = re.compile(r"Torch-Compiled Region(: \d+/\d+)?|(## )?Call CompiledFxGraph\b.*|CompiledFxGraph\b.*")


def is_compiled_region(name: str) -> bool:
    """Whether ``name`` is a frame of compiled code: work the trace records no ops for."""
    return _COMPILED_FRAME.fullmatch(name.strip()) is not None


@dataclass
class Unit:
    """One op name at one signature (or one kernel, copy or collective): every call's measured time
    together, so a row in the report is a unit."""

    kind: str                       # "op", UNMODELED, "comm", HOST_COPY, "wrapper"
    name: str
    key: str
    costed: Costed | None = None
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


def _does_work(c: Costed | None) -> bool:
    """Costed and not a view or allocation: worth looking inside an unmapped op for."""
    return c is not None and (c.flops > 0 or c.bytes > 0)


#: Frames of the autograd engine, not ops: ``autograd::engine::evaluate_function: MmBackward0``, the
#: node it runs (``MmBackward0``, ``torch::autograd::AccumulateGrad``).
_AUTOGRAD_FRAME = re.compile(r"autograd::engine::.*|torch::autograd::.*|\w+Backward\d*")


def is_autograd_frame(name: str) -> bool:
    """Whether ``name`` is the autograd engine's frame rather than an op of any library."""
    return _AUTOGRAD_FRAME.fullmatch(name) is not None


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


class Charger:
    """Walks the CPU op forest once, deciding which op owns each piece of measured time."""

    def __init__(self, trace: Trace, coster: Coster) -> None:
        self.trace, self.coster = trace, coster
        self.units: dict[str, Unit] = {}
        self.owner: dict[int, Unit] = {}
        self._modelable: dict[int, bool] = {}

    def unit(self, kind: str, name: str, key: str, costed: Costed | None = None, shapes: str = "") -> Unit:
        k = f"{kind}|{key}"
        u = self.units.get(k)
        if u is None:
            u = self.units[k] = Unit(kind, name, key, costed, 0, shapes=shapes)
        return u

    def has_model(self, ev: Event) -> bool:
        """Whether some op below ``ev`` does costed work (then ``ev`` is only a wrapper)."""
        if id(ev) not in self._modelable:
            self._modelable[id(ev)] = any(collective_kind(c.name)[0] or _does_work(self.coster.op(c))
                                          or self.has_model(c) for c in ev.children)
        return self._modelable[id(ev)]

    def is_free(self, ev: Event) -> bool:
        """Whether ``ev`` does no work as :meth:`walk` charges it: a view or allocation (whatever it
        records below itself, as its time is its own), or an autograd frame or read-through wrapper
        over such ops or over nothing. An op without a lowering is not free: its work is unknown."""
        if is_autograd_frame(ev.name) or ev.name.split("::", 1)[-1] in PASS_THROUGH and ev.children:
            return all(self.is_free(c) for c in ev.children)
        return self.coster.op(ev) is not None and not _does_work(self.coster.op(ev))

    def walk(self, ev: Event) -> None:
        base = ev.name.split("::", 1)[-1]
        if is_compiled_region(ev.name):
            self._compiled(ev)
            return
        if collective_kind(ev.name)[0]:
            u = self.unit("comm", ev.name, ev.name)
            if not self.trace.gpu:
                info = _comm_info(ev)
                u.costed = u.costed or self.coster.comm(ev.name, info)
        elif (base in PASS_THROUGH and ev.children or (self.coster.op(ev) is None and self.has_model(ev))
              or (is_autograd_frame(ev.name) and self.is_free(ev))):
            u = self.unit("wrapper", ev.name, ev.name)
            self.owner[id(ev)] = u
            if not self.trace.gpu:
                own = max(ev.dur - sum(c.dur for c in ev.children), 0.0)
                if ev.name.startswith("aten::") and base not in PASS_THROUGH:
                    work = self.unit(UNMODELED, f"{ev.name} (own time)", f"{ev.name} (own time)")
                    work.calls += 1
                    work.time_us += own
                    work.intervals.append((ev.ts, ev.end))
                else:
                    u.time_us += own
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

    def _compiled(self, ev: Event) -> None:
        """A compiled region: its own time (on the host) and its unowned kernels are unmodeled work;
        the ops it records inside are charged as ever."""
        u = self.unit(UNMODELED, COMPILED_REGION, COMPILED_REGION)
        self.owner[id(ev)] = u
        u.calls += 1
        if not self.trace.gpu:
            u.time_us += max(ev.dur - sum(c.dur for c in ev.children), 0.0)
            u.intervals.append((ev.ts, ev.end))
        for c in ev.children:
            self.walk(c)

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
