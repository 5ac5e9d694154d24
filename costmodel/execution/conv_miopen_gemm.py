"""MIOpen's GEMM form of a 1x1 stride-2 forward convolution: one GEMM between two layout transposes.

Why: MIOpen 1.x has no implicit-GEMM convolution, and its direct assembly 1x1 kernel of the time
(ConvAsm1x1U) runs stride 1 only. A 1x1 stride-2 layer (ResNet's projection shortcuts and
downsampling 1x1s) runs MIOpen's GEMM algorithm (``ConvolutionFwdAlgoGEMM``, which DeepBench
names for most of MI25's 1x1 stride-2 rows), whose path for an unpadded 1x1 filter at stride 2
(src/ocl/convolutionocl.cpp, '1x1 u2xv2'; in 1.3.0 for fp32 tensors, an unpadded 1x1 filter, no
dilation and a 2 x 2 stride) is:

1. ``transpose_NCHW2CNHW`` copies the input's sampled positions into a workspace: it reads the
   rows the stride samples (every other row; within a row the skipped columns share the memory
   sectors) and writes a quarter of the input;
2. one GEMM (output channels x input channels) x (input channels x every image's positions);
3. ``transpose_CNHW2NCHW`` reads the GEMM's output and writes y.

Two more kernels and their bytes than an implicit GEMM, which the model otherwise runs: modelled
as implicit GEMMs, MI25's 1x1 stride-2 forward rows were 24-34% (median) too fast.

Tried and left out: the stride-1 form (one strided-batched GEMM per image) moves MI25's 1x1 rows
by 2 points at most, and the data gradient's forms (zero fill, transposes; per-image GEMMs) put
MI25's 1x1 data gradients, already 0-22% slow, a further 4-16% slower: MIOpen's backward 1x1
kernels, which the model's implicit GEMM stands for, are faster than its GEMM path.
"""

from __future__ import annotations

from ...ir import DType, Node
from ..interpreter import CostTable
from ..sizes import value_bytes
from .gemm import Gemm

__all__ = ["miopen_1x1_stride2_gemm"]


def miopen_1x1_stride2_gemm(table: CostTable, node: Node, g: Gemm) -> tuple[Gemm, int] | None:
    """(the GEMM on the transposed workspace, the transposes' bytes) of MIOpen's path for an
    unpadded 1x1 stride-2 forward convolution; None for any other convolution."""
    a = node.attrs
    x, w = node.inputs[0], node.inputs[1]
    # MIOpen 1.3 builds this path for miopenFloat tensors only (its MIOpenGEMM kernels are fp32)
    if (x is None or w is None or a.get("role") or a.get("transposed") or int(a.get("groups", 1)) != 1
            or x.type.dtype is not DType.FP32):
        return None
    ws, xs, ys = table.shapes[w], table.shapes[x], table.shapes[node.outputs[0]]
    if (len(ws) != 4 or tuple(ws[2:]) != (1, 1) or any(int(p) for p in a.get("padding", (0,)))
            or {int(s) for s in a.get("stride", (1,))} != {2}):
        return None
    e = g.dtype.bits // 8
    n, positions = ys[0], ys[2] * ys[3]
    x_t, y_t = n * xs[1] * positions * e, value_bytes(table, node.outputs[0])   # the CNHW workspaces
    gemm = Gemm(1, n * positions, ws[0], ws[1], g.dtype, x_t, g.b_bytes, y_t, g.flops)
    # read x's sampled rows, write x_t; read the GEMM's CNHW output, write y
    return gemm, value_bytes(table, x) // 2 + x_t + y_t + value_bytes(table, node.outputs[0])
