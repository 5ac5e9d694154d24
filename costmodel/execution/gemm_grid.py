"""GEMM efficiency by shape from a measured (M, N, K) grid.

A BLAS GEMM's achieved rate depends on each dim, not only on its FLOPs: K sets how long a packed
panel is reused per load, N how many weight panels are packed (and, with cold weights, streamed from
memory), M how many rows share each packed panel. A 64x3072x768 GEMM and a 64x2048x2048 one do
not run at one efficiency, so ``calibrate`` measures a small grid over M, N and K and a GEMM's
efficiency is interpolated between the eight grid points around it: linear in log M, log N and
log K (sizes are spaced geometrically, and efficiency changes by the factor a dim grows), flat
beyond the grid's edges (the nearest measured size stands for a larger or smaller one).
"""

from __future__ import annotations

import bisect
import math
from functools import lru_cache

__all__ = ["grid_efficiency", "grid_axes"]

Grid = tuple[tuple[int, int, int, float], ...]


@lru_cache(maxsize=8)
def _indexed(grid: Grid) -> tuple[tuple[tuple[int, ...], ...], dict[tuple[int, int, int], float]]:
    """The axes and a shape -> efficiency table, built once per grid (a model times thousands of GEMMs)."""
    return grid_axes(grid), {p[:3]: p[3] for p in grid}


def grid_axes(grid: Grid) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The sorted M, N and K values the grid was measured at."""
    return (tuple(sorted({p[0] for p in grid})), tuple(sorted({p[1] for p in grid})),
            tuple(sorted({p[2] for p in grid})))


def _bracket(axis: tuple[int, ...], x: float) -> tuple[int, int, float]:
    """(lower index, upper index, weight of the upper) of ``x`` on ``axis`` in log space, clamped."""
    if x <= axis[0]:
        return 0, 0, 0.0
    if x >= axis[-1]:
        return len(axis) - 1, len(axis) - 1, 0.0
    i = bisect.bisect_right(axis, x)
    lo, hi = axis[i - 1], axis[i]
    return i - 1, i, (math.log(x) - math.log(lo)) / (math.log(hi) - math.log(lo))


def grid_efficiency(grid: Grid, m: int, n: int, k: int) -> float:
    """Efficiency of an M x N x K GEMM: trilinear in (log M, log N, log K) between the grid points
    around it, the nearest edge value outside the grid. ``grid`` holds every combination of its
    axes (the target schema checks that)."""
    axes, table = _indexed(grid)
    brackets = [_bracket(a, float(max(x, 1))) for a, x in zip(axes, (m, n, k))]
    eff = 0.0
    for corner in range(8):
        weight = 1.0
        idx = []
        for d, (lo, hi, t) in enumerate(brackets):
            upper = (corner >> d) & 1
            weight *= t if upper else 1.0 - t
            idx.append(axes[d][hi if upper else lo])
        if weight:
            eff += weight * table[(idx[0], idx[1], idx[2])]
    return eff
