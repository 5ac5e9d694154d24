"""Non-matrix kernels (elementwise chains, reductions, normalizations, copies, gathers, sorts) on
a target's vector units: FLOPs at the vector rate plus transcendentals on the special-function
units, against the kernel's external traffic at achievable memory bandwidth."""

from __future__ import annotations

from ...backends import Target
from ...ir import TRANSCENDENTAL_OPS, DType, Node, Op
from ..interpreter import CostTable
from ..kernels import Kernel
from .common import KernelTime, memory_time, roofline, transcendental_rate, vector_rate
from .gemm import is_depthwise

__all__ = ["vector_kernel_time", "transcendental_time", "measured_op_time"]


def transcendental_time(kernel: Kernel, table: CostTable | None, target: Target, skip: int = 0) -> float:
    """Seconds of the kernel's transcendentals, at each function's own rate where the target has one
    (``skip``: transcendentals already timed by a measured per-op rate)."""
    if kernel.cost.transcendentals <= skip:
        return 0.0
    if table is None or not target.transcendental_flops:
        return (kernel.cost.transcendentals - skip) / transcendental_rate(target)
    total = 0.0
    measured = target.vector_op_flops
    for n in kernel.nodes:
        t = table.costs[n].transcendentals
        if t and not (measured and measured.get(n.op.value)):
            op = n.op.value if n.op in TRANSCENDENTAL_OPS else "exp"
            total += t / transcendental_rate(target, op)
    return total


def _rate_key(table: CostTable, n: Node) -> str:
    """The measured rate a node runs at: its op's, except a depthwise convolution's own, and an
    average pool's, which is a mean over its window (the measured ``pool`` rate is a windowed max
    pool, 100x slower than a mean per element on a CPU) where the target measured a mean."""
    if n.op is Op.CONV and is_depthwise(table, n):
        return "conv_depthwise"
    if n.op is Op.POOL and n.attrs.get("kind") == "avg":
        return "reduce_mean"
    return n.op.value


def measured_op_time(kernel: Kernel, table: CostTable | None, target: Target) -> tuple[float, int, int]:
    """Seconds of the kernel's nodes that have a measured per-op rate, and the FLOPs and
    transcendentals those nodes account for (to take out of the generic terms)."""
    rates = target.vector_op_flops
    if not rates or table is None:
        return 0.0, 0, 0
    seconds, flops, trans = 0.0, 0, 0
    for n in kernel.nodes:
        rate = rates.get(_rate_key(table, n))
        if rate and n.inputs and n.inputs[0] is not None:
            numel = 1
            for d in table.shapes[n.inputs[0]]:
                numel *= d
            seconds += numel / rate
            flops += table.costs[n].flops
            trans += table.costs[n].transcendentals
    return seconds, flops, trans


def vector_kernel_time(kernel: Kernel, target: Target, unit: str, overhead_s: float,
                       *, bandwidth: float | None = None, table: CostTable | None = None) -> KernelTime:
    out = kernel.anchor.outputs[0] if kernel.anchor.outputs else None
    dtype = out.type.dtype if out is not None else None
    rate = vector_rate(target, dtype if dtype is not None and dtype.is_float else DType.FP32)
    c = kernel.cost
    measured, m_flops, m_trans = measured_op_time(kernel, table, target)
    compute = measured + ((c.flops - m_flops) / rate.flops_per_s if c.flops > m_flops else 0.0)
    compute += transcendental_time(kernel, table, target, skip=m_trans)
    bw = target.memory_bandwidth if bandwidth is None else bandwidth
    mem = memory_time(target, c.bytes, bw)
    return roofline(compute, mem, 0.0, overhead_s, unit, peak_flops=rate.flops_per_s, flops=c.flops,
                    nbytes=c.bytes, bandwidth=bw, note=rate.note)
