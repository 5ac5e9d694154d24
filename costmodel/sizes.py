"""Bytes of values at the bound shapes: one spelling of dtype size x element count.

Footprints, weight totals, GEMM operand sizes and chip-to-chip hops all ask the same question of a
value; answering it in one place keeps them agreeing (sub-byte dtypes round up inside ``nbytes``).
"""

from __future__ import annotations

from collections.abc import Iterable
from math import prod

from ..ir import Value
from .interpreter import CostTable

__all__ = ["value_bytes", "values_bytes", "weight_bytes"]


def value_bytes(table: CostTable, value: Value) -> int:
    """Bytes ``value`` occupies at the table's bound shape."""
    return value.type.dtype.nbytes(prod(table.shapes[value]))


def values_bytes(table: CostTable, values: Iterable[Value]) -> int:
    return sum(value_bytes(table, v) for v in values)


def weight_bytes(table: CostTable) -> int:
    """Bytes of every weight (parameters and buffers) of the table's graph."""
    return values_bytes(table, table.graph.weights)
