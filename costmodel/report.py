"""Result types: what analysis returns and what renderers, the CLI and JSON consumers read.

A :class:`Report` is plain data (rows of numbers and names), versioned in its JSON form, so that a
report written today can be read by deployment tooling tomorrow without the graph or the model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import NarrowpipeError
from ..jsonout import dumps as dump_json
from ..schema import SchemaMismatch, check
from ..schema.check import added_after, read_version
from .ceilings import Ceilings
from .timeline import ScheduledKernel

__all__ = ["OpRow", "Report", "ReportError", "Unmodeled", "Timing", "Bottleneck", "REPORT_FORMAT",
           "REPORT_VERSION"]

REPORT_FORMAT = "narrowpipe.report"
#: 2: a timed report carries its ``timeline`` (every launched kernel: device, stream, start, terms) and
#: its target's roofline ``ceilings``, so traces, plots and pages can be drawn from the JSON alone.
#: 5: each timeline entry says how it repeats and splits (``passes``, ``every_s``, ``pass_s``,
#: ``pass_transfer_s``, ``reread_s``: a pipelined layout's microbatches; ``shards``: tensor parallel).
REPORT_VERSION = 7
#: The required fields each version added (path -> first version that wrote it; the schema's history):
#: an older file may lack them, and only them. 6: ``executed_flops`` per timeline entry; 7: ``timing.hfu``.
_ADDED = {"timeline": 2, "ceilings": 2, **{f"timeline/*/{k}": 5 for k in ("passes", "every_s", "pass_s",
                                                                          "pass_transfer_s", "reread_s", "shards")},
          "timeline/*/executed_flops": 6, "timing/hfu": 7}


class ReportError(NarrowpipeError, ValueError):
    """A report's JSON that cannot be read back: not a report, a newer version, a field missing.
    Also a ValueError, which ``Report.from_dict`` raised before, so callers catching that still do."""


class Unmodeled(NamedTuple):
    """An op (by its source name) that has no cost rule, and how many nodes use it."""

    op: str
    count: int  # type: ignore[assignment]  # shadows tuple.count on purpose (python/mypy#4507)


@dataclass(frozen=True)
class OpRow:
    """One node of the program with its cost (and, on a target, its time and bottleneck)."""

    name: str
    op: str
    group: str
    flops: int
    bytes: int
    transcendentals: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    comm_bytes: int = 0
    source_op: str = ""
    scope: str = ""
    shape: str = ""
    dtype: str = ""
    modeled: bool = True
    # Filled by a target's execution model:
    time_s: float | None = None
    bound: str | None = None
    utilization: float | None = None
    unit: str | None = None
    kernel: str | None = None       # the fused kernel this node runs in (its anchor's name)
    phase: str | None = None        # of a training step: forward, recompute, backward or optimizer

    @classmethod
    def from_fields(cls, shared: Mapping[str, Any], **own: Any) -> OpRow:
        """A row from ``shared`` (every field, as one dict for many rows) updated with ``own``.

        Why not ``OpRow(**fields)``: a frozen dataclass's ``__init__`` sets each of its 19 fields
        through ``object.__setattr__``, three times the cost of filling the instance dict, and a
        100,000-node report builds 100,000 rows. ``shared`` must hold every field
        (:func:`row_defaults` gives the defaults)."""
        row = object.__new__(cls)
        d = row.__dict__
        d.update(shared)
        d.update(own)
        return row

    @property
    def intensity(self) -> float:
        """FLOPs per byte of compulsory traffic."""
        return self.flops / self.bytes if self.bytes else (float("inf") if self.flops else 0.0)

    def to_dict(self) -> dict[str, Any]:
        """Every field (all plain values, so no ``asdict``: its recursive deep copy was a quarter of
        a 25-target ``compare --json`` of Llama-3-8B) and the intensity, ``None`` ones left out."""
        d = self.__dict__
        out = {k: d[k] for k in _ROW_FIELDS if d[k] is not None or k in ("time_s", "bound")}
        if self.bytes:
            out["intensity"] = self.flops / self.bytes
        return out



_ROW_FIELDS = tuple(f.name for f in fields(OpRow))


def row_defaults() -> dict[str, Any]:
    """Every field of :class:`OpRow` with its default (``None`` where it has none)."""
    return {f.name: None if f.default is MISSING else f.default for f in fields(OpRow)}


@dataclass(frozen=True)
class Bottleneck:
    """Where the time goes: one kernel, or the same kernel in every repeated layer
    (``model.layers.*.mlp.down_proj`` x 32), with why it is slow and its share of the run.

    ``kernel`` is the heaviest instance; ``time_s`` and ``share`` add up all ``count`` instances;
    ``bound`` is the bound of most of that time; ``scope`` is the module path with layer indices
    replaced by ``*``.
    """

    kernel: str
    op: str
    bound: str
    time_s: float
    share: float
    scope: str = ""
    count: int = 1

    @property
    def label(self) -> str:
        where = self.scope or self.kernel
        return f"{where} x{self.count}" if self.count > 1 else where


@dataclass
class Timing:
    """What a target's execution model predicts for the whole run, with the definitions used.

    * ``time_s``: predicted wall time of one forward pass at the bound dims (kernels run in order;
      on dataflow chips, the pipelined run over ``devices`` chips).
    * ``mfu``: model FLOPs (contraction + convolution + attention; of a training step, all but its
      recompute phase, as PaLM defines MFU) / (time x peak matrix FLOP/s of the model's dominant
      dtype x devices).
    * ``hfu``: the hardware-FLOPs utilization, the same with every matmul-like FLOP executed (a
      recompute phase's included); equal to ``mfu`` without recomputation; None in a report read
      from a version before 7.
    * ``bound_mix``: fraction of the time spent in kernels bound by each resource.
    * ``speedup_if_doubled``: how much faster the run gets if that resource alone doubles
      (compute: all FLOP/s; memory: bandwidth; interconnect: link bandwidth; overhead: launch
      overhead halved). The narrowest pipe has the largest value.
    * ``memory_required``: weights + peak activations; ``fits`` compares it with the capacity of
      ``devices`` devices (for dataflow chips, their fast memory).
    * ``energy_j``: each kernel's time x its power by utilization (idle + compute and memory terms,
      capped at TDP; costmodel/power.py) over ``devices``; ``cost_usd``: time x price per device-hour x devices.
    * ``price_basis``: what kind of price that is: the target's basis (``backends.vocab.PRICE_BASES``;
      the catalog's is hyperscaler on-demand), ``"given"`` when the caller set the price, ``"unstated"``
      when a spec file's price names none, ``""`` when there is no price. Costs on different bases do
      not rank fairly, so the verdict says when they differ.
    * ``items``: tokens (batch x seq) for sequence models, else samples (batch).
    """

    target: str
    family: str
    time_s: float
    mfu: float
    peak_flops: float
    dtype: str
    bound_mix: dict[str, float]
    speedup_if_doubled: dict[str, float]
    top: list[Bottleneck]
    devices: int
    memory_required: float
    memory_capacity: float
    fits: bool
    devices_needed: int
    items: int
    item_unit: str
    throughput: float
    energy_j: float | None
    cost_usd: float | None
    price_per_hour: float | None
    fusion: str
    kernels: int
    notes: list[str] = field(default_factory=list)
    plan: dict[str, Any] = field(default_factory=dict)
    #: What the dominant contraction runs as on this chip: the model's dtype when the chip has its
    #: rate, else the fallback ("fp32 as 6x bf16", "fp4 as fp8"), so a comparison shows who ran what.
    precision: str = ""
    price_basis: str = ""
    hfu: float | None = None

    @property
    def items_per_joule(self) -> float | None:
        return self.items / self.energy_j if self.energy_j else None

    @property
    def cost_per_million_items(self) -> float | None:
        return self.cost_usd / self.items * 1e6 if self.cost_usd is not None and self.items else None

    @property
    def narrowest(self) -> str:
        """The resource whose doubling helps most."""
        speedups = self.speedup_if_doubled
        return max(speedups, key=lambda resource: speedups[resource]) if speedups else ""

    def __repr__(self) -> str:
        """The notebook line: the dataclass default lists every bottleneck and plan field."""
        from ..render import units
        return (f"Timing({self.target}: {units.seconds(self.time_s)}, MFU {self.mfu:.1%}, narrowest "
                f"{self.narrowest or '-'}, {self.devices} device{'s' if self.devices != 1 else ''}, "
                f"{'fits' if self.fits else 'does not fit'})")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["items_per_joule"] = self.items_per_joule
        d["cost_per_million_items"] = self.cost_per_million_items
        d["narrowest"] = self.narrowest
        return d


@dataclass
class Report:
    """Totals and per-op rows of one graph under one binding of its dims (and one target, if any)."""

    graph: str
    dims: dict[str, int]
    flops: int
    transcendentals: int
    bytes: int
    comm_bytes: int
    params: int
    weight_bytes: int
    peak_activation_bytes: int
    flops_by_group: dict[str, int]
    bytes_by_group: dict[str, int]
    ops: Sequence[OpRow]   # a list, or LazyRows (costmodel/lazy_rows.py): built on first read
    unmodeled: list[Unmodeled]
    target: str | None = None
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    timing: Timing | None = None
    #: Filled on a target: every launched kernel of the predicted schedule, and the chip's roofs.
    timeline: list[ScheduledKernel] = field(default_factory=list)
    ceilings: Ceilings | None = None

    def __repr__(self) -> str:
        """Name, target, time, FLOPs, params, the narrowest pipe and how many rows it holds: the
        dataclass default prints every op row and timeline entry (1.2 MB for a timed llama-3-8b)."""
        from ..render import units
        ops = self.ops
        rows = f"{len(ops):,} op rows" if getattr(ops, "built", True) else "op rows not built yet"
        timed = (f", {units.seconds(self.timing.time_s)}, narrowest {self.timing.narrowest or '-'}"
                 if self.timing else "")
        return (f"Report({self.graph!r}" + (f" on {self.target}" if self.target else "") + f"{timed}, "
                f"{units.flops(self.flops)}, {units.si(self.params)} params; {rows}, "
                f"{len(self.timeline):,} timeline entries)")

    @property
    def time_s(self) -> float | None:
        return self.timing.time_s if self.timing else None

    @property
    def mfu(self) -> float | None:
        return self.timing.mfu if self.timing else None

    @property
    def flops_by_phase(self) -> dict[str, int]:
        """FLOPs per phase of a training step (``build_training_graph``), in the order they run;
        empty for a graph without phases."""
        return self._by_phase(lambda row: row.flops)

    @property
    def time_by_phase(self) -> dict[str, float]:
        """Predicted seconds per phase on the target (each fused kernel counted in its anchor's phase)."""
        if self.timing is None:
            return {}
        return self._by_phase(lambda row: row.time_s or 0.0)

    def _by_phase(self, key: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for row in self.ops:
            if row.phase is not None:
                out[row.phase] = out.get(row.phase, 0) + key(row)
        order = ("forward", "recompute", "backward", "optimizer")
        return {p: out[p] for p in sorted(out, key=lambda p: (order.index(p) if p in order else len(order), p))}

    @property
    def matmul_flops(self) -> int:
        """FLOPs of contraction, convolution and attention: what torch's FlopCounterMode counts (the
        JSON's ``totals.matmul_flops``; the notes name ops the counter leaves out)."""
        g = self.flops_by_group
        return g.get("contraction", 0) + g.get("convolution", 0) + g.get("attention", 0)

    modeled_flops = matmul_flops   # the older name, kept

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": REPORT_FORMAT,
            "version": REPORT_VERSION,
            "graph": self.graph,
            "target": self.target,
            "dims": dict(self.dims),
            "totals": {
                "flops": self.flops, "transcendentals": self.transcendentals, "bytes": self.bytes,
                "comm_bytes": self.comm_bytes, "params": self.params, "weight_bytes": self.weight_bytes,
                "peak_activation_bytes": self.peak_activation_bytes, "matmul_flops": self.modeled_flops,
            },
            "flops_by_group": dict(self.flops_by_group),
            "bytes_by_group": dict(self.bytes_by_group),
            **({"flops_by_phase": phases, "time_by_phase": self.time_by_phase} if (phases := self.flops_by_phase)
               else {}),
            "unmodeled": [{"op": u.op, "count": u.count} for u in self.unmodeled],
            "notes": list(self.notes),
            "extra": self.extra,
            "timing": self.timing.to_dict() if self.timing else None,
            "ceilings": self.ceilings.to_dict() if self.ceilings else None,
            "timeline": [k.to_dict() for k in self.timeline],
            "ops": [row.to_dict() for row in self.ops],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return dump_json(self.to_dict(), indent, "report")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Report:
        """Read a report back from its JSON form (the per-op rows included); raises
        :class:`ReportError` naming what is wrong (not a report, a newer version, a missing field)."""
        if not isinstance(data, Mapping):
            raise ReportError(f"Report.from_dict takes the parsed JSON object, got {type(data).__name__}"
                              + (" (for JSON text use Report.from_json)" if isinstance(data, (str, bytes)) else ""))
        if data.get("format") != REPORT_FORMAT:
            raise ReportError(f"not a narrowpipe report (its 'format' is {data.get('format')!r}, "
                              f"not {REPORT_FORMAT!r})")
        version = read_version(data, REPORT_VERSION, "report", ReportError)
        try:   # the shipped schema says what each field holds; an older file may lack what came later
            check({**data, "version": REPORT_VERSION}, REPORT_FORMAT, may_lack=added_after(version, _ADDED))
        except SchemaMismatch as e:
            raise ReportError(f"report JSON (version {version}): {e}") from None
        try:
            return cls._read(data)
        except KeyError as e:
            raise ReportError(f"report JSON lacks the field {e.args[0]!r}") from None
        except (TypeError, AttributeError, ValueError) as e:
            raise ReportError(f"report JSON has a malformed field: {e}") from None

    @classmethod
    def _read(cls, data: Mapping[str, Any]) -> Report:
        names = {f.name for f in fields(OpRow)}
        rows = [OpRow(**{k: v for k, v in r.items() if k in names}) for r in data["ops"]]
        t = data["totals"]
        return cls(graph=data["graph"], dims=dict(data["dims"]), flops=t["flops"],
                   transcendentals=t["transcendentals"], bytes=t["bytes"], comm_bytes=t["comm_bytes"],
                   params=t["params"], weight_bytes=t["weight_bytes"],
                   peak_activation_bytes=t["peak_activation_bytes"],
                   flops_by_group=dict(data["flops_by_group"]), bytes_by_group=dict(data["bytes_by_group"]),
                   ops=rows, unmodeled=[Unmodeled(u["op"], u["count"]) for u in data["unmodeled"]],
                   target=data.get("target"), notes=list(data.get("notes", [])),
                   extra=dict(data.get("extra", {})), timing=_timing_from(data.get("timing")),
                   timeline=[ScheduledKernel.from_dict(k) for k in data.get("timeline", [])],
                   ceilings=Ceilings.from_dict(data["ceilings"]) if data.get("ceilings") else None)

    @classmethod
    def from_json(cls, text: str) -> Report:
        """Read a report from the text :meth:`to_json` wrote (or its UTF-8 bytes)."""
        try:
            data = json.loads(text, parse_constant=_no_constant)
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as e:
            raise ReportError(f"report JSON does not parse: {e}") from None
        except TypeError:
            raise ReportError(f"Report.from_json takes JSON text, got {type(text).__name__}") from None
        if not isinstance(data, dict):
            raise ReportError(f"report JSON is not an object (it is a {type(data).__name__})")
        return cls.from_dict(data)

    def plot_roofline(self, path: str | Path | None = None, *, top: int | None = None) -> Any:
        """The roofline of this timed report (every kernel a point on its target's ceilings), written
        to ``path`` (.png or .svg) when given; returns the matplotlib figure. Needs matplotlib.

        A convenience over :func:`narrowpipe.render.roofline.plot_roofline`, imported here lazily:
        results do not depend on their renderers."""
        from ..render.roofline import plot_roofline
        return plot_roofline(self, path, top=top)


def _no_constant(name: str) -> Any:
    """``json.loads`` reads ``NaN`` and ``Infinity``, which are not JSON: refuse them while parsing."""
    raise ValueError(f"{name} is not a JSON number")


def _timing_from(data: Mapping[str, Any] | None) -> Timing | None:
    if not data:
        return None
    names = {f.name for f in fields(Timing)}
    kwargs = {k: v for k, v in data.items() if k in names}
    kwargs["top"] = [Bottleneck(**b) for b in kwargs.get("top", [])]
    return Timing(**kwargs)
