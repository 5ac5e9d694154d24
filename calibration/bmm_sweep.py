"""The batched GEMMs ``calibrate`` measures on the CPU, and the per-item cost fitted to them.

The CPU model runs a batched fp32 GEMM item by item at the GEMM grid's efficiency for the item's
shape (:mod:`narrowpipe.costmodel.execution.batched_gemm`); these batches measure what an item costs
beyond that (``bmm_item_time``). Each is ``torch.bmm`` of a hot (B, M, K) activation by a cold
(B, K, N) operand, cold as the grid's weights are (cycled through ``ColdPool``). No dim of theirs is a
dim of the validation's batched GEMMs (the held-out 12x128x128x64, 48x64x64x128, 8x256x64x256 of
:mod:`.validate`) or of the end-to-end models' widths and row counts
(``tests/calibration/test_gemm_grid_choice.py`` pins both), so the validation checks the mechanism
on shapes it was not fitted to.
"""

from __future__ import annotations

import dataclasses
import statistics

from ..backends import CpuTarget
from ..costmodel.analyze import analyze
from ..costmodel.interpreter import op_cost
from ..ir import DType, Graph, Op, TensorType, ValueKind
from .measurement import Case, Measurement
from .sweeps import ColdPool

__all__ = ["BMM_SHAPES", "bmm_cases", "bmm_graph", "fit_bmm_item_time", "with_bmm_item_time"]

#: (batch, M, N, K): score-like (N = M) and value-like (K = M) products of few to many items.
BMM_SHAPES = ((16, 80, 80, 40), (32, 40, 40, 80), (6, 320, 80, 320), (4, 160, 320, 160), (72, 24, 24, 40),
              (20, 160, 40, 160))

_ATTRS = {"lhs_contract": (2,), "rhs_contract": (1,), "lhs_batch": (0,), "rhs_batch": (0,)}


def bmm_cases(pool: ColdPool, shapes: tuple[tuple[int, int, int, int], ...] = BMM_SHAPES) -> list[Case]:
    """``torch.bmm`` at each shape: kind ``bmm``, the (B, K, N) operand cold (from ``pool``)."""
    import torch
    cases = []
    for b, m, n, k in shapes:
        a = torch.randn(b, m, k, device=pool.device)
        flat, copies = pool.weights("fp32", b * k, n)
        f32 = DType.FP32
        c = op_cost(Op.DOT, [TensorType(f32, (b, m, k)), TensorType(f32, (b, k, n))], [TensorType(f32, (b, m, n))],
                    _ATTRS)
        cases.append(Case("bmm", "fp32", (b, m, n, k), c.flops, c.bytes,
                          lambda a=a, flat=flat, b=b, k=k, n=n: torch.bmm(a, flat().view(b, k, n)),  # type: ignore[misc]
                          warmup=copies))
    return cases


def bmm_graph(b: int, m: int, n: int, k: int) -> Graph:
    """One batched GEMM ``[b, m, k] @ [b, k, n]`` (its right operand a graph input, as the cold one)."""
    g = Graph(f"bmm{b}x{m}x{n}x{k}")
    x = g.add_input("a", TensorType(DType.FP32, (b, m, k)))
    y = g.add_input("b", TensorType(DType.FP32, (b, k, n)), ValueKind.INPUT)
    g.set_outputs(g.add_node(Op.DOT, [x, y], [TensorType(DType.FP32, (b, m, n))], dict(_ATTRS)).outputs)
    return g


def fit_bmm_item_time(target: CpuTarget, measurements: list[Measurement]) -> float | None:
    """Seconds per item beyond the grid: the median over the measured batches of (measured minus
    the model's bare prediction without the term) over their items, never below zero; None without
    a grid or a batch to fit on."""
    bmms = [m for m in measurements if m.kind == "bmm" and m.seconds > 0]
    if not (bmms and target.matmul_grid):
        return None
    base = dataclasses.replace(target, bmm_item_time=None)
    residuals = []
    for m in bmms:
        b, mm, n, k = m.shape
        report = analyze(bmm_graph(b, mm, n, k), base, fusion="none", eager_overhead=False)
        assert report.time_s is not None
        residuals.append((m.seconds - report.time_s) / b)
    return max(0.0, statistics.median(residuals))


def with_bmm_item_time(target: CpuTarget, measurements: list[Measurement]) -> CpuTarget:
    """``target`` with ``bmm_item_time`` fitted, where its batches were measured."""
    item = fit_bmm_item_time(target, measurements)
    if item is None:
        return target
    shapes = ", ".join("x".join(map(str, m.shape)) for m in measurements if m.kind == "bmm")
    return dataclasses.replace(target, bmm_item_time=item, sources={
        **target.sources, "bmm_item_time": (
            f"measured: torch.bmm at {shapes} (B x M x N x K), the right operand cold, minus each item at the "
            "GEMM grid's efficiency for its shape and one dispatch, per item, median (calibrate)")})
