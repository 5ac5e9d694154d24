"""GEMM outputs whose rows do not start on an aligned boundary, as a CPU BLAS runs them.

A row-major M x N output has rows N x item-size bytes apart. When that is not a multiple of
``CPU_GEMM_ROW_ALIGN_BYTES`` (32), every row after the first starts mid-vector, and the microkernel's loads and
stores of its output tile straddle cache lines. Measured on the 2-core EPYC VM (one thread, torch
2.13's fp32 ``linear``, ``benchmarks/results/cpu_unaligned_gemm.md``): 128 x N x 768 ran at 69-74
GFLOP/s for N = 16000, 16008 and 16016, but 55-66 for N = 16001, 16002 and 16004, and GPT-2's LM head
(N = 50,257) at 56 against 74 for N = 50,304; odd M or K changed nothing (A and B are packed before
the microkernel reads them). The loss grows with the output's size: 1024 x 3073 x 768 (12 MiB of
output) -25%, 128 x 3073 x 768 (1.5 MiB) -13%, 16 x 16001 x 768 (1 MiB) none. So
``calibrate`` measures it as a curve over the output's bytes (``matmul_unaligned_curve``, from GEMMs
one column wider than an aligned twin), and a GEMM on the grid whose rows are unaligned runs at the
grid's efficiency times that curve.
"""

from __future__ import annotations

from ...backends import CpuTarget
from ...backends.defaults import CPU_GEMM_ROW_ALIGN_BYTES
from .common import interpolate
from .gemm import Gemm

__all__ = ["rows_aligned", "unaligned_factor"]


def rows_aligned(n: int, itemsize: int) -> bool:
    """Whether every row of a row-major output ``n`` elements wide starts on a ``CPU_GEMM_ROW_ALIGN_BYTES``
    boundary (the allocator aligns the first)."""
    return (n * itemsize) % CPU_GEMM_ROW_ALIGN_BYTES == 0


def unaligned_factor(target: CpuTarget, g: Gemm) -> float:
    """What the grid's efficiency for ``g`` is multiplied by: 1 for aligned rows or a target that
    did not measure the curve; else the curve at the bytes of one item's output."""
    curve = target.matmul_unaligned_curve
    itemsize = g.dtype.nbytes(1)
    if not curve or rows_aligned(g.n, itemsize):
        return 1.0
    return interpolate(curve, float(g.m * g.n * itemsize), 1.0)
