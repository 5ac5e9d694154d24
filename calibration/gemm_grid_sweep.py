"""The GEMM grid ``calibrate`` measures on the CPU: every combination of a few M, N and K sizes.

Why a grid: the square-GEMM curve by FLOPs and one skinny curve (N = K = 2048) missed a
64x3072x768 GEMM by 20%: the BLAS's packing and blocking costs depend on each dim. The sizes span
decode (M = 1) to prompt-sized row counts and the hidden and MLP widths of common layers; they are
spaced about 2-5x apart so log-space interpolation between them (:mod:`narrowpipe.costmodel.execution.
gemm_grid`) stays close. None of them is a dim of the validation's GEMMs: not the held-out per-op
shapes (:mod:`.validate`), nor the end-to-end validation models' widths (768, 3,072, 2,304, 576,
1,536, 512, 2,048, 384, 192) or row counts at 128 tokens (128, 1,024, 197, 1,576), so every
validation GEMM is interpolated, as an unseen model's would be. Weights are cold (a forward pass
reads each layer's weights once), the activations hot. About 175 shapes, 20-30 s on one core.
"""

from __future__ import annotations

from .measurement import Case
from .sweeps import ColdPool, gemm_case

__all__ = ["GRID_M", "GRID_NK", "gemm_grid_cases"]

#: Rows (tokens x batch, or output positions): decode to a prompt batch.
GRID_M = (1, 4, 16, 48, 160, 480, 1200)
#: Output and reduction widths: narrow heads to MLP widths.
GRID_NK = (64, 320, 1280, 2560, 3584)


def gemm_grid_cases(pool: ColdPool, ms: tuple[int, ...] = GRID_M, nks: tuple[int, ...] = GRID_NK) -> list[Case]:
    """fp32 ``torch.mm`` at every (M, N, K) of the grid: kind ``gemm_grid``, weights cold (from ``pool``)."""
    return [gemm_case("gemm_grid", "fp32", m, n, k, pool) for n in nks for k in nks for m in ms]
