"""ONNX glue over the IR's dim algebra: names from ``dim_param`` strings, and the old ``Poly`` API.

Exporters compute shapes at run time (``Shape -> Gather -> Mul -> Concat -> Reshape``); ONNX's own
shape inference gives up on most of these chains and leaves unknown dims. To keep ``batch`` and
``sequence`` symbolic through them, the ONNX frontend folds those small integer tensors itself,
with elements that are ints or :class:`~narrowpipe.ir.Sym` polynomials (``Poly`` is the same class:
the algebra lives in :mod:`narrowpipe.ir.dims`, shared with the torch frontend). What is left here
is ONNX's own business: turning any ``dim_param`` string into a valid dim name.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
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
    parse_dim,
    to_dim,
)

__all__ = ["Poly", "DimLike", "to_poly", "to_dim", "dim_add", "dim_sub", "dim_mul", "dim_floordiv",
           "dim_ceildiv", "dim_mod", "dim_max", "dim_min", "dim_eq", "dim_lt", "sanitize_symbol",
           "parse_dim_param"]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED = frozenset({"max", "min", "floordiv", "ceildiv", "Mod", "Max", "Min", "FloorDiv", "CeilDiv",
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
    """An identifier usable in dim expressions (``batch size`` -> ``batch_size``)."""
    text = re.sub(r"\W", "_", name.strip()) or "dim"
    if text[0].isdigit():
        text = "d_" + text
    if text in _RESERVED:
        text += "_"
    return text


_POLY_NODES = (ast.BinOp, ast.UnaryOp, ast.Name, ast.Constant, ast.Add, ast.Sub, ast.Mult, ast.USub, ast.UAdd,
               ast.Load)


@lru_cache(maxsize=16384)
def parse_dim_param(text: str) -> tuple[int | Sym, str]:
    """An ONNX ``dim_param`` as an IR dim, and the name to declare when it is a plain symbol.

    Expressions the exporters write (``batch*sequence``, ``s0 + 1``) stay expressions; any other
    string becomes one identifier.
    """
    text = text.strip()
    if _IDENT.match(text):
        name = sanitize_symbol(text)
        return Sym.atom(name), name
    try:
        tree = ast.parse(text, mode="eval").body
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        if names and not (names & _RESERVED) and all(_IDENT.match(n) for n in names) and \
                all(isinstance(n, _POLY_NODES) for n in ast.walk(tree)):
            return parse_dim(text), ""
    except (SyntaxError, ValueError, RecursionError):
        pass
    name = sanitize_symbol(text)
    return Sym.atom(name), name
