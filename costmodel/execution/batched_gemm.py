"""A batched fp32 GEMM on the CPU as the BLAS runs it: a loop of small GEMMs inside one call.

``torch.bmm`` and a batched ``matmul`` on the CPU hand the whole batch to MKL/oneDNN in one call,
which runs it item by item (a batch of small GEMMs): each item runs at the rate of a GEMM of its
own (M, N, K), and the call's dispatch is paid once. Read at the batch's total FLOPs and at
min(M, N) on the skinny curve instead (the shared ``matmul_efficiency``, which GPU targets use),
a 12 x 128x128x64 batch came out at 2.1x its time on the 2-core Xeon VM (held-out per-op
``bmm`` cases +96% to +161%, ``benchmarks/results/cpu_validate_2026-12-04_2026.md``); item by item on
the grid, 8 x 256x64x256 reads 436 us predicted against 422-524 us measured (weights hot to cold).
``calibrate`` measures a few batches (:mod:`narrowpipe.calibration.bmm_sweep`) and keeps what each
item costs beyond its grid time (``bmm_item_time``: per-item loop and pointer set-up; 0 where the
items ran no slower than their grid points).
"""

from __future__ import annotations

from ...backends import CpuTarget
from ...backends.defaults import MIN_MATMUL_EFFICIENCY
from .gemm import Gemm
from .gemm_grid import grid_efficiency

__all__ = ["grid_item_efficiency", "batched_item_time"]


def grid_item_efficiency(target: CpuTarget, g: Gemm) -> float:
    """The fraction of the matrix peak one item (or a plain GEMM, batch 1) runs at: the grid's
    efficiency at the item's own (M, N, K), never below the floor every model uses."""
    return max(grid_efficiency(target.matmul_grid, g.m, g.n, g.k), MIN_MATMUL_EFFICIENCY)


def batched_item_time(target: CpuTarget, g: Gemm) -> float:
    """Seconds a batched GEMM's items cost beyond their grid time: ``bmm_item_time`` per item; 0 for
    a plain GEMM (batch 1, which the grid measured as it is) and where the target has no such term."""
    return g.batch * (target.bmm_item_time or 0.0) if g.batch > 1 else 0.0
