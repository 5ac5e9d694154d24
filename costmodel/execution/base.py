"""What the matrix-unit families (GPU, TPU) share: routing each kernel to its unit.

A family model says how a GEMM and a fused attention run on its matrix units; collectives go to the
interconnect model and everything else to the vector units, the same way for every family.
"""

from __future__ import annotations

from typing import Any

from ..interpreter import CostTable
from ..kernels import Kernel
from .collectives import collective_time
from .common import KernelTime, TimingOptions
from .gemm import Gemm, kernel_gemms
from .vector import vector_kernel_time

__all__ = ["MatrixUnitModel"]


class MatrixUnitModel:
    family = ""
    default_fusion = "full"
    vector_unit = "vector units"

    def time_kernel(self, kernel: Kernel, table: CostTable, target: Any, options: TimingOptions) -> KernelTime:
        if kernel.kind == "collective":
            return collective_time(kernel.anchor, kernel.cost, target)
        if kernel.kind == "attention":
            return self._attention(kernel, table, target, options)
        gemms = kernel_gemms(table, kernel)
        if gemms:
            return self._gemm(kernel, gemms[0], target, options)
        return vector_kernel_time(kernel, target, self.vector_unit, target.launch_overhead, table=table)

    def _gemm(self, kernel: Kernel, g: Gemm, target: Any, options: TimingOptions) -> KernelTime:
        raise NotImplementedError

    def _attention(self, kernel: Kernel, table: CostTable, target: Any, options: TimingOptions) -> KernelTime:
        raise NotImplementedError
