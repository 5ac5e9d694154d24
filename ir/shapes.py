"""Helpers over shapes of dims: static or not, their symbols, binding, text and JSON form."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .dims import Dim, Sym, parse_dim

__all__ = ["is_static", "shape_symbols", "evaluate_dim", "substitute_dim", "format_dim", "format_shape",
           "dim_to_json", "dim_from_json"]


def is_static(shape: Iterable[Dim]) -> bool:
    return all(isinstance(d, int) for d in shape)


def shape_symbols(shape: Iterable[Dim]) -> frozenset[str]:
    out: set[str] = set()
    for d in shape:
        if isinstance(d, Sym):
            out |= d.symbols
    return frozenset(out)


def evaluate_dim(d: Dim, bindings: Mapping[str, int]) -> int:
    return d if isinstance(d, int) else d.evaluate(bindings)


def substitute_dim(d: Dim, mapping: Mapping[str, Dim]) -> Dim:
    return d if isinstance(d, int) else d.subs(mapping)


def format_dim(d: Dim) -> str:
    return str(d)


def format_shape(shape: Iterable[Dim]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def dim_to_json(d: Dim) -> int | str:
    return d if isinstance(d, int) else d.expr


def dim_from_json(v: int | str) -> Dim:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"a dim must be an int or a string, got {v!r}")
    return v if isinstance(v, int) else parse_dim(v)
