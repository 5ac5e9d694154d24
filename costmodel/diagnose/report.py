"""What a diagnosis hands back: per-op rows, unmodeled time, and the run's verdict, as plain data.

These are result types only (no costing, no labelling), so renderers and JSON consumers read them
without pulling in the trace reader or the cost rules. ``to_dict`` stamps the format, version and
the thresholds that produced the labels, so a saved diagnosis says how it was judged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ...jsonout import dumps as dump_json
from .labels import (
    LONG_CALL_LAUNCHES,
    LOW_COMPUTE_UTILIZATION,
    OVERHEAD_UTILIZATION,
    RUN_LABELS,
    UNMODELED_LABEL,
    unmodeled_names,
)

__all__ = ["Diagnosis", "OpStat", "UnmodeledStat", "DIAGNOSIS_FORMAT", "DIAGNOSIS_VERSION"]

DIAGNOSIS_FORMAT, DIAGNOSIS_VERSION = "narrowpipe.diagnosis", 4


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
    #: Utilizations are one call's work at the peak over the typical (median) call's time, so one
    #: preempted call does not flip the bound; ``time_s``, ``share`` and achieved rates are all calls'.
    compute_utilization: float
    memory_utilization: float
    link_utilization: float | None
    predicted_s: float | None   # the target's execution model, all calls
    bound: str
    advice: tuple[str, ...]
    kernel: str = ""            # the longest GPU kernel it launched
    #: Its bytes at the bandwidth the target reaches for its transfer sizes, over its time: what
    #: the memory bound is judged on (``memory_utilization`` is of the raw peak).
    memory_reach_utilization: float = 0.0

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
    #: Why the trace's machine is not of the target's family (a CPU trace judged on an H100), or "":
    #: the label then holds host op times against a GPU's peaks, which says nothing of a GPU run, so
    #: renderers print it beside the label, not only as a warning after the tables.
    machine_mismatch: str = ""

    @property
    def label_text(self) -> str:
        """The label in words; for unmodeled time, the ops that took it (what a reader acts on)."""
        if self.label == UNMODELED_LABEL and self.unmodeled:
            return f"{RUN_LABELS[self.label]}: {unmodeled_names(self.unmodeled)}"
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
        return dump_json(self.to_dict(), indent, "diagnosis")
