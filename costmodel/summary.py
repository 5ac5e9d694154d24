"""Summary: what a schedule means for the product's questions (MFU, fit, energy, money, throughput).

It reads the schedule (time, devices, memory and fit) and the program (for the dominant dtype and the
kernel count); nothing here knows which family produced the schedule.
"""

from __future__ import annotations

from math import ceil
from typing import Any

from ..backends import Target
from ..backends.defaults import SERVING_MEMORY_RESERVE, runtime_memory_reserve
from ..errors import NarrowpipeError
from ..ir import DType, Graph, Op, node_subgraphs
from .execution import BOUNDS, Program, Schedule
from .execution.common import OVERHEAD, bound_of, conv_options, matrix_rate
from .execution.gemm import conv_gemm, dot_gemm, grouped_gemm
from .execution.sequential import NO_FIT
from .hotspots import hotspots
from .interpreter import CostTable
from .power import idle_note, schedule_energy
from .report import Timing

__all__ = ["summarize", "bound_mix"]


def bound_mix(schedule: Schedule) -> dict[str, float]:
    """Fraction of the time spent in kernels bound by each resource. A pipelined (dataflow) layout
    pays its kernels' launch latencies once, as the pipeline fills, while the passes overlap: the
    fill is a term of its own there, counted as overhead, and each kernel's busy rest goes to its
    largest busy term. So the overhead share is what the launch latencies add to the run, the share
    that halving them halves (the if-doubled figure); labelling whole kernels hid it (QA: Llama-3-70B
    prefill on 4 wafers read "C 72% O 14%" beside an overhead-bound verdict)."""
    mix = {b: 0.0 for b in BOUNDS}
    fill_apart = schedule.pipelining is not None
    for t in schedule.times:
        if t.time_s <= 0:
            continue
        if fill_apart and t.overhead_s > 0:
            mix[OVERHEAD] += min(t.overhead_s, t.time_s)
            rest = t.time_s - min(t.overhead_s, t.time_s)
            if rest > 0:
                mix[bound_of(t.compute_s, t.memory_s, t.comm_s, 0.0)] += rest
        else:
            mix[t.bound] += t.time_s
    total = schedule.total_s
    return {b: (v / total if total else 0.0) for b, v in mix.items()}


def dominant_contraction(table: CostTable) -> tuple[Any, bool]:
    """The dtype of the contraction with the most FLOPs, and whether it is a convolution (whose fp32
    precision can differ from the matmuls', :func:`~.execution.common.conv_options`); where no
    top-level node is one (the model's matmuls sit in a Loop body, or it has none), the model's own
    dtype (:func:`_model_dtype`)."""
    dtype, conv, _ = _dominant(table)
    return dtype, conv


def _dominant(table: CostTable) -> tuple[Any, bool, DType | None]:
    """:func:`dominant_contraction` and the weight type of that contraction where it is narrower than
    its compute type (weight-only quantization, ``--weights fp8_e4m3``: bf16 MMAs on fp8 weights)."""
    best, dtype, conv, narrow = -1, None, False, None
    for node, cost in table.costs.items():
        if node.op in (Op.DOT, Op.GROUPED_DOT) and cost.flops > best:
            gemm = dot_gemm(table, node) if node.op is Op.DOT else grouped_gemm(table, node)
            best, dtype, conv, narrow = cost.flops, gemm.dtype, False, gemm.narrow_rhs
        elif node.op is Op.CONV and cost.flops > best:
            best, dtype, conv, narrow = cost.flops, conv_gemm(table, node).dtype, True, None
        elif node.op is Op.ATTENTION and cost.flops > best and node.inputs[0] is not None:
            best, dtype, conv, narrow = cost.flops, node.inputs[0].type.dtype, False, None
    return (dtype, conv, narrow) if dtype is not None else (_model_dtype(table.graph), False, None)


_CONTRACTIONS = (Op.DOT, Op.GROUPED_DOT, Op.CONV, Op.ATTENTION, Op.ATTENTION_BACKWARD)


def _model_dtype(graph: Graph) -> DType:
    """What the model computes in: the first float contraction's input in its control-flow bodies,
    else its first float weight (as the planner takes it), else its first float input, else fp32.
    Without it MFU was held against the target's largest matrix rate (an fp32 model with its matmuls
    in a Loop read 'MFU 33% of 361 GFLOP/s', the bf16 rate, on a host whose fp32 rate is 166)."""
    def body_contraction(g: Graph) -> DType | None:
        for node in g.nodes:
            if node.op in _CONTRACTIONS:
                v = node.inputs[0] if node.inputs else None
                if v is not None and v.type.dtype.is_float:
                    return v.type.dtype
            for body in node_subgraphs(node):
                found = body_contraction(body)
                if found is not None:
                    return found
        return None
    found = body_contraction(graph)
    if found is not None:
        return found
    for v in (*graph.weights, *graph.inputs):
        if v.type.dtype.is_float:
            return v.type.dtype
    return DType.FP32


def _faster_peaks_note(table: CostTable, target: Target, options: Any, peak: float, precision: str) -> str:
    """A note when part of the matmul FLOPs ran at a faster peak than the one MFU holds them against.

    MFU keeps its standard definition, model FLOPs / (time x peak), with one peak: the dominant
    precision's. Where other contractions run at a faster rate (int4 activations put attention on
    TPU v5e's int8 MXUs while the fp32 matmuls run as bf16 passes), MFU passes what any one
    precision reaches (QA: 96.6% against a fold limit near 89%): the note says why."""
    faster: dict[str, float] = {}
    total = 0.0
    for node, cost in table.costs.items():
        if node.op not in (Op.DOT, Op.GROUPED_DOT, Op.CONV, Op.ATTENTION) or cost.flops <= 0:
            continue
        if node.op is Op.DOT:
            dtype = dot_gemm(table, node).dtype
        elif node.op is Op.GROUPED_DOT:
            dtype = grouped_gemm(table, node).dtype
        elif node.op is Op.CONV:
            dtype = conv_gemm(table, node).dtype
        elif node.inputs and node.inputs[0] is not None:
            dtype = node.inputs[0].type.dtype
        else:
            continue
        total += cost.flops
        rate = matrix_rate(target, dtype, conv_options(options, target) if node.op is Op.CONV else options)
        if rate.flops_per_s > peak * (1 + 1e-9):
            runs = dtype.value if rate.dtype == dtype.value else f"{dtype.value} as {rate.dtype}"
            key = f"{runs} at {rate.flops_per_s / 1e12:.4g} TFLOP/s"
            faster[key] = faster.get(key, 0.0) + cost.flops
    if not faster or total <= 0:
        return ""
    share = sum(faster.values()) / total
    which = ", ".join(sorted(faster, key=lambda k: -faster[k]))
    return (f"MFU holds every FLOP against the {precision} peak ({peak / 1e12:.4g} TFLOP/s); {share:.0%} of "
            f"the matmul FLOPs ran at a faster peak ({which}), so MFU can pass what one precision reaches")


def _fewer_multiplies_note(program: Program, schedule: Schedule) -> str:
    """Why MFU passes 100% where convolutions ran as Winograd or FFT: those algorithms compute the
    direct convolution's result with fewer multiplies, and MFU counts the direct FLOPs (VGG-19's fp32
    3x3 layers on an A100's CUDA cores: 101.8% of peak with no word of why)."""
    if len(schedule.times) != len(program.kernels):
        return ""
    direct = saved = 0.0
    for kernel, kt in zip(program.kernels, schedule.times):
        if kernel.kind != "conv" or kt.executed_flops <= 0:
            continue
        own = kt.executed_flops / kt.scale if kt.scale > 0 else kt.executed_flops
        direct += kernel.cost.flops
        saved += max(kernel.cost.flops - own, 0.0)
    if saved <= 0:
        return ""
    return (f"MFU passes 100%: {saved / direct:.0%} of the convolution FLOPs were never executed (Winograd or "
            "FFT convolutions compute the direct result with fewer multiplies); MFU counts the direct FLOPs")


def _reserved_fit(schedule: Schedule, target: Target, reserve: float | None, notes: list[str]) -> tuple[bool, int]:
    """Whether the run fits, and on how many devices, with ``reserve`` of each device's memory left to
    the runtime. A serving step (``--mode``) is held to what ``serve`` holds it to (vLLM leaves 10%
    of a GPU unallocated, ``SERVING_MEMORY_RESERVE``), so the same deployment gets one answer (it
    read 'fits: yes (84.8 GB)' against 85.5 GB where ``serve`` said the KV cache overflows by 7.82 GB);
    ``None``, a plain run, leaves the runtime's context, workspaces and fragmentation
    (``runtime_memory_reserve``: a 17.14 GB run read 'fits' on a 17.18 GB TPU v5e whose XLA allocator
    stops at 16.62 GB), and says so only where that changes the answer. A dataflow compiler places
    every tensor ahead of time, with no allocator to reserve for, as ``serve`` takes it too."""
    if reserve is not None and not 0 <= reserve < 1:   # NaN fails both
        raise NarrowpipeError(f"memory_reserve {reserve!r} is not a fraction of a device's memory in [0, 1)")
    fits, needed = schedule.fits, schedule.devices_needed
    plain = reserve is None
    share = runtime_memory_reserve(target.family) if reserve is None else reserve
    if share <= 0 or target.family == "dataflow" or schedule.capacity_per_device <= 0:
        return fits, needed
    usable = schedule.capacity_per_device * (1 - share)
    required, devices = schedule.memory_required, schedule.devices
    needed = max(needed, ceil(required / usable))
    gb = 1e9
    serving = not plain and share == SERVING_MEMORY_RESERVE
    kind = "the runtime reserve" if plain else "the serving reserve" if serving else "the memory reserve"
    left = f"{share:.0%} left to the runtime" + (", as `serve` leaves it" if serving else "")
    if not fits or required > usable * devices:
        # one note and one count: the schedule's own note (raw capacity) gives way to the reserve's
        notes[:] = [n for n in notes if not n.startswith(NO_FIT)]
        notes.append(f"{NO_FIT[:-2]} with {kind}: {required / gb:.3g} GB needed, {usable / gb:.3g} of "
                     f"{schedule.capacity_per_device / gb:.3g} GB usable per device ({left}); "
                     f"needs >= {needed} devices (time shown is for {devices} device{'s' if devices != 1 else ''})")
        return False, needed
    if not plain:   # it fits here (the branch above returns otherwise)
        notes.append(f"fits with {kind}: {required / gb:.3g} GB needed, {usable / gb:.3g} of "
                     f"{schedule.capacity_per_device / gb:.3g} GB usable per device ({left})")
    return fits, needed


def summarize(program: Program, schedule: Schedule, target: Target, *, modeled_flops: int, items: int,
              item_unit: str, price: float | None, speedups: dict[str, float],
              executed_flops: int | None = None, memory_reserve: float | None = None) -> Timing:
    """The :class:`Timing` of ``schedule``: MFU (``modeled_flops``, the model's) and the hardware-FLOPs
    utilization (``executed_flops``, a recompute phase's included; the model's when not given) against
    the dominant dtype's matrix peak over the devices used, energy from the power model by utilization
    (costmodel/power.py) and money at the device-hour price for every device used. ``memory_reserve``
    is the fraction of each device's memory the fit leaves to the runtime; ``None``, a plain run's
    ``RUNTIME_MEMORY_RESERVE`` (:func:`_reserved_fit`)."""
    total, devices = schedule.total_s, schedule.devices
    dtype, conv, narrow = _dominant(program.table)
    options = conv_options(program.options, target) if conv else program.options
    rate = matrix_rate(target, dtype, options) if dtype is not None else None
    peak = rate.flops_per_s if rate is not None else max(target.matrix_flops.values())
    precision = (rate.runs_as or rate.dtype) if rate is not None else ""
    # the label said "bf16" for --weights fp8_e4m3: true of the MMAs, silent on what is stored
    label = f"{precision}, {narrow.value} weights" if precision and narrow is not None else precision
    mfu = modeled_flops / (total * peak * devices) if total > 0 else 0.0
    executed = modeled_flops if executed_flops is None else executed_flops
    hfu = executed / (total * peak * devices) if total > 0 else 0.0
    notes = list(schedule.notes)
    if rate is not None:
        note = _faster_peaks_note(program.table, target, program.options, peak, precision)
        notes += [note] if note else []
    fewer = _fewer_multiplies_note(program, schedule) if mfu > 1 else ""
    notes += [fewer] if fewer else []
    fits, needed = _reserved_fit(schedule, target, memory_reserve, notes)
    energy = schedule_energy(program, schedule, target)
    if energy is not None and (assumed := idle_note(target)):
        notes.append(assumed)
    price_h = price if price is not None else target.price_per_hour
    cost = total / 3600 * price_h * devices if price_h is not None else None
    basis = "given" if price is not None else (target.price_basis or "unstated") if price_h is not None else ""
    return Timing(target=target.name, family=target.family, time_s=total, mfu=mfu, hfu=hfu, peak_flops=peak,
                  dtype=dtype.value if dtype is not None else "", precision=label, bound_mix=bound_mix(schedule),
                  speedup_if_doubled=speedups, top=hotspots(program.kernels, schedule.times, total),
                  devices=devices, memory_required=schedule.memory_required,
                  memory_capacity=schedule.memory_capacity, fits=fits,
                  devices_needed=needed, items=items, item_unit=item_unit,
                  throughput=items / total if total else 0.0, energy_j=energy, cost_usd=cost,
                  price_per_hour=price_h, price_basis=basis, fusion=program.options.fusion or "",
                  kernels=sum(1 for k in program.kernels if not k.is_free), notes=notes,
                  plan=schedule.to_dict())
