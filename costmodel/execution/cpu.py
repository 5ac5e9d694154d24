"""CPU execution model: cores x SIMD x FMA x clock (AMX tiles for bf16/int8 where present), memory
bandwidth from DRAM or, for working sets that fit, the last-level cache, and a per-op dispatch
overhead (eager PyTorch runs one kernel per op, so the CPU default is no fusion). A calibrated
target's curves replace the fixed efficiencies: GEMM efficiency by shape from a measured (M, N, K)
grid (:mod:`.gemm_grid`; a batched GEMM's items each at their own shape, :mod:`.batched_gemm`;
an output whose rows are not aligned at the measured loss, :mod:`.unaligned_rows`),
else by FLOPs and by the smaller output side (skinny GEMMs), bandwidth by transfer size,
transcendental rates per function. Each kernel also pays for the fresh pages of the large buffers
it allocates (:mod:`.fresh_pages`), and in an eager run the host stall after the kernel before it
moved more bytes than the caches hold (:mod:`.host_stalls`) and the stall of re-reading inputs that
the traffic since their last touch evicted (:mod:`.reuse`).
"""

from __future__ import annotations

import math
from dataclasses import replace

from ...backends import CpuTarget
from ...backends.defaults import (
    AMX_OPS_PER_BF16_OP,
    CACHE_RESIDENT_FRACTION,
    CPU_ATTENTION_KV_BLOCK,
    MIN_MATMUL_EFFICIENCY,
)
from ...ir import DType, Op
from ..interpreter import CostTable
from ..kernels import Kernel
from .batched_gemm import batched_item_time, grid_item_efficiency
from .common import (
    KernelTime,
    Rate,
    TimingOptions,
    attention_block_fraction,
    bound_of,
    interpolate,
    matmul_efficiency,
    matrix_rate,
    memory_time,
    roofline,
    vector_rate,
)
from .fresh_pages import fresh_page_time
from .gemm import Gemm, attention_shape, conv_gemm, is_depthwise, kernel_gemms
from .host_stalls import bytes_since_own_call, evicted_call_time
from .program import DeviceGroup, Program, Schedule
from .reuse import input_reuse, reuse_stall_time
from .routing import kernel_time
from .sequential import SequentialModel, one_device_schedule
from .unaligned_rows import unaligned_factor
from .vector import transcendental_time

__all__ = ["CpuModel", "cold_call_time", "conv_factors"]


class CpuModel(SequentialModel):
    family = "cpu"
    default_fusion = "none"
    vector_unit = "SIMD"

    def run(self, program: Program, devices: DeviceGroup) -> Schedule:
        target = devices.target
        assert isinstance(target, CpuTarget)
        times = [self._with_fresh_pages(kernel_time(k, program, target, self), k, program, target)
                 for k in program.kernels]
        times = _with_evicted_calls(_with_module_calls(times, program, target), program, target)
        times = _with_reuse_stalls(times, program, target)
        schedule = one_device_schedule(program, target, times)
        schedule.notes.extend(self.rate_notes(program, target) + _runtime_note(program))
        return schedule

    def rate_notes(self, program: Program, target: CpuTarget) -> list[str]:
        """What the report must say about the rates it took: each contraction dtype the target has no
        matrix rate for and the rate it ran at instead (a host file without fp16 timed fp16 matmuls at
        its bf16 rate and said so nowhere; PyTorch's fp16 GEMM on a CPU without fp16 arithmetic ran
        ~100x slower than that), and the options this CPU has no rate for (--tf32, --sparse)."""
        notes = []
        for dtype in _contraction_dtypes(program):
            rate = self.matmul_rate(target, dtype, program.options)
            if rate.dtype == dtype.value or not rate.runs_as:
                continue
            why = (f"{dtype.value} was not calibrated on this host (recalibrate: calibrate measures fp16 GEMMs)"
                   if target.vendor == "host" and dtype is DType.FP16 else
                   f"{dtype.value} was not calibrated on this host" if target.vendor == "host" else
                   f"{target.name} lists no {dtype.value} matrix rate")
            notes.append(f"{rate.runs_as}: {dtype.value} matmuls are timed at the {rate.dtype} rate "
                         f"({rate.flops_per_s / 1e9:.4g} GFLOP/s); {why}")
        options = program.options
        if options.allow_tf32 and "tf32" not in target.matrix_flops:
            notes.append(f"TF32 (--tf32) changes nothing on {target.name}: a CPU has no TF32 rate, fp32 matmuls "
                         "run at its fp32 rate")
        if options.sparse and not target.sparse_matrix_flops:
            notes.append(f"2:4 sparsity (--sparse) changes nothing on {target.name}: it lists no sparse matrix "
                         "rate, matmuls run at the dense rate")
        return notes

    @staticmethod
    def _with_fresh_pages(kt: KernelTime, kernel: Kernel, program: Program, target: CpuTarget) -> KernelTime:
        """The kernel's time plus the page faults of its large allocations, host time on top of the
        roofline (the first touch faults before the kernel's loads and stores can stream)."""
        fresh = fresh_page_time(kernel, program.table, target)
        if fresh <= 0.0 or kt.time_s <= 0.0:
            return kt
        overhead = kt.overhead_s + fresh
        note = "; ".join(x for x in (kt.note, "fresh pages") if x)
        return replace(kt, time_s=kt.time_s + fresh, overhead_s=overhead, note=note,
                       bound=bound_of(kt.compute_s, kt.memory_s, kt.comm_s, overhead))

    def bandwidth(self, target: CpuTarget, nbytes: float) -> float:
        """Working sets that fit in the resident part of the last-level cache stream from it, when
        its bandwidth is known."""
        if (target.onchip_bandwidth and target.onchip_capacity
                and nbytes <= target.onchip_capacity * CACHE_RESIDENT_FRACTION):
            return target.onchip_bandwidth
        return target.memory_bandwidth

    def matmul_rate(self, target: CpuTarget, dtype: DType, options: TimingOptions) -> Rate:
        """The catalog's matrix peak (AMX for bf16/int8 where present, else SIMD FMA); AMX derived
        from cores x ops/cycle x clock only if the target lists no rate for the dtype."""
        rate = matrix_rate(target, dtype, options)
        if target.amx_ops_per_cycle and dtype.value in AMX_OPS_PER_BF16_OP:
            if dtype.value not in target.matrix_flops:
                amx = target.cores * target.amx_ops_per_cycle * AMX_OPS_PER_BF16_OP[dtype.value] * target.clock_hz
                return Rate(amx, dtype.value, "AMX tiles")
            return Rate(rate.flops_per_s, rate.dtype, "AMX tiles")
        return rate

    def conv_efficiency(self, kernel: Kernel, table: CostTable, target: CpuTarget) -> float:
        """The direct-convolution plateau for this kernel size times :func:`conv_factors` (the
        small-problem ramp, and the skinny factor when the output has few positions); ``conv_curve``
        is fitted over the same factors, so the model gives the calibration's convolutions back."""
        w = kernel.anchor.inputs[1]
        area = 1
        if w is not None:
            for d in table.shapes[w][2:]:
                area *= d
        positions = conv_gemm(table, kernel.anchor).m if int(kernel.anchor.attrs.get("groups", 1)) == 1 else None
        eff = interpolate(target.conv_curve, float(area), target.matmul_efficiency)
        eff *= conv_factors(target.matmul_curve, target.matmul_efficiency, target.matmul_skinny_curve,
                            kernel.cost.flops, positions)
        return max(eff, MIN_MATMUL_EFFICIENCY)

    def kernel_overhead(self, target: CpuTarget, program: Program) -> float:
        """Dispatch, plus the eager per-op host glue when a whole model runs eagerly."""
        return target.launch_overhead + ((target.eager_op_overhead or 0.0) if _eager(program) else 0.0)

    def vector(self, kernel: Kernel, program: Program, target: CpuTarget) -> KernelTime:
        """The vector units' time, plus a constant pad's per-row and per-plane copy costs where the
        target measured them (:func:`pad_rows`, :func:`pad_planes`)."""
        kt = super().vector(kernel, program, target)
        rows = pad_rows(kernel, program.table)
        extra = rows * (target.pad_row_time or 0.0) + pad_planes(kernel, program.table) * (target.pad_plane_time or 0.0)
        if not extra:
            return kt
        compute = kt.compute_s + extra
        return replace(kt, compute_s=compute, time_s=kt.time_s + extra, note="; ".join(
            x for x in (kt.note, "pad rows") if x), bound=bound_of(compute, kt.memory_s, kt.comm_s, kt.overhead_s))

    def gemm(self, kernel: Kernel, g: Gemm, program: Program, target: CpuTarget) -> KernelTime:
        if kernel.kind == "conv" and is_depthwise(program.table, kernel.anchor) \
                and target.depthwise_tap_time is not None:
            return self.depthwise(kernel, program, target)
        if kernel.kind == "conv" and is_depthwise(program.table, kernel.anchor) \
                and target.vector_op_flops.get("conv_depthwise"):
            # a depthwise layer runs at its measured rate (input elements/s), not the GEMM curve
            return self.vector(kernel, program, target)
        if g.group_rows:   # eager grouped GEMM: one GEMM per reached expert, each at its own efficiency
            parts = [(2 * r * g.n * g.k, min(r, g.n)) for r in g.group_rows]
            return self._contraction(kernel, g.dtype, None, program, target, parts)
        if target.matmul_grid and kernel.kind == "matmul" and g.dtype is DType.FP32:
            eff = grid_item_efficiency(target, g) * unaligned_factor(target, g)
            return self._contraction(kernel, g.dtype, None, program, target, efficiency=eff,
                                     extra_s=batched_item_time(target, g))
        return self._contraction(kernel, g.dtype, min(g.m, g.n), program, target)

    def depthwise(self, kernel: Kernel, program: Program, target: CpuTarget) -> KernelTime:
        """oneDNN's depthwise path (:mod:`narrowpipe.calibration.depthwise_sweep`): the measured
        set-up per call as host overhead; the blocked-layout reorders per input and output element
        and the multiply-adds per output tap as compute; the rest of a fused kernel on the vector
        units; all against the kernel's traffic."""
        table, node = program.table, kernel.anchor
        x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
        assert x is not None and w is not None
        out = math.prod(table.shapes[y])
        elements = math.prod(table.shapes[x]) + out
        taps = out * math.prod(table.shapes[w][1:])
        rate = vector_rate(target, DType.FP32).flops_per_s
        compute = (elements * (target.depthwise_element_time or 0.0) + taps * (target.depthwise_tap_time or 0.0)
                   + max(kernel.cost.flops - table.costs[node].flops, 0) / rate)
        overhead = self.kernel_overhead(target, program) + (target.depthwise_call_time or 0.0)
        bw = self.bandwidth(target, kernel.cost.bytes)
        return roofline(compute, memory_time(target, kernel.cost.bytes, bw), 0.0, overhead, "SIMD",
                        peak_flops=rate, flops=kernel.cost.flops, nbytes=kernel.cost.bytes, bandwidth=bw,
                        note="oneDNN depthwise")

    def attention(self, kernel: Kernel, program: Program, target: CpuTarget) -> KernelTime:
        """At the measured fused-attention curve where the target has one (softmax included; a
        causal one skips whole key blocks past the diagonal, a windowed one also those before its
        window: :func:`.common.attention_block_fraction`), else as a contraction on the GEMM curve."""
        q = kernel.anchor.inputs[0]
        dtype = q.type.dtype if q is not None else DType.FP32
        if not target.attention_curve:
            return self._contraction(kernel, dtype, None, program, target)
        s = attention_shape(program.table, kernel)
        flops = kernel.cost.flops * attention_block_fraction(s.causal, s.window, s.sq, s.sk, CPU_ATTENTION_KV_BLOCK,
                                                             CPU_ATTENTION_KV_BLOCK)
        rate = self.matmul_rate(target, dtype, program.options)
        eff = max(interpolate(target.attention_curve, float(s.sk), target.matmul_efficiency), MIN_MATMUL_EFFICIENCY)
        bw = self.bandwidth(target, kernel.cost.bytes)
        return roofline(flops / (rate.flops_per_s * eff), memory_time(target, kernel.cost.bytes, bw), 0.0,
                        self.kernel_overhead(target, program), "SIMD FMA", peak_flops=rate.flops_per_s,
                        flops=kernel.cost.flops, nbytes=kernel.cost.bytes, bandwidth=bw, note="fused attention")

    def _contraction(self, kernel: Kernel, dtype: DType, min_mn: int | None, program: Program,
                     target: CpuTarget, parts: list[tuple[int, int]] | None = None,
                     efficiency: float | None = None, extra_s: float = 0.0) -> KernelTime:
        """FLOPs at the matrix rate and the GEMM (or direct-convolution) efficiency, plus
        transcendentals and ``extra_s`` of compute, against traffic from DRAM or the LLC. ``parts``
        (FLOPs, smaller side) splits a grouped GEMM into its experts' GEMMs; ``efficiency``, when
        given, is the GEMM's own."""
        rate = self.matmul_rate(target, dtype, program.options)
        if efficiency is not None:
            compute = kernel.cost.flops / (rate.flops_per_s * efficiency)
        elif parts:
            compute = sum(f / (rate.flops_per_s * matmul_efficiency(target, f, mn)) for f, mn in parts)
        else:
            eff = matmul_efficiency(target, kernel.cost.flops, min_mn)
            if kernel.kind == "conv" and target.conv_curve:
                eff = self.conv_efficiency(kernel, program.table, target)
            compute = kernel.cost.flops / (rate.flops_per_s * eff)
        compute += transcendental_time(kernel, program.table, target) + extra_s
        bw = self.bandwidth(target, kernel.cost.bytes)
        mem = memory_time(target, kernel.cost.bytes, bw)
        unit = "AMX" if rate.note == "AMX tiles" else "SIMD FMA"
        return roofline(compute, mem, 0.0, self.kernel_overhead(target, program), unit, peak_flops=rate.flops_per_s,
                        flops=kernel.cost.flops, nbytes=kernel.cost.bytes, bandwidth=bw, note=rate.note)


def conv_factors(matmul_curve: tuple[tuple[float, float], ...], plateau: float,
                 skinny_curve: tuple[tuple[float, float], ...], flops: float, positions: int | None) -> float:
    """What a dense convolution's kernel-size efficiency is multiplied by: the GEMM curve's ramp for
    small problems (dispatch and blocking overheads do not depend on the algorithm), and, given its
    output ``positions`` (the implicit GEMM's M), the skinny-GEMM curve there relative to the curve's
    widest point: few positions (late stages at batch 1) behave like skinny GEMMs, many do not. The
    curve is measured at N = K = 2048 with cold weights, so it is read by positions, never by output
    channels, and relative to its end (on the Xeon VM it reads 0.34 at M = 64 and 0.63 at 512: read
    at the output channels, or absolutely, it put ResNet-50's convolutions at 2-3x their time)."""
    ramp = min(1.0, interpolate(matmul_curve, flops, plateau) / plateau) if matmul_curve and plateau > 0 else 1.0
    if not skinny_curve or positions is None:
        return ramp
    return ramp * min(1.0, interpolate(skinny_curve, float(max(positions, 1)), 1.0) / skinny_curve[-1][1])


def _contraction_dtypes(program: Program) -> list[DType]:
    """The compute dtypes of the program's matmul, convolution and attention kernels, in order of
    first use."""
    seen: dict[DType, None] = {}
    for kernel in program.kernels:
        if kernel.is_free:
            continue
        if kernel.kind == "attention":
            q = kernel.anchor.inputs[0] if kernel.anchor.inputs else None
            if q is not None:
                seen[q.type.dtype] = None
            continue
        for g in kernel_gemms(program.table, kernel):
            seen[g.dtype] = None
    return list(seen)


def _runtime_note(program: Program) -> list[str]:
    """Which runtime the times are of, for an ONNX file: this model and its calibration are eager
    PyTorch's (its kernels, its per-op host costs), while an ONNX file usually runs in onnxruntime,
    which fuses ops and has its own kernels and dispatch (QA, one thread: light_resnet50 measured 76.8
    ms in onnxruntime against 127 ms predicted). Nothing is fitted to onnxruntime: the report says so."""
    if program.table.graph.meta.get("source") != "onnx":
        return []
    how = "op by op, one kernel per op, with its per-op host costs" if _eager(program) else \
        f"with its kernels, fused as --fusion {program.options.fusion}"
    return [f"runtime modelled: PyTorch ({how}), not onnxruntime, which fuses ops and runs its own "
            "kernels and dispatch: an onnxruntime run of this file may be faster than predicted"]


def _eager(program: Program) -> bool:
    """A whole model run eagerly, op by op (what pays the host's per-op and per-module costs)."""
    return program.options.eager_overhead and program.options.fusion == "none"


def _with_module_calls(times: list[KernelTime], program: Program, target: CpuTarget) -> list[KernelTime]:
    """An eager run's ``nn.Module`` calls (the graph's ``module_calls``, recorded by the torch
    frontend) at the target's cost per call, and every host call's (kernel or module call) cold-state
    cost (:func:`cold_call_time`), spread evenly over the launched kernels: the calls wrap the ops,
    and no one kernel owns them."""
    calls = int(program.table.graph.meta.get("module_calls", 0) or 0)
    launched = [i for i, t in enumerate(times) if t.time_s > 0.0]
    if not (launched and _eager(program)):
        return times
    total = calls * (target.eager_module_call_overhead or 0.0) + (calls + len(launched)) * cold_call_time(
        target, program.memory_required)
    if total <= 0.0:
        return times
    share = total / len(launched)
    out = list(times)
    for i in launched:
        kt = out[i]
        overhead = kt.overhead_s + share
        out[i] = replace(kt, time_s=kt.time_s + share, overhead_s=overhead,
                         bound=bound_of(kt.compute_s, kt.memory_s, kt.comm_s, overhead))
    return out


def _with_evicted_calls(times: list[KernelTime], program: Program, target: CpuTarget) -> list[KernelTime]:
    """An eager run's kernels with the host stall after the traffic since their op last ran in place
    of the one their own calibration loop included (:func:`.host_stalls.evicted_call_time` at
    :func:`.host_stalls.bytes_since_own_call`), as host time; a kernel's host time never goes below
    zero. The first launched kernel follows the caller, and keeps its time."""
    if not (_eager(program) and target.eager_evicted_call_overhead):
        return times
    out = list(times)
    since = bytes_since_own_call(program.kernels, program.table, [t.time_s > 0.0 for t in times])
    first = True
    for i, (kernel, kt) in enumerate(zip(program.kernels, times)):
        if kt.time_s <= 0.0:
            continue
        if not first:
            overhead = max(0.0, kt.overhead_s + evicted_call_time(target, since[i], kernel.cost.bytes))
            if overhead != kt.overhead_s:
                out[i] = replace(kt, time_s=kt.time_s + overhead - kt.overhead_s, overhead_s=overhead,
                                 bound=bound_of(kt.compute_s, kt.memory_s, kt.comm_s, overhead))
        first = False
    return out


def _with_reuse_stalls(times: list[KernelTime], program: Program, target: CpuTarget) -> list[KernelTime]:
    """An eager run's kernels plus the stall of re-reading inputs that the traffic since their last
    touch pushed out of the caches (:mod:`.reuse`), as memory time on top of the kernel's time: the
    measured stall adds to a kernel's work rather than overlapping it."""
    if not (_eager(program) and target.evicted_read_bandwidth and target.evicted_read_curve):
        return times
    launched = [t.time_s > 0.0 for t in times]
    reads = input_reuse(program.kernels, program.table, float(program.memory_required), launched)
    out = list(times)
    for i, (kernel, kt) in enumerate(zip(program.kernels, times)):
        stall = reuse_stall_time(target, reads[i], kernel.cost.bytes) if launched[i] else 0.0
        if stall > 0.0:
            memory = kt.memory_s + stall
            out[i] = replace(kt, time_s=kt.time_s + stall, memory_s=memory,
                             bound=bound_of(kt.compute_s, memory, kt.comm_s, kt.overhead_s))
    return out


def cold_call_time(target: CpuTarget, footprint: float) -> float:
    """Seconds each host call of an eager forward pays because its state went cold since the op last
    ran: the target's fully-cold cost times the fraction its curve gives for the bytes touched in
    between, the forward's ``footprint`` (weights plus the peak of live activations, the program's
    ``memory_required``: every op runs once per forward, so one forward lies between two runs of
    it). Without a curve, all of it once the footprint exceeds the resident part of the last-level
    cache (none where that is unknown)."""
    cold = target.eager_cold_call_overhead or 0.0
    if cold <= 0.0:
        return 0.0
    if target.eager_cold_call_curve:
        return cold * interpolate(target.eager_cold_call_curve, max(footprint, 1.0), 1.0)
    cache = target.onchip_capacity
    return cold if cache and footprint > cache * CACHE_RESIDENT_FRACTION else 0.0


def pad_rows(kernel: Kernel, table: CostTable) -> int:
    """The contiguous runs a constant pad copies its input in: the input's elements over the length
    of the run below its innermost padded dim (a padded last dim: one run per row). 0 for a kernel
    that is not a pad, and for a pad that pads nothing (PyTorch then clones the input in one pass)."""
    src, padded = _constant_pad_dims(kernel, table)
    return math.prod(src) // max(math.prod(src[padded[-1]:]), 1) if padded else 0


def pad_planes(kernel: Kernel, table: CostTable) -> int:
    """The outer-loop steps of a constant pad of two or more dims: the input's elements over those
    from its second innermost padded dim in (an NCHW input padded in H and W: N x C). 0 for a pad of
    one dim, whose outer dims merge into the copy's 2-D loop."""
    src, padded = _constant_pad_dims(kernel, table)
    return math.prod(src) // max(math.prod(src[padded[-2]:]), 1) if len(padded) >= 2 else 0


def _constant_pad_dims(kernel: Kernel, table: CostTable) -> tuple[tuple[int, ...], list[int]]:
    """A constant pad's input shape and padded dims; no dims for any other kernel, for a pad whose
    rank changes, and for pads computed from an index map (reflect, replicate, circular)."""
    node = kernel.anchor
    if node.op is not Op.PAD or not node.inputs or node.inputs[0] is None or not node.outputs:
        return (), []
    source = f"{node.source.op if node.source else ''} {node.attrs.get('mode', '')}".lower()
    # those pads compute every output element from an index map, no interior copy (ONNX names
    # replicate "edge" and circular "wrap")
    if any(mode in source for mode in ("reflect", "replicat", "circular", "edge", "wrap")):
        return (), []
    src, dst = tuple(table.shapes[node.inputs[0]]), table.shapes[node.outputs[0]]
    if len(src) != len(dst):
        return (), []
    return src, [d for d in range(len(src)) if src[d] != dst[d]]
