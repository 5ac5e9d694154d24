"""The GEMM grid ``calibrate`` measures on the CPU: every combination of a few M, N and K sizes.

Why a grid: the square-GEMM curve by FLOPs and one skinny curve (N = K = 2048) missed a
64x3072x768 GEMM by 20%: the BLAS's packing and blocking costs depend on each dim. The sizes span
decode (M = 1) to prompt-sized row counts and the hidden and MLP widths of common layers; they are
spaced about 2-5x apart so log-space interpolation between them (:mod:`narrowpipe.costmodel.execution.
gemm_grid`) stays close. None of them is a dim of the validation's GEMMs: not the held-out per-op
shapes (:mod:`.validate`), nor the end-to-end validation models' widths (768, 3,072, 2,304, 576,
1,536, 512, 2,048, 384, 192) or row counts at 128 tokens (128, 1,024, 197, 1,576), so every
validation GEMM is interpolated, as an unseen model's would be. Weights are cold (a forward pass
reads each layer's weights once), the activations hot.

N reaches one point further than K: a vocabulary projection (GPT-2's 50,257 outputs, SmolLM2's
49,152, T5's 32,128) is far wider than any hidden or MLP width, and a BLAS runs it slower than
the 3584-wide point the grid otherwise ends at, which interpolation holds flat beyond its edge: on
the 2-core EPYC VM at one thread, K = 768 and M = 1024 ran at 96 GFLOP/s with N = 3584, 82 at 8192,
68 at 16384 and 66 at 32768 (M = 16: 34, 23, 28, 24), and GPT-2's 768 x 50,257 LM head took 166 ms
at 128 tokens where the 3584 point put it at 117 ms. Nor is ``WIDE_N`` a validation dim. About 210
shapes; its widest ones are long calls that take fewer turns (:data:`.rounds.LONG_CALL_SECONDS`).
"""

from __future__ import annotations

from .measurement import Case
from .sweeps import ColdPool, gemm_case

__all__ = ["GRID_M", "GRID_NK", "GRID_N", "WIDE_N", "gemm_grid_cases"]

#: Rows (tokens x batch, or output positions): decode to a prompt batch.
GRID_M = (1, 4, 16, 48, 160, 480, 1200)
#: Output and reduction widths: narrow heads to MLP widths.
GRID_NK = (64, 320, 1280, 2560, 3584)
#: Outputs of a vocabulary-sized projection (the grid's widest N).
WIDE_N = 16000
#: The output widths: the hidden and MLP widths, then a vocabulary's.
GRID_N = (*GRID_NK, WIDE_N)


def gemm_grid_cases(pool: ColdPool, ms: tuple[int, ...] = GRID_M, ns: tuple[int, ...] = GRID_N,
                    ks: tuple[int, ...] = GRID_NK) -> list[Case]:
    """fp32 ``torch.mm`` at every (M, N, K) of the grid: kind ``gemm_grid``, weights cold (from ``pool``)."""
    return [gemm_case("gemm_grid", "fp32", m, n, k, pool) for n in ns for k in ks for m in ms]
