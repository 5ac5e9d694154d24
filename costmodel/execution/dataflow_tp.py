"""The tensor-parallel layout of a tiered dataflow node (SambaNova SN40L: SRAM, HBM, DDR).

A chip whose weights live behind its SRAM, in HBM, serves a model the way a GPU node does: every
block split over all the sockets of the node (Megatron-style column/row pairs), each socket reading
its 1/n of the weights from its own HBM every token, and the partial sums all-reduced once per block
where the block's output joins the residual stream (:mod:`.residual`). The pipeline layout (a chip per
stage) reads one chip's bandwidth at a time and is slow for a single token; this one reads all n.

The three tiers: the on-chip SRAM holds the streaming working set (it is the ``onchip_capacity``, not a
weight store here), weights sit in HBM (``memory_*``) when their 1/n share fits, and what does not fit
streams from DDR (``external_memory_*``) at its bandwidth. SambaNova fuses a whole decoder block into
one kernel call and pipelines consecutive calls, so the only synchronisation per block is the
all-reduce: one-shot (each socket sends its partial to every other, one latency) or ring, whichever
is faster; with no inter-chip bandwidth in the spec, only the latency is charged (a lower bound, noted).
"""

from __future__ import annotations

from dataclasses import replace

from ...backends import DataflowTarget
from ...ir import Op
from ..sizes import values_bytes, weight_bytes
from .algorithms import ring
from .common import KernelTime, bound_of
from .program import Program, Schedule
from .residual import residual_adds
from .routing import UnitTimes, kernel_time

__all__ = ["is_tiered", "tensor_parallel_schedule", "all_reduce_seconds"]


def is_tiered(target: DataflowTarget) -> bool:
    """Weights live in a memory behind the on-chip SRAM (HBM), not in the SRAM itself."""
    return bool(target.onchip_capacity) and target.memory_capacity > (target.onchip_capacity or 0.0)


def _link(target: DataflowTarget) -> tuple[float, float | None]:
    latency = target.chip_to_chip_latency if target.chip_to_chip_latency is not None else (target.link_latency or 0.0)
    return latency, target.chip_to_chip_bandwidth or target.scale_up_bandwidth


def all_reduce_seconds(nbytes: float, chips: int, target: DataflowTarget) -> float:
    """One all-reduce of ``nbytes`` over ``chips``: the faster of one-shot and ring."""
    if chips < 2:
        return 0.0
    latency, bw = _link(target)
    if not bw:
        return latency
    one_shot = latency + (chips - 1) * nbytes / bw
    return min(one_shot, ring(Op.ALL_REDUCE, nbytes, chips, bw, latency).seconds)


def _split(kt: KernelTime, chips: int, stream_s: float, comm_s: float) -> KernelTime:
    compute, memory = kt.compute_s / chips, kt.memory_s / chips + stream_s
    busy = max(compute, memory)
    return replace(kt, time_s=busy + comm_s + kt.overhead_s, compute_s=compute, memory_s=memory, comm_s=comm_s,
                   bound=bound_of(compute, memory, comm_s, kt.overhead_s), executed_flops=kt.executed_flops / chips)


def tensor_parallel_schedule(program: Program, target: DataflowTarget, chips: int, units: UnitTimes,
                             fits: bool, notes: list[str]) -> Schedule:
    """Every kernel split over ``chips``, an all-reduce at each block's residual add. Each kernel is
    placed from chip 0 on with ``shards = chips``: all of them run its shards at once, and its times
    are one chip's (its 1/chips share of the work, then the all-reduce that closes a block)."""
    table = program.table
    weights = weight_bytes(table)
    per_chip = weights / chips
    overflow = max(0.0, per_chip - target.memory_capacity)
    stream_share = overflow / per_chip if per_chip else 0.0
    closing = {id(n) for n in residual_adds(table.graph)}
    times: list[KernelTime] = []
    placement: dict[str, int] = {}
    reduces = 0
    for k in program.kernels:
        kt = kernel_time(k, program, target, units)
        placement[k.name] = 0
        if kt.time_s <= 0:
            times.append(kt)
            continue
        stream = 0.0
        if stream_share and target.external_memory_bandwidth:
            mine = values_bytes(table, {v: None for v in k.inputs if v.kind.is_weight}) / chips
            stream = mine * stream_share / target.external_memory_bandwidth
        comm = 0.0
        if any(id(n) in closing for n in k.nodes):
            out = next((n.outputs[0] for n in k.nodes if id(n) in closing), None)
            comm = all_reduce_seconds(values_bytes(table, [out]) if out is not None else 0, chips, target)
            reduces += 1
        times.append(_split(kt, chips, stream, comm))
    total = sum(t.time_s for t in times)
    tiers = "HBM" if not overflow else f"HBM and DDR ({overflow / 1e9:.3g} GB per chip streamed)"
    notes = notes + [f"tensor parallel over {chips} chips: weights {per_chip / 1e9:.3g} GB per chip from {tiers}, "
                     f"{reduces} all-reduces per pass"]
    if not _link(target)[1]:
        notes.append("no chip-to-chip bandwidth in the spec: all-reduces charged their latency only (a lower bound)")
    required = program.memory_required
    capacity = target.memory_capacity + target.external_memory_capacity
    plan = {"chips": chips, "layout": "tensor_parallel", "weight_streaming": bool(overflow),
            "all_reduces": reduces, "latency_s": total}
    return Schedule(times, total, chips, placement, float(required), float(capacity),
                    required <= capacity * chips and fits, chips, notes, plan, shards=chips)
