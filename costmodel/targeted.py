"""Timing a counted program on one target: fuse, run the family's execution model, summarize.

Per-node rows get the time of the kernel they run in (on the kernel's anchor node; the other fused
nodes get 0 s and the kernel's name), so the rows add up to the total. The summary answers the
product's question: time, MFU, the bound mix, and which pipe would help most if it doubled.
"""

from __future__ import annotations

import dataclasses
import re
from math import ceil
from typing import Any

from ..backends import DataflowTarget, Target, get_target
from ..ir import Op
from .execution import BOUNDS, KernelTime, TimingOptions, model_for
from .execution.common import matrix_rate
from .execution.gemm import dot_gemm
from .interpreter import CostTable
from .kernels import Kernel, fuse
from .report import Bottleneck, OpRow, Report, Timing

__all__ = ["apply_target", "time_program", "RESOURCE_DOUBLINGS"]

#: What "this pipe doubles" means, as factors for Target.scaled().
RESOURCE_DOUBLINGS: dict[str, dict[str, float]] = {
    "compute": {"peak_flops": 2.0, "vector_flops": 2.0},
    "memory": {"memory_bandwidth": 2.0, "onchip_bandwidth": 2.0},
    "interconnect": {"interconnect_bandwidth": 2.0},
    "overhead": {"launch_overhead": 0.5},
}


def time_program(kernels: list[Kernel], table: CostTable, target: Target,
                 options: TimingOptions) -> tuple[list[KernelTime], float, Any]:
    """Per-kernel times, total seconds and the family's plan (the dataflow layout, else None)."""
    model = model_for(target)
    if hasattr(model, "run"):
        return model.run(kernels, table, target, options)
    times = [KernelTime(0.0, 0.0, 0.0, 0.0, 0.0, "memory", "", 0.0) if k.is_free or _unmodeled(k)
             else model.time_kernel(k, table, target, options) for k in kernels]
    return times, sum(t.time_s for t in times), None


def _unmodeled(kernel: Kernel) -> bool:
    return any(n.op is Op.UNKNOWN for n in kernel.nodes)


_INDEX = re.compile(r"(?<=[./])\d+(?=[./]|$)")


def hotspots(kernels: list[Kernel], times: list[KernelTime], total: float, n: int = 3) -> list[Bottleneck]:
    """The ``n`` heaviest kernels, counting together the same kernel of every repeated block: in a
    32-layer model "every layer's down_proj: 21%" is what a reader can act on, "layer 7's: 0.7%" is
    not. Kernels are the same when their module paths differ only in indices and their predicted
    times agree to three digits (same shapes; the last layer's down_proj, which also absorbs the
    final residual add, stays in); the label stars the indices that vary. Kernels without a module
    scope stay one per entry."""
    groups: dict[tuple[str, str, float], list[tuple[Kernel, KernelTime]]] = {}
    for k, t in zip(kernels, times):
        if t.time_s > 0:
            scope = k.anchor.source.scope
            key = (_INDEX.sub("#", scope) if scope else f"@{k.name}", k.kind, float(f"{t.time_s:.3g}"))
            groups.setdefault(key, []).append((k, t))
    out = []
    for (_, kind, _), members in groups.items():
        time_s = sum(t.time_s for _, t in members)
        heaviest = members[0][0]
        scope = _varying_starred([k.anchor.source.scope for k, _ in members])
        out.append(Bottleneck(heaviest.name, kind, members[0][1].bound, time_s, time_s / total if total else 0.0,
                              scope, len(members)))
    return sorted(out, key=lambda b: -b.time_s)[:n]


def _varying_starred(scopes: list[str]) -> str:
    """``model.layers.0.mlp``, ``model.layers.1.mlp`` -> ``model.layers.*.mlp``."""
    split = [_INDEX.split(s) for s in scopes]
    indices = [_INDEX.findall(s) for s in scopes]
    head = split[0]
    out = [head[0]]
    for i, part in enumerate(head[1:]):
        values = {ix[i] for ix in indices}
        out.append(("*" if len(values) > 1 else indices[0][i]) + part)
    return "".join(out)


def _dominant_dtype(table: CostTable) -> Any:
    best, dtype = -1, None
    for node, cost in table.costs.items():
        if node.op is Op.DOT and cost.flops > best:
            best, dtype = cost.flops, dot_gemm(table, node).dtype
        elif node.op in (Op.CONV, Op.ATTENTION) and cost.flops > best and node.inputs[0] is not None:
            best, dtype = cost.flops, node.inputs[0].type.dtype
    return dtype


def _items(dims: dict[str, int]) -> tuple[int, str]:
    batch = dims.get("batch", 1)
    if "seq" in dims:
        return batch * dims["seq"], "tokens"
    return batch, "samples"


def apply_target(report: Report, table: CostTable, target: Target | str, *, fusion: str | None = None,
                 allow_tf32: bool = False, sparse: bool = False, price: float | None = None,
                 sensitivity: bool = True) -> Report:
    target = get_target(target)
    model = model_for(target)
    mode = fusion or model.default_fusion
    options = TimingOptions(allow_tf32, sparse, mode)
    kernels = fuse(table, mode)
    times, total, plan = time_program(kernels, table, target, options)

    by_node: dict[str, tuple[Kernel, KernelTime, bool]] = {}
    for k, t in zip(kernels, times):
        for n in k.nodes:
            by_node[n.name] = (k, t, n is k.anchor)
    rows: list[OpRow] = []
    for row in report.ops:
        k, t, is_anchor = by_node[row.name]
        if not row.modeled:
            rows.append(dataclasses.replace(row, kernel=k.name))
            continue
        rows.append(dataclasses.replace(row, time_s=t.time_s if is_anchor else 0.0, bound=t.bound,
                                        utilization=t.utilization, unit=t.unit or None, kernel=k.name))

    mix = {b: 0.0 for b in BOUNDS}
    for k, t in zip(kernels, times):
        if t.time_s > 0:
            mix[t.bound] += t.time_s
    mix = {b: (v / total if total else 0.0) for b, v in mix.items()}

    devices = plan.chips if plan is not None else 1
    dtype = _dominant_dtype(table)
    peak = matrix_rate(target, dtype, options).flops_per_s if dtype is not None else max(target.matrix_flops.values())
    mfu = report.modeled_flops / (total * peak * devices) if total > 0 else 0.0
    top = hotspots(kernels, times, total)

    required = report.weight_bytes + report.peak_activation_bytes
    capacity = target.memory_capacity * devices
    if isinstance(target, DataflowTarget) and plan is not None and plan.streaming:
        capacity += target.external_memory_capacity
    fits = required <= capacity and (plan.fits if plan is not None else True)
    needed = max(1, ceil(required / target.memory_capacity)) if not isinstance(target, DataflowTarget) else devices
    items, unit = _items(report.dims)
    energy = total * target.tdp * devices if target.tdp else None
    price_h = price if price is not None else target.price_per_hour
    cost = total / 3600 * price_h * devices if price_h is not None else None
    notes = list(plan.notes) if plan is not None else []
    unmodeled = sum(1 for r in report.ops if not r.modeled)
    if unmodeled:
        notes.append(f"{unmodeled} unmodeled node(s) are not timed")
    if not fits and not isinstance(target, DataflowTarget):
        notes.append(f"does not fit: {required / 1e9:.3g} GB needed, {capacity / 1e9:.3g} GB per device; "
                     f"needs >= {needed} devices (time shown is for one device)")
    speedups = _sensitivity(kernels, table, target, options, total) if sensitivity else {}
    timing = Timing(target=target.name, family=target.family, time_s=total, mfu=mfu, peak_flops=peak,
                    dtype=dtype.value if dtype is not None else "", bound_mix=mix, speedup_if_doubled=speedups,
                    top=top, devices=devices, memory_required=float(required), memory_capacity=float(capacity),
                    fits=fits, devices_needed=needed, items=items, item_unit=unit,
                    throughput=items / total if total else 0.0, energy_j=energy, cost_usd=cost,
                    price_per_hour=price_h, fusion=mode, kernels=sum(1 for k in kernels if not k.is_free),
                    notes=notes, plan=plan.to_dict() if plan is not None else {})
    return dataclasses.replace(report, ops=rows, target=target.name, timing=timing)


def _sensitivity(kernels: list[Kernel], table: CostTable, target: Target, options: TimingOptions,
                 base: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for resource, factors in RESOURCE_DOUBLINGS.items():
        usable = {k: v for k, v in factors.items() if _has_resource(target, k)}
        if not usable:
            continue
        _, t, _ = time_program(kernels, table, target.scaled(**usable), options)
        out[resource] = base / t if t > 0 else 1.0
    return out


def _has_resource(target: Target, name: str) -> bool:
    if name == "onchip_bandwidth":
        return target.onchip_bandwidth is not None
    if name == "interconnect_bandwidth":
        return bool(target.scale_up_bandwidth or target.scale_out_bandwidth)
    if name == "vector_flops":
        return bool(target.vector_flops)
    return True
