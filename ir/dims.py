"""Symbolic dimensions: sizes such as ``batch``, ``seq`` or ``2*seq + 1`` that stay open until bound.

One exported program serves many batch sizes and both prefill and decode, so shapes keep symbolic
dims and the cost model binds them to integers only when it counts. A :class:`Sym` is an integer
polynomial over dim names in one canonical form (``batch*seq == seq*batch``), so the ONNX and torch
frontends and the cost model agree on when two dims are the same. What a polynomial cannot express
exactly (a floor division that does not divide, ``max``, ``mod``, torch's ``CeilToInt``) is an
opaque :class:`Call` atom that still evaluates once its arguments are bound. Text in either the
canonical spelling or torch's sympy spelling (``FloorDiv(s0, 2)``, ``s1*s0``) parses to this form
(:mod:`.dim_parse`), so old graph files load unchanged in meaning.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Union

from ..errors import UnboundDimError
from . import poly
from .dim_funcs import CANONICAL_NAME, FUNCS, Call
from .dim_parse import NotAnExpression, walk

__all__ = ["Sym", "Call", "Dim", "Shape", "to_dim", "parse_dim", "dim_add", "dim_sub", "dim_mul",
           "dim_floordiv", "dim_ceildiv", "dim_mod", "dim_max", "dim_min", "dim_eq", "dim_lt", "apply_call"]


class Sym:
    """An immutable symbolic dim: an integer polynomial over names and :class:`Call` atoms.

    ``Sym("2*seq + 1")`` parses text (canonical or sympy-style); arithmetic with ints and other
    dims gives a dim (an ``int`` when the result is constant).
    """

    __slots__ = ("terms", "_key", "_hash", "_text", "_symbols")
    terms: dict[Any, int]          # monomial (atoms: names or Calls, with exponents) -> coefficient
    _key: tuple[tuple[Any, int], ...]
    _hash: int
    _text: str | None
    _symbols: frozenset[str] | None

    def __new__(cls, expr: str) -> Sym:
        return _parse_sym(" ".join(str(expr).split()))

    @classmethod
    def from_terms(cls, terms: poly.Terms) -> Sym:
        """The dim with these terms; the algebra builds results here without printing or parsing."""
        self = object.__new__(cls)
        self._key = poly.canonical(terms)
        self.terms = dict(self._key)
        self._hash = hash(self._key)
        self._text = None
        self._symbols = None
        return self

    @classmethod
    def const(cls, n: int) -> Sym:
        return cls.from_terms({(): int(n)})

    @classmethod
    def atom(cls, atom: str | Call) -> Sym:
        return cls.from_terms({((atom, 1),): 1})

    # -- what it is ---------------------------------------------------------------------------------
    @property
    def expr(self) -> str:
        """The canonical text (what graph JSON stores)."""
        if self._text is None:
            self._text = poly.format_terms(self._key)
        return self._text

    @property
    def symbols(self) -> frozenset[str]:
        """The dim names it depends on, inside calls too."""
        if self._symbols is None:
            out: set[str] = set()
            for m in self.terms:
                for a, _ in m:
                    out |= {a} if isinstance(a, str) else a.symbols
            self._symbols = frozenset(out)
        return self._symbols

    @property
    def is_const(self) -> bool:
        return all(not m for m in self.terms)

    @property
    def const_value(self) -> int:
        return self.terms.get((), 0)

    @property
    def nonneg(self) -> bool:
        """True when it cannot be negative: coefficients >= 0 over atoms that are >= 0 (names are dims)."""
        return all(c >= 0 and all(e % 2 == 0 or isinstance(a, str) or a.nonneg for a, e in m)
                   for m, c in self.terms.items())

    def exact_div(self, other: Sym) -> Sym | None:
        """``self / other`` when it divides exactly term by term, else None."""
        q = poly.exact_div(self.terms, other.terms)
        return None if q is None else Sym.from_terms(q)

    # -- values -------------------------------------------------------------------------------------
    def value(self, bindings: Mapping[str, int]) -> Any:
        """The raw value (a float only inside torch's true-division helpers)."""
        total: Any = 0
        try:
            for m, c in self._key:
                v: Any = c
                for a, e in m:
                    x = bindings[a] if isinstance(a, str) else a.value(bindings)
                    v *= x if e == 1 else x ** e
                total += v
        except KeyError:
            missing = sorted(s for s in self.symbols if s not in bindings)
            raise UnboundDimError(
                f"symbolic dim(s) {', '.join(missing)} have no value; bind them with "
                f"--set NAME=VALUE (CLI) or analyze(graph, dims={{NAME: VALUE}})") from None
        return total

    def evaluate(self, bindings: Mapping[str, int]) -> int:
        """The integer value under ``bindings``; raises :class:`UnboundDimError` if a name is free."""
        return int(self.value(bindings))

    def subs(self, mapping: Mapping[str, Dim]) -> Dim:
        """Replace names by dims or ints (partial binding), re-simplifying what that makes exact."""
        total: Dim = 0
        for m, c in self._key:
            term: Dim = c
            for a, e in m:
                x = mapping.get(a, Sym.atom(a)) if isinstance(a, str) else \
                    apply_call(a.fn, tuple(arg if isinstance(arg, int) else arg.subs(mapping) for arg in a.args))
                for _ in range(e):
                    term = dim_mul(term, x)
            total = dim_add(total, term)
        return total

    def rename(self, mapping: Mapping[str, str]) -> Sym:
        """Replace symbol names (e.g. torch's ``s72`` by the user's ``batch``)."""
        out = self.subs({k: Sym.atom(v) for k, v in mapping.items()})
        return out if isinstance(out, Sym) else Sym.const(out)

    # -- arithmetic (results are dims: an int when constant) ----------------------------------------
    def __add__(self, other: Dim) -> Dim:
        return dim_add(self, other)

    __radd__ = __add__

    def __sub__(self, other: Dim) -> Dim:
        return dim_sub(self, other)

    def __rsub__(self, other: Dim) -> Dim:
        return dim_sub(other, self)

    def __mul__(self, other: Dim) -> Dim:
        return dim_mul(self, other)

    __rmul__ = __mul__

    def __floordiv__(self, other: Dim) -> Dim:
        return dim_floordiv(self, other)

    def __rfloordiv__(self, other: Dim) -> Dim:
        return dim_floordiv(other, self)

    def __mod__(self, other: Dim) -> Dim:
        return dim_mod(self, other)

    def __rmod__(self, other: Dim) -> Dim:
        return dim_mod(other, self)

    def __neg__(self) -> Dim:
        return to_dim(Sym.from_terms(poly.neg(self.terms)))

    def __pos__(self) -> Sym:
        return self

    # -- identity -----------------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sym) and other._key == self._key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Sym({self.expr!r})"

    def __str__(self) -> str:
        return self.expr

    def __reduce__(self) -> tuple[Any, ...]:
        return (Sym.from_terms, (dict(self.terms),))  # not the text: names need not be identifiers


Dim = Union[int, Sym]
Shape = tuple[Dim, ...]


def to_dim(d: Dim) -> Dim:
    """The IR form: an ``int`` when constant, else the :class:`Sym`."""
    if isinstance(d, Sym) and d.is_const:
        return d.const_value
    return d


# -- arithmetic on dims (ints stay ints; results are normalised by to_dim) --------------------------

def _terms(d: Dim) -> poly.Terms:
    if isinstance(d, Sym):
        return d.terms
    return {(): int(d)} if d else {}


def _make(terms: poly.Terms) -> Dim:
    return to_dim(Sym.from_terms(terms))


def _opaque(fn: str, args: tuple[Dim, ...]) -> Sym:
    return Sym.atom(Call(fn, args))


def dim_add(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return _make(poly.add(_terms(a), _terms(b)))


def dim_sub(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    return _make(poly.add(_terms(a), poly.neg(_terms(b))))


def dim_mul(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return _make(poly.mul(_terms(a), _terms(b)))


def dim_floordiv(a: Dim, b: Dim) -> Dim:
    """Exact when every term divides, else the atom ``floordiv(a, b)``."""
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError("dim division by zero")
        return a // b
    if not _terms(b):
        raise ZeroDivisionError("dim division by zero")
    q = poly.exact_div(_terms(a), _terms(b))
    return _opaque("floordiv", (a, b)) if q is None else _make(q)


def dim_ceildiv(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    q = poly.exact_div(_terms(a), _terms(b))
    return _opaque("ceildiv", (a, b)) if q is None else _make(q)


def dim_mod(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    return 0 if poly.exact_div(_terms(a), _terms(b)) is not None else _opaque("Mod", (a, b))


def _nonneg(d: Dim) -> bool:
    return d >= 0 if isinstance(d, int) else d.nonneg


def _extreme(a: Dim, b: Dim, *, largest: bool) -> Dim:
    """max or min: decided when the difference has a known sign, else a symbolic atom."""
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b) if largest else min(a, b)
    diff = dim_sub(a, b)
    if _nonneg(diff):
        return a if largest else b
    if _nonneg(dim_sub(b, a)):
        return b if largest else a
    lo, hi = sorted((a, b), key=str)
    return _opaque("max" if largest else "min", (lo, hi))


def dim_max(a: Dim, b: Dim) -> Dim:
    return _extreme(a, b, largest=True)


def dim_min(a: Dim, b: Dim) -> Dim:
    return _extreme(a, b, largest=False)


def dim_eq(a: Dim, b: Dim) -> bool | None:
    """True/False when decidable (dims are never negative), None when it depends on the binding."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    diff = dim_sub(a, b)
    if isinstance(diff, int):
        return diff == 0
    if diff.nonneg and diff.const_value > 0:
        return False
    neg = -diff
    if isinstance(neg, Sym) and neg.nonneg and neg.const_value > 0:
        return False
    return None


def dim_lt(a: Dim, b: Dim) -> bool | None:
    if isinstance(a, int) and isinstance(b, int):
        return a < b
    diff = dim_sub(b, a)  # a < b  <=>  b - a > 0
    if isinstance(diff, int):
        return diff > 0
    if diff.nonneg and diff.const_value > 0:
        return True
    if _nonneg(-diff):
        return False
    return None


_SIMPLIFIED = {"floordiv": dim_floordiv, "ceildiv": dim_ceildiv, "Mod": dim_mod}


def apply_call(fn: str, args: tuple[Dim, ...]) -> Dim:
    """``fn(*args)`` as a dim: simplified where the algebra knows ``fn``, else an opaque atom."""
    name = CANONICAL_NAME.get(fn, fn)
    if name in ("max", "min") and args:
        out = args[0]
        for x in args[1:]:
            out = _extreme(out, x, largest=name == "max")
        return out
    if name in _SIMPLIFIED and len(args) == 2:
        return _SIMPLIFIED[name](*args)
    if all(isinstance(a, int) for a in args):
        value = FUNCS[name](*args)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return _opaque(name, args)


# -- text ------------------------------------------------------------------------------------------

def _monomial(d: Dim) -> bool:
    """One term: its powers stay one term, so a large exponent (``a**16``) cannot blow up."""
    return isinstance(d, int) or len(d.terms) == 1


class _Build:
    """How parsed text becomes a dim (see :func:`.dim_parse.walk`)."""

    def name(self, text: str) -> Dim:
        return Sym.atom(text)

    def const(self, n: int) -> Dim:
        return n

    def binop(self, op: str, a: Dim, b: Dim) -> Dim:
        if op == "+":
            return dim_add(a, b)
        if op == "-":
            return dim_sub(a, b)
        if op == "*":
            return dim_mul(a, b)
        if op == "**" and isinstance(b, int) and 0 <= b <= (64 if _monomial(a) else 8):
            out: Dim = 1
            for _ in range(b):
                out = dim_mul(out, a)
            return out
        if op in ("//", "%"):
            try:
                return dim_floordiv(a, b) if op == "//" else dim_mod(a, b)
            except ZeroDivisionError:
                return _opaque("floordiv" if op == "//" else "Mod", (a, b))
        return apply_call("pow" if op == "**" else "IntTrueDiv", (a, b))

    def call(self, fn: str, args: list[Dim]) -> Dim:
        return apply_call(fn, tuple(args))


_FUNCTION_NAMES = frozenset(FUNCS) | frozenset(CANONICAL_NAME)


@lru_cache(maxsize=65536)
def _parse_sym(text: str) -> Sym:
    if not text:
        raise ValueError("empty symbolic dim")
    try:
        d = walk(text, _Build(), _FUNCTION_NAMES)
    except NotAnExpression:
        return Sym.atom(text)  # not an expression: the whole string names one dimension
    return d if isinstance(d, Sym) else Sym.const(d)


def parse_dim(text: str) -> Dim:
    """Dim text, canonical or sympy-style, as a dim (an int when constant)."""
    return to_dim(_parse_sym(" ".join(text.split())))
