"""Timing a counted program on one target: fuse, run the family's execution model, summarize.

Per-node rows get the time of the kernel they run in (on the kernel's anchor node; the other fused
nodes get 0 s and the kernel's name), so the rows add up to the total. The steps live apart:
:mod:`.timing` (program -> schedule), :mod:`.summary` (MFU, fit, energy, money, throughput) and
:mod:`.sensitivity` (speed-up if each resource doubled); this module joins their answers to a report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..backends import Target, get_target
from ..ir import DimRole, Graph
from .ceilings import ceilings_of
from .execution import DeviceGroup, Program, Schedule, TimingOptions
from .hotspots import hotspots
from .interpreter import CostTable
from .report import OpRow, Report
from .sensitivity import RESOURCE_DOUBLINGS, speedups_if_doubled
from .summary import summarize
from .timeline import timeline
from .timing import fused_program, time_program

__all__ = ["apply_target", "time_program", "RESOURCE_DOUBLINGS", "hotspots"]


def _items(graph: Graph, dims: dict[str, int]) -> tuple[int, str]:
    """What one run processes: tokens (batch x sequence) when the graph has a sequence dim, else
    samples; read from the dims' roles, never from their names."""
    batch = graph.role_size(DimRole.BATCH, dims)
    if graph.dims_with_role(DimRole.SEQUENCE):
        return batch * graph.role_size(DimRole.SEQUENCE, dims), "tokens"
    return batch, "samples"


def apply_target(report: Report, table: CostTable, target: Target | str, *, fusion: str | None = None,
                 allow_tf32: bool = False, sparse: bool = False, price: float | None = None,
                 sensitivity: bool = True, eager_overhead: bool = True, fp32_matmul: str = "default") -> Report:
    """``report`` with each node's time on ``target`` and the run's :class:`Timing`."""
    target = get_target(target)
    program = fused_program(table, target, TimingOptions(allow_tf32, sparse, fusion, eager_overhead,
                                                                 fp32_matmul=fp32_matmul))
    devices = DeviceGroup(target)
    schedule = time_program(program, devices)
    speedups = speedups_if_doubled(program, devices, schedule.total_s) if sensitivity else {}
    items, unit = _items(table.graph, report.dims)
    timing = summarize(program, schedule, target, modeled_flops=report.modeled_flops, items=items,
                       item_unit=unit, price=price, speedups=speedups)
    return dataclasses.replace(report, ops=_rows(report.ops, program, schedule), target=target.name, timing=timing,
                               timeline=timeline(program, schedule), ceilings=ceilings_of(target))


def _rows(rows: Sequence[OpRow], program: Program, schedule: Schedule) -> list[OpRow]:
    """Each row with its kernel's name, and its kernel's time on the kernel's anchor (0 elsewhere)."""
    by_node = {n.name: (k, t, n is k.anchor) for k, t in zip(program.kernels, schedule.times) for n in k.nodes}
    out: list[OpRow] = []
    for row in rows:
        k, t, is_anchor = by_node[row.name]
        if not row.modeled:
            out.append(dataclasses.replace(row, kernel=k.name))
            continue
        out.append(dataclasses.replace(row, time_s=t.time_s if is_anchor else 0.0, bound=t.bound,
                                       utilization=t.utilization, unit=t.unit or None, kernel=k.name))
    return out
