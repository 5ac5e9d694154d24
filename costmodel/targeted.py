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
from .prices import checked_price
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
                 sensitivity: bool = True, eager_overhead: bool = True, fp32_matmul: str = "default",
                 memory_reserve: float | None = None, fp32_conv: str = "default") -> Report:
    """``report`` with each node's time on ``target`` and the run's :class:`Timing` (its fit with
    ``memory_reserve`` of each device's memory left to the runtime: a serving step's; ``None``, a plain
    run's runtime reserve)."""
    price = checked_price(price)
    target = get_target(target)
    program = fused_program(table, target, TimingOptions(allow_tf32, sparse, fusion, eager_overhead,
                                                                 fp32_matmul=fp32_matmul, fp32_conv=fp32_conv))
    devices = DeviceGroup(target)
    schedule = time_program(program, devices)
    speedups = speedups_if_doubled(program, devices, schedule.total_s) if sensitivity else {}
    items, unit = _items(table.graph, report.dims)
    timing = summarize(program, schedule, target, modeled_flops=model_flops(report),
                       executed_flops=report.modeled_flops, items=items, item_unit=unit, price=price,
                       speedups=speedups, memory_reserve=memory_reserve)
    return dataclasses.replace(report, ops=_rows(report.ops, program, schedule), target=target.name, timing=timing,
                               timeline=timeline(program, schedule), ceilings=ceilings_of(target))


def model_flops(report: Report) -> int:
    """The model's matmul-like FLOPs (contraction, convolution, attention), what MFU counts. Of a
    training step, three times the forward's: PaLM's MFU (Chowdhery et al. 2022, appendix B), as
    ``plan`` counts it, leaving out what is recomputed, the recompute phase and the score matmuls a
    fused attention's backward runs again, so a step that redoes work does not read as a better use of
    the chip (that is the hardware-FLOPs utilization). A backward that does less than twice the forward
    (frozen weights: no weight gradients) counts as it is."""
    phases = report.flops_by_phase
    if "backward" not in phases:
        return report.modeled_flops
    by_phase: dict[str, int] = {}
    for row in report.ops:
        if row.phase is not None and row.group in _MODEL_GROUPS:
            by_phase[row.phase] = by_phase.get(row.phase, 0) + row.flops
    forward = by_phase.get("forward", 0)
    return forward + min(by_phase.get("backward", 0), 2 * forward)


_MODEL_GROUPS = frozenset({"contraction", "convolution", "attention"})


def _rows(rows: Sequence[OpRow], program: Program, schedule: Schedule) -> list[OpRow]:
    """Each row with its kernel's name, and its kernel's time on the kernel's anchor (0 elsewhere)."""
    by_node = {n.name: (k, t, n is k.anchor) for k, t in zip(program.kernels, schedule.times) for n in k.nodes}
    out: list[OpRow] = []
    for row in rows:
        k, t, is_anchor = by_node[row.name]
        if not row.modeled:
            out.append(OpRow.from_fields(row.__dict__, kernel=k.name))
            continue
        # from_fields, not dataclasses.replace: a 25-target compare of Llama-3-8B fills 150,000 rows
        out.append(OpRow.from_fields(row.__dict__, time_s=t.time_s if is_anchor else 0.0, bound=t.bound,
                                     utilization=t.utilization, unit=t.unit or None, kernel=k.name))
    return out
