"""Symbolic dimensions: sizes such as ``batch``, ``seq`` or ``2*seq + 1`` that stay open until bound.

One exported program serves many batch sizes and both prefill and decode, so shapes keep symbolic
dims and the cost model binds them to integers only when it counts. An expression is a small
integer arithmetic language (``+ - * // % **``, ``max``/``min`` and the helper functions torch's
symbolic shapes print, such as ``FloorDiv`` or ``CeilToInt``). It is parsed once and compiled to
Python bytecode with no builtins, so evaluating a 100k-node graph stays cheap and safe. A name
that is not a valid expression (ONNX allows any string as ``dim_param``) is kept as one atom.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterable, Mapping
from typing import Union

from ..errors import UnboundDimError

__all__ = ["Sym", "Dim", "Shape", "is_static", "shape_symbols", "dim_to_json", "dim_from_json",
           "format_dim", "format_shape", "evaluate_dim"]


def _floordiv(a: int, b: int) -> int:
    return a // b


def _ceildiv(a: int, b: int) -> int:
    return -(-a // b)


_FUNCS: dict[str, object] = {
    "Max": max, "max": max, "Min": min, "min": min,
    "FloorDiv": _floordiv, "floordiv": _floordiv, "CeilDiv": _ceildiv, "ceildiv": _ceildiv,
    "Mod": lambda a, b: a % b, "PythonMod": lambda a, b: a % b,
    "ModularIndexing": lambda x, d, m: (x // d) % m,
    "CeilToInt": lambda x: int(math.ceil(x)), "ceiling": lambda x: int(math.ceil(x)),
    "ceil": lambda x: int(math.ceil(x)), "FloorToInt": lambda x: int(math.floor(x)),
    "floor": lambda x: int(math.floor(x)), "TruncToInt": lambda x: int(x), "trunc": lambda x: int(x),
    "IntTrueDiv": lambda a, b: a / b, "FloatTrueDiv": lambda a, b: a / b, "ToFloat": float,
    "Abs": abs, "abs": abs, "sqrt": math.sqrt, "OpaqueUnaryFn_sqrt": math.sqrt,
}
_ALLOWED_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Pow, ast.Div)


class Sym:
    """An immutable symbolic dimension expression; equal when their canonical text is equal."""

    __slots__ = ("expr", "symbols", "_code")

    def __init__(self, expr: str) -> None:
        text = " ".join(str(expr).split())
        if not text:
            raise ValueError("empty symbolic dim")
        code, symbols = _compile(text)
        if code is None:
            # Not an expression: the whole string names one dimension.
            symbols = frozenset({text})
        else:
            text = _canonical(text)
        self.expr: str = text
        self.symbols: frozenset[str] = symbols
        self._code = code

    def evaluate(self, bindings: Mapping[str, int]) -> int:
        """The integer value under ``bindings``; raises :class:`UnboundDimError` if a name is free."""
        missing = [s for s in self.symbols if s not in bindings]
        if missing:
            raise UnboundDimError(
                f"symbolic dim(s) {', '.join(sorted(missing))} have no value; bind them with "
                f"--set NAME=VALUE (CLI) or analyze(graph, NAME=VALUE)")
        if self._code is None:
            return int(bindings[self.expr])
        value = eval(self._code, {"__builtins__": {}}, {**_FUNCS, **bindings})  # noqa: S307 (compiled from a checked AST)
        return int(value)

    def rename(self, mapping: Mapping[str, str]) -> Sym:
        """Replace symbol names (e.g. torch's ``s72`` by the user's ``batch``)."""
        if self._code is None:
            return Sym(mapping.get(self.expr, self.expr))
        pattern = re.compile(r"\b(" + "|".join(re.escape(s) for s in sorted(self.symbols, key=len, reverse=True)) + r")\b")
        return Sym(pattern.sub(lambda m: mapping.get(m.group(1), m.group(1)), self.expr))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sym) and other.expr == self.expr

    def __hash__(self) -> int:
        return hash(("Sym", self.expr))

    def __repr__(self) -> str:
        return f"Sym({self.expr!r})"

    def __str__(self) -> str:
        return self.expr


Dim = Union[int, Sym]
Shape = tuple[Dim, ...]


def _compile(text: str) -> tuple[object | None, frozenset[str]]:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None, frozenset()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if node.id not in _FUNCS:
                names.add(node.id)
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS or node.keywords:
                return None, frozenset()
        elif isinstance(node, ast.BinOp):
            if not isinstance(node.op, _ALLOWED_BINOPS):
                return None, frozenset()
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, (ast.USub, ast.UAdd)):
                return None, frozenset()
        elif isinstance(node, ast.Constant):
            if not isinstance(node.value, (int, float)) or isinstance(node.value, bool):
                return None, frozenset()
        elif not isinstance(node, (ast.Expression, ast.Load, ast.operator, ast.unaryop)):
            return None, frozenset()
    return compile(tree, "<dim>", "eval"), frozenset(names)


def _canonical(text: str) -> str:
    """Normalise spacing so that equal expressions compare equal."""
    try:
        return ast.unparse(ast.parse(text, mode="eval"))
    except (SyntaxError, ValueError):
        return text


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


def format_dim(d: Dim) -> str:
    return str(d)


def format_shape(shape: Iterable[Dim]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def dim_to_json(d: Dim) -> int | str:
    return d if isinstance(d, int) else d.expr


def dim_from_json(v: int | str) -> Dim:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"a dim must be an int or a string, got {v!r}")
    return v if isinstance(v, int) else Sym(v)
