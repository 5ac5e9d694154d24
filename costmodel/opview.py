"""A node seen with concrete shapes: what a cost rule reads.

Rules never handle symbols: the interpreter binds every dim first and hands each rule an
:class:`OpView` with integer shapes, so formulas stay plain arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import prod
from typing import Any

from ..ir import DType, Node, Value
from .experts import DEFAULT, ExpertBalance

__all__ = ["OpView"]


class OpView:
    """``expert_balance`` is the analysis' assumed spread of routed rows over experts, the one input of a
    rule that is not in the graph (a grouped GEMM reads only the experts some row reaches)."""

    __slots__ = ("node", "in_shapes", "out_shapes", "in_dtypes", "out_dtypes", "expert_balance")

    def __init__(self, node: Node, in_shapes: Sequence[tuple[int, ...] | None],
                 out_shapes: Sequence[tuple[int, ...]], expert_balance: ExpertBalance = DEFAULT) -> None:
        self.node = node
        self.expert_balance = expert_balance
        self.in_shapes = list(in_shapes)
        self.out_shapes = list(out_shapes)
        self.in_dtypes: list[DType | None] = [None if v is None else v.type.dtype for v in node.inputs]
        self.out_dtypes: list[DType] = [v.type.dtype for v in node.outputs]

    @property
    def attrs(self) -> Mapping[str, Any]:
        return self.node.attrs

    def shape(self, i: int) -> tuple[int, ...]:
        s = self.in_shapes[i]
        if s is None:
            raise IndexError(f"input {i} of {self.node.name} is absent")
        return s

    def has_input(self, i: int) -> bool:
        return i < len(self.in_shapes) and self.in_shapes[i] is not None

    def numel(self, i: int) -> int:
        return prod(self.shape(i))

    def in_bytes(self, i: int) -> int:
        dt = self.in_dtypes[i]
        assert dt is not None
        return dt.nbytes(self.numel(i))

    def out_numel(self, i: int = 0) -> int:
        return prod(self.out_shapes[i]) if i < len(self.out_shapes) else 0

    def out_bytes(self, i: int = 0) -> int:
        return self.out_dtypes[i].nbytes(self.out_numel(i))

    def all_in_bytes(self) -> int:
        """Bytes of each distinct input tensor (a value read twice by one op is read once)."""
        seen: set[Value] = set()
        total = 0
        for i, v in enumerate(self.node.inputs):
            if v is None or v in seen:
                continue
            seen.add(v)
            total += self.in_bytes(i)
        return total

    def all_out_bytes(self) -> int:
        return sum(self.out_bytes(i) for i in range(len(self.out_shapes)))
