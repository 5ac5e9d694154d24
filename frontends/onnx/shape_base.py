"""Shared pieces of the frontend's own output-shape rules: the context they read, symbolic
broadcasting, element counts, and "rank known, sizes not" results.

The rules (:mod:`.shape_rules`, :mod:`.shape_windows`, the contrib rules) return one
``(dtype, dims)`` per output, ``None`` for what they cannot tell (the caller keeps ONNX's answer),
and raise :class:`ShapeError` when the inputs cannot work together (matmul inner dims that differ).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ...errors import ShapeError
from ...ir import DType, Value
from .shapes import Bounded, OutSpec
from .symdims import dim_eq, dim_max, dim_mul

__all__ = ["RuleContext", "Dim", "rule_error", "broadcast", "numel", "length_of", "max_dim", "unknown_dims",
           "inputs_shapes"]

Dim = Any  # int | Sym | Poly


class RuleContext(Protocol):
    op_type: str
    opset: int
    name: str

    @property
    def file(self) -> str: ...   # read-only: NodeCx takes it from the model being lowered

    def attr(self, name: str, default: Any = None) -> Any: ...
    def input(self, i: int) -> Value | None: ...
    def known(self, i: int) -> np.ndarray | None: ...
    def shape(self, i: int) -> tuple[Any, ...] | None: ...
    def dtype(self, i: int) -> DType | None: ...
    def n_inputs(self) -> int: ...
    def n_outputs(self) -> int: ...


def rule_error(cx: RuleContext, reason: str) -> ShapeError:
    return ShapeError(reason, file=cx.file or None, node=cx.name, op=cx.op_type)


def broadcast(cx: RuleContext, shapes: list[tuple[Dim, ...]]) -> tuple[Dim, ...]:
    """Numpy-style broadcast of symbolic shapes; two different known sizes (neither 1) are an error."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for axis in range(rank):
        dims = [s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0]
        result: Dim = 1
        for d in dims:
            if isinstance(d, int) and d == 1:
                continue
            if isinstance(result, int) and result == 1:
                result = d
                continue
            same = dim_eq(result, d)
            if same:
                continue
            if isinstance(result, int) and isinstance(d, int):
                raise rule_error(cx, f"cannot broadcast shapes {[list(map(str, s)) for s in shapes]}: "
                               f"axis {axis} has sizes {result} and {d}")
            if isinstance(d, int):
                result = d  # a symbolic size must be 1 or equal to the known one
            elif not isinstance(result, int):
                result = dim_max(result, d)
        out.append(result)
    return tuple(out)


def length_of(cx: RuleContext, i: int) -> int | None:
    """The static length of 1-D input ``i`` (a shape or axes tensor whose values are unknown)."""
    s = cx.shape(i)
    if s is None or len(s) != 1 or not isinstance(s[0], int):
        return None
    return s[0]


def max_dim(shape: tuple[Dim, ...]) -> int | None:
    if not shape or not all(isinstance(d, int) for d in shape):
        return None
    return max(shape)


def unknown_dims(cx: RuleContext, rank: int | None, bound: Any = None) -> OutSpec | None:
    """Rank known, sizes depending on tensor values: each dim a bounded unknown."""
    if rank is None or rank < 0:
        return None
    return (None, tuple(Bounded(bound) for _ in range(rank)))


def inputs_shapes(cx: RuleContext, idx: range | list[int]) -> list[tuple[Dim, ...]] | None:
    shapes = []
    for i in idx:
        s = cx.shape(i)
        if s is None:
            return None
        shapes.append(s)
    return shapes


def numel(shape: tuple[Dim, ...]) -> Dim:
    n: Dim = 1
    for d in shape:
        n = dim_mul(n, d)
    return n
