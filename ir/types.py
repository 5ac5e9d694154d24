"""Tensor types: an element type and a shape whose dims are ints or symbols."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import prod

from .dims import Shape
from .dtypes import DType
from .shapes import evaluate_dim, format_shape, is_static, shape_symbols

__all__ = ["TensorType"]


@dataclass(frozen=True, slots=True)
class TensorType:
    """The static type of a value. A scalar has shape ``()``; an unknown rank is not allowed."""

    dtype: DType
    shape: Shape

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return is_static(self.shape)

    @property
    def is_one_element(self) -> bool:
        """Every dim 1 (a scalar, or ``[1, 1]``): a broadcast constant such as a scale or a fill."""
        return all(d == 1 for d in self.shape)

    @property
    def symbols(self) -> frozenset[str]:
        return shape_symbols(self.shape)

    def concrete_shape(self, bindings: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(evaluate_dim(d, bindings) for d in self.shape)

    def numel(self, bindings: Mapping[str, int] | None = None) -> int:
        """Element count; symbolic dims need ``bindings``."""
        if self.is_static:
            return prod(self.shape)  # type: ignore[arg-type]
        return prod(self.concrete_shape(bindings or {}))

    def nbytes(self, bindings: Mapping[str, int] | None = None) -> int:
        return self.dtype.nbytes(self.numel(bindings))

    def with_shape(self, shape: Shape) -> TensorType:
        return TensorType(self.dtype, tuple(shape))

    def __str__(self) -> str:
        return f"{self.dtype.value}{format_shape(self.shape)}"


