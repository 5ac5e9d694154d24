"""The functions an opaque dim atom may apply, and which of them keep a dim non-negative.

Torch's symbolic shapes print sympy helpers (``FloorDiv``, ``CeilToInt``, ``ModularIndexing``);
the ONNX frontend writes ``floordiv``, ``ceildiv``, ``Mod``, ``max`` and ``min``. All evaluate here
with Python integer semantics, the same ones the old text evaluator used.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["FUNCS", "CANONICAL_NAME", "nonneg_call", "Call"]


def _floordiv(a: Any, b: Any) -> Any:
    return a // b


def _ceildiv(a: Any, b: Any) -> Any:
    return -(-a // b)


def _mod(a: Any, b: Any) -> Any:
    return a % b


FUNCS: dict[str, Callable[..., Any]] = {
    "max": max, "min": min, "floordiv": _floordiv, "ceildiv": _ceildiv, "Mod": _mod,
    "ModularIndexing": lambda x, d, m: (x // d) % m,
    "CeilToInt": lambda x: int(math.ceil(x)), "ceiling": lambda x: int(math.ceil(x)),
    "ceil": lambda x: int(math.ceil(x)), "FloorToInt": lambda x: int(math.floor(x)),
    "floor": lambda x: int(math.floor(x)), "TruncToInt": lambda x: int(x), "trunc": lambda x: int(x),
    "IntTrueDiv": lambda a, b: a / b, "FloatTrueDiv": lambda a, b: a / b, "ToFloat": float,
    "Abs": abs, "abs": abs, "sqrt": math.sqrt, "OpaqueUnaryFn_sqrt": math.sqrt, "pow": pow,
}

#: Spellings that mean a function :mod:`.dims` simplifies, mapped to its canonical name.
CANONICAL_NAME: dict[str, str] = {
    "Max": "max", "max": "max", "Min": "min", "min": "min", "FloorDiv": "floordiv",
    "floordiv": "floordiv", "CeilDiv": "ceildiv", "ceildiv": "ceildiv", "Mod": "Mod", "PythonMod": "Mod",
}

_ALL_NONNEG = frozenset({"floordiv", "ceildiv", "min", "CeilToInt", "ceiling", "ceil", "FloorToInt", "floor",
                         "TruncToInt", "trunc", "IntTrueDiv", "FloatTrueDiv", "ToFloat", "sqrt",
                         "OpaqueUnaryFn_sqrt", "ModularIndexing", "pow"})


def nonneg_call(fn: str, args_nonneg: Sequence[bool]) -> bool:
    """Whether ``fn`` of arguments with these signs is surely >= 0 (what max/min folding needs)."""
    if fn in ("Abs", "abs"):
        return True
    if fn == "max":
        return any(args_nonneg)
    if fn == "Mod":
        return bool(args_nonneg) and args_nonneg[-1]
    return fn in _ALL_NONNEG and all(args_nonneg)


class Call:
    """An opaque dim atom: a function of dims (``floordiv(seq + 1, 2)``), equal by function and arguments.

    Its arguments are ints or :class:`~narrowpipe.ir.Sym` values (anything with ``value``,
    ``symbols`` and ``nonneg``), so this module needs nothing from :mod:`.dims`.
    """

    __slots__ = ("fn", "args", "text", "_hash")

    def __init__(self, fn: str, args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args
        self.text = f"{fn}({', '.join(str(a) for a in args)})"
        self._hash = hash(self.text)

    def value(self, bindings: Mapping[str, int]) -> Any:
        return FUNCS[self.fn](*[a if isinstance(a, int) else a.value(bindings) for a in self.args])

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset().union(*(a.symbols for a in self.args if not isinstance(a, int)))

    @property
    def nonneg(self) -> bool:
        return nonneg_call(self.fn, [a >= 0 if isinstance(a, int) else a.nonneg for a in self.args])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Call) and other.text == self.text

    def __hash__(self) -> int:
        return self._hash

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__
