"""The execution-model interface: a :class:`Program` on a :class:`DeviceGroup` becomes a :class:`Schedule`.

Every chip family implements :class:`ExecutionModel`. A single-device family (GPU, TPU, CPU) returns
a one-device schedule; the dataflow family's layout over chips is a schedule too; the placement
planner's shardings and serving's batches will be. Code above the execution models reads schedules
and never asks which family produced one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ...backends import Target
from ..interpreter import CostTable
from ..kernels import Kernel, fuse
from ..sizes import weight_bytes
from .common import KernelTime, TimingOptions
from .pipeline import Pipelining

__all__ = ["Program", "DeviceGroup", "Schedule", "ExecutionModel"]


@dataclass(frozen=True, eq=False)
class Program:
    """What runs: the fused kernels in program order, the cost table they index into, and the options
    that change times. Built once per target (fusion differs by family) and timed as often as needed."""

    kernels: list[Kernel]
    table: CostTable
    options: TimingOptions

    @classmethod
    def fused(cls, table: CostTable, options: TimingOptions) -> Program:
        assert options.fusion is not None, "resolve the family's default fusion first"
        return cls(fuse(table, options.fusion), table, options)

    @property
    def memory_required(self) -> int:
        """Bytes that must be resident at once: every weight plus the peak of live activations."""
        return weight_bytes(self.table) + self.table.peak_activation_bytes

    @property
    def unmodeled_nodes(self) -> int:
        """Nodes without a cost rule: they are in the program but take no time in any schedule."""
        unmodeled = {id(n) for n in self.table.unmodeled}
        return sum(1 for n in self.table.costs if id(n) in unmodeled)


@dataclass(frozen=True)
class DeviceGroup:
    """The devices a program may use: ``count`` chips of ``target`` (None: as many as the family's
    layout needs, up to the target's largest system). A mesh with axes will replace the count."""

    target: Target
    count: int | None = None

    def __post_init__(self) -> None:
        if self.count is not None and self.count < 1:
            raise ValueError(f"a device group needs at least one device, got {self.count}")


@dataclass
class Schedule:
    """How a program runs on a device group.

    ``times`` has one :class:`KernelTime` per kernel in program order and adds up to ``total_s``.
    ``placement`` maps each kernel's name to the device index it runs on. ``memory_required`` is
    the program's resident bytes over all ``devices``; ``capacity_per_device`` what one device
    holds (for a weight-streaming layout, its external tier too). ``devices_needed`` is the fewest
    devices of this kind of layout that would hold the program. ``layout`` is family detail (the
    dataflow stages) that :meth:`to_dict` hands to the report's ``plan``.

    Two details say how a multi-device layout runs, for a timeline to draw it: ``pipelining`` (a
    pipelined layout's per-kernel split into what is paid once, by every microbatch's pass and over
    all passes; its ``times`` are then shares of the pipelined total, not busy times) and ``shards``
    (every kernel split over that many devices that run it at once, each its 1/shards share, from
    its placement on: a tensor-parallel layout's ``times`` are one device's).
    """

    times: list[KernelTime]
    total_s: float
    devices: int
    placement: dict[str, int]
    memory_required: float
    capacity_per_device: float
    fits: bool
    devices_needed: int
    notes: list[str] = field(default_factory=list)
    layout: dict[str, Any] = field(default_factory=dict)
    pipelining: Pipelining | None = None
    shards: int = 1

    @property
    def memory_per_device(self) -> float:
        return self.memory_required / self.devices

    @property
    def memory_capacity(self) -> float:
        return self.capacity_per_device * self.devices

    def to_dict(self) -> dict[str, Any]:
        """The report's ``plan``: the family's layout detail (empty for a one-device run)."""
        return dict(self.layout)


class ExecutionModel(Protocol):
    """One chip family's model of how a program runs."""

    family: str
    default_fusion: str

    def run(self, program: Program, devices: DeviceGroup) -> Schedule:
        ...
