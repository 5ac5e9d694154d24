"""Result types: what analysis returns and what renderers, the CLI and JSON consumers read.

A :class:`Report` is plain data (rows of numbers and names), versioned in its JSON form, so that a
report written today can be read by deployment tooling tomorrow without the graph or the model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, NamedTuple

__all__ = ["OpRow", "Report", "Unmodeled", "REPORT_FORMAT", "REPORT_VERSION"]

REPORT_FORMAT = "narrowpipe.report"
REPORT_VERSION = 1


class Unmodeled(NamedTuple):
    """An op (by its source name) that has no cost rule, and how many nodes use it."""

    op: str
    count: int


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

    @property
    def intensity(self) -> float:
        """FLOPs per byte of compulsory traffic."""
        return self.flops / self.bytes if self.bytes else (float("inf") if self.flops else 0.0)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["intensity"] = None if self.bytes == 0 else self.flops / self.bytes
        return {k: v for k, v in d.items() if v is not None or k in ("time_s", "bound")}


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
    ops: list[OpRow]
    unmodeled: list[Unmodeled]
    target: str | None = None
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def modeled_flops(self) -> int:
        """FLOPs of contraction, convolution and attention: what torch's FlopCounterMode counts."""
        g = self.flops_by_group
        return g.get("contraction", 0) + g.get("convolution", 0) + g.get("attention", 0)

    @property
    def matmul_flops(self) -> int:
        return self.modeled_flops

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self.ops:
            counts[row.op] = counts.get(row.op, 0) + 1
        return counts

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
            "unmodeled": [{"op": u.op, "count": u.count} for u in self.unmodeled],
            "notes": list(self.notes),
            "extra": self.extra,
            "ops": [row.to_dict() for row in self.ops],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Report:
        """Read a report back from its JSON form (the per-op rows included)."""
        if data.get("format") != REPORT_FORMAT:
            raise ValueError(f"not a narrowpipe report (format={data.get('format')!r})")
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
                   extra=dict(data.get("extra", {})))
