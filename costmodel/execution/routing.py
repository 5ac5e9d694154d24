"""Routing a kernel to the unit that runs it, once for every family.

Views and unmodeled nodes take no time; collectives go to the interconnect model on the target's
topology; fused attention, GEMM-shaped kernels (matmul, convolution) and everything else go to the
family's :class:`UnitTimes` hooks. A family says how its units run each kind; it never decides
which kind a kernel is.
"""

from __future__ import annotations

from typing import Any, Protocol

from ...ir import Op
from ..kernels import Kernel
from .collectives import collective_time
from .common import ZERO_TIME, KernelTime
from .gemm import Gemm, kernel_gemms
from .program import Program

__all__ = ["UnitTimes", "kernel_time"]


class UnitTimes(Protocol):
    """How one family's units time each kind of kernel on ``target``."""

    def gemm(self, kernel: Kernel, g: Gemm, program: Program, target: Any) -> KernelTime:
        ...

    def attention(self, kernel: Kernel, program: Program, target: Any) -> KernelTime:
        ...

    def vector(self, kernel: Kernel, program: Program, target: Any) -> KernelTime:
        ...


def _unmodeled(kernel: Kernel) -> bool:
    return any(n.op is Op.UNKNOWN for n in kernel.nodes)


def kernel_time(kernel: Kernel, program: Program, target: Any, units: UnitTimes) -> KernelTime:
    """The time of one kernel on ``target``, by the unit its kind runs on."""
    if kernel.is_free or _unmodeled(kernel):
        return ZERO_TIME
    if kernel.kind == "collective":
        return collective_time(kernel.anchor, kernel.cost, target, program.options.topology)
    if kernel.kind == "attention":
        return units.attention(kernel, program, target)
    gemms = kernel_gemms(program.table, kernel)
    if gemms and min(gemms[0].batch, gemms[0].m, gemms[0].n, gemms[0].k) > 0:
        return units.gemm(kernel, gemms[0], program, target)
    # an empty GEMM (a MoE expert group no row reaches at this binding) has no tiles to run: its
    # kernel is what remains, memory traffic and epilogue, on the vector units
    return units.vector(kernel, program, target)
