"""The loss of a GEMM whose output rows are not aligned, measured as ``calibrate`` measures the grid.

Each pair is an fp32 ``torch.mm`` with aligned output rows (N a multiple of 8) and its twin one
column wider (N + 1: every row after the first starts mid-vector), weights cold as the grid's, M and
K fixed, the output growing from a quarter of a MiB to 16 MiB: the loss grows with the output's size
(:mod:`narrowpipe.costmodel.execution.unaligned_rows`). A pair's two GEMMs are cases of one sweep,
so each round measures them side by side. None of the widths is a validation model's.
"""

from __future__ import annotations

import statistics

from ..costmodel.execution.unaligned_rows import rows_aligned
from ..ir import DType
from .measurement import Case, Measurement
from .sweeps import ColdPool, gemm_case

__all__ = ["UNALIGNED_M", "UNALIGNED_K", "UNALIGNED_N", "unaligned_cases", "fit_unaligned_curve",
           "unaligned_source"]

_FP32 = DType.FP32.nbytes(1)

UNALIGNED_M = 160
UNALIGNED_K = 1280
#: The aligned widths; each is measured beside N + 1.
UNALIGNED_N = (400, 1600, 6400, 25600)


def unaligned_cases(pool: ColdPool, m: int = UNALIGNED_M, k: int = UNALIGNED_K,
                    ns: tuple[int, ...] = UNALIGNED_N) -> list[Case]:
    """Kind ``gemm_unaligned``: ``torch.mm`` at (m, n, k) and (m, n + 1, k) for each n."""
    cases = []
    for n in ns:
        assert rows_aligned(n, _FP32) and not rows_aligned(n + 1, _FP32), n
        for width in (n, n + 1):
            cases.append(gemm_case("gemm_unaligned", "fp32", m, width, k, pool))
    return cases


def fit_unaligned_curve(measurements: list[Measurement]) -> tuple[tuple[float, float], ...]:
    """(bytes of the unaligned output, its rate over its aligned twin's) for every measured pair,
    by output size; a ratio above 1 (noise: a wider row never helps) is taken as 1. Empty without
    a pair."""
    by_shape = {m.shape: m for m in measurements if m.kind == "gemm_unaligned" and m.seconds > 0}
    points = []
    for (m, n, k), aligned in sorted(by_shape.items()):
        if not rows_aligned(n, _FP32) or (m, n + 1, k) not in by_shape:
            continue
        wide = by_shape[(m, n + 1, k)]
        ratio = (wide.flops / wide.seconds) / (aligned.flops / aligned.seconds)
        points.append((float(m * (n + 1) * _FP32), round(min(ratio, 1.0), 4)))
    return tuple(sorted(points))


def unaligned_source(measurements: list[Measurement], curve: tuple[tuple[float, float], ...]) -> str:
    """The ``[sources]`` line of a fitted ``matmul_unaligned_curve``: the shapes it came from."""
    shapes = sorted({m.shape for m in measurements if m.kind == "gemm_unaligned"}, key=lambda s: s[1])
    return (f"measured: fp32 torch.mm at {', '.join('x'.join(map(str, s)) for s in shapes)} (M x N x K), weights "
            f"cold, each N + 1 GEMM's rate over its aligned twin's, by the bytes of its output (median ratio "
            f"{statistics.median(r for _, r in curve):.2f}; calibrate)")
