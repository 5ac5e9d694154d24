"""Non-matrix kernels (elementwise chains, reductions, normalizations, copies, gathers, sorts) on
a target's vector units: FLOPs at the vector rate plus transcendentals on the special-function
units, against the kernel's external traffic at achievable memory bandwidth."""

from __future__ import annotations

from ...backends import Target
from ..kernels import Kernel
from .common import KernelTime, memory_time, roofline, transcendental_rate, vector_rate

__all__ = ["vector_kernel_time"]


def vector_kernel_time(kernel: Kernel, target: Target, unit: str, overhead_s: float,
                       *, bandwidth: float | None = None) -> KernelTime:
    out = kernel.anchor.outputs[0] if kernel.anchor.outputs else None
    dtype = out.type.dtype if out is not None else None
    from ...ir import DType
    rate = vector_rate(target, dtype if dtype is not None and dtype.is_float else DType.FP32)
    c = kernel.cost
    compute = c.flops / rate.flops_per_s if c.flops else 0.0
    if c.transcendentals:
        compute += c.transcendentals / transcendental_rate(target)
    bw = target.memory_bandwidth if bandwidth is None else bandwidth
    mem = memory_time(target, c.bytes, bw)
    return roofline(compute, mem, 0.0, overhead_s, unit, peak_flops=rate.flops_per_s, flops=c.flops,
                    nbytes=c.bytes, bandwidth=bw, note=rate.note)
