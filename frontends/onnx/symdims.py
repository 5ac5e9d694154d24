"""ONNX glue over the IR's dim algebra: names from ``dim_param`` strings, and the old ``Poly`` API.

Exporters compute shapes at run time (``Shape -> Gather -> Mul -> Concat -> Reshape``); ONNX's own
shape inference gives up on most of these chains and leaves unknown dims. To keep ``batch`` and
``sequence`` symbolic through them, the ONNX frontend folds those small integer tensors itself,
with elements that are ints or :class:`~narrowpipe.ir.Sym` polynomials (``Poly`` is the same class:
the algebra lives in :mod:`narrowpipe.ir.dims`, shared with the torch frontend). What is left here
is spelling any string as a valid dim name (:mod:`.dim_params` decides what a ``dim_param`` names).
"""

from __future__ import annotations

import keyword
from typing import Union

from ...ir import Sym
from ...ir.dims import (
    dim_add,
    dim_ceildiv,
    dim_eq,
    dim_floordiv,
    dim_lt,
    dim_max,
    dim_min,
    dim_mod,
    dim_mul,
    dim_sub,
    to_dim,
)

__all__ = ["Poly", "DimLike", "to_poly", "to_dim", "dim_add", "dim_sub", "dim_mul", "dim_floordiv",
           "dim_ceildiv", "dim_mod", "dim_max", "dim_min", "dim_eq", "dim_lt", "sanitize_symbol",
           "RESERVED"]

#: Function names of dim text: never a dim's name (``max`` is spelled ``max_``).
RESERVED = frozenset({"max", "min", "floordiv", "ceildiv", "Mod", "Max", "Min", "FloorDiv", "CeilDiv",
                       "abs", "Abs", "sqrt", "floor", "ceil", "ceiling", "trunc", "PythonMod", "pow",
                       "ModularIndexing", "CeilToInt", "FloorToInt", "TruncToInt", "IntTrueDiv",
                       "FloatTrueDiv", "ToFloat", "OpaqueUnaryFn_sqrt"})

#: The folding code's name for a symbolic dim; one class with :class:`~narrowpipe.ir.Sym`.
Poly = Sym
DimLike = Union[int, Sym]


def to_poly(d: DimLike) -> Sym:
    """A dim as a :class:`Sym`, constants included (folding asks ``is_const`` of either)."""
    return d if isinstance(d, Sym) else Sym.const(d)


def sanitize_symbol(name: str) -> str:
    """An identifier usable in dim expressions (``batch size`` -> ``batch_size``); not unique: two
    names may spell alike (:class:`.dim_params.DimParams` makes the model's names unique)."""
    text = "".join(c if ("_" + c).isidentifier() else "_" for c in name.strip()) or "dim"
    if text[0].isdigit():
        text = "d_" + text
    if text in RESERVED or keyword.iskeyword(text):
        text += "_"
    return text
