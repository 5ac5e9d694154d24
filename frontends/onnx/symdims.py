"""Integer arithmetic on symbolic dims, so ONNX shape computations stay exact and symbolic.

Exporters compute shapes at run time (``Shape -> Gather -> Mul -> Concat -> Reshape``); ONNX's own
shape inference gives up on most of these chains and leaves unknown dims. To keep ``batch`` and
``sequence`` symbolic through them, the ONNX frontend folds those small integer tensors itself,
with elements that are ints or :class:`Poly` values: integer polynomials over dim symbols, kept in
a canonical order so that ``batch*sequence`` and ``sequence*batch`` are the same dim. Whatever a
polynomial cannot express exactly (a floor division that does not divide, ``max``, ``mod``)
becomes an opaque atom such as ``floordiv(seq + 1, 2)``, which :class:`~narrowpipe.ir.Sym` can
still evaluate once the dims are bound.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from typing import Union

from ...ir import Sym

__all__ = ["Poly", "DimLike", "to_poly", "to_dim", "dim_add", "dim_sub", "dim_mul", "dim_floordiv",
           "dim_ceildiv", "dim_mod", "dim_max", "dim_min", "dim_eq", "dim_lt", "sanitize_symbol",
           "parse_dim_param"]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED = frozenset({"max", "min", "floordiv", "ceildiv", "Mod", "Max", "Min", "FloorDiv", "CeilDiv",
                       "abs", "Abs", "sqrt", "floor", "ceil", "ceiling", "trunc", "PythonMod",
                       "ModularIndexing", "CeilToInt", "FloorToInt", "TruncToInt", "IntTrueDiv",
                       "FloatTrueDiv", "ToFloat", "OpaqueUnaryFn_sqrt"})

Monomial = tuple[tuple[str, int], ...]


class Poly:
    """An integer polynomial over atoms (dim names or opaque expressions), immutable and hashable."""

    __slots__ = ("terms", "_key")

    def __init__(self, terms: dict[Monomial, int]) -> None:
        self.terms: dict[Monomial, int] = {m: c for m, c in terms.items() if c}
        self._key = tuple(sorted(self.terms.items()))

    # -- construction ---------------------------------------------------------------------------
    @staticmethod
    def const(n: int) -> Poly:
        return Poly({(): int(n)})

    @staticmethod
    def atom(name: str) -> Poly:
        return Poly({((name, 1),): 1})

    @property
    def is_const(self) -> bool:
        return all(not m for m in self.terms)

    @property
    def const_value(self) -> int:
        return self.terms.get((), 0)

    @property
    def nonneg(self) -> bool:
        """True when every coefficient is >= 0 (atoms are dims, so the value cannot be negative)."""
        return all(c >= 0 for c in self.terms.values())

    # -- arithmetic -----------------------------------------------------------------------------
    def __add__(self, other: Poly) -> Poly:
        out = dict(self.terms)
        for m, c in other.terms.items():
            out[m] = out.get(m, 0) + c
        return Poly(out)

    def __neg__(self) -> Poly:
        return Poly({m: -c for m, c in self.terms.items()})

    def __sub__(self, other: Poly) -> Poly:
        return self + (-other)

    def __mul__(self, other: Poly) -> Poly:
        out: dict[Monomial, int] = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in other.terms.items():
                m = _mono_mul(m1, m2)
                out[m] = out.get(m, 0) + c1 * c2
        return Poly(out)

    def exact_div(self, other: Poly) -> Poly | None:
        """``self / other`` when ``other`` is a single term dividing every term exactly, else None."""
        if len(other.terms) != 1:
            return Poly.const(1) if other == self else None
        (dm, dc), = other.terms.items()
        out: dict[Monomial, int] = {}
        for m, c in self.terms.items():
            q = _mono_div(m, dm)
            if q is None or c % dc:
                return None
            out[q] = c // dc
        return Poly(out)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Poly) and other._key == self._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts: list[str] = []
        for m, c in sorted(self.terms.items(), key=lambda kv: (-len(kv[0]), kv[0])):
            factors = [a if e == 1 else f"{a}**{e}" for a, e in m]
            if not factors:
                body = str(abs(c))
            elif abs(c) == 1:
                body = "*".join(factors)
            else:
                body = "*".join([str(abs(c)), *factors])
            parts.append(("- " if c < 0 else "+ ") + body)
        text = " ".join(parts)
        return text[2:] if text.startswith("+ ") else "-" + text[2:]

    def __repr__(self) -> str:
        return f"Poly({self})"


def _mono_mul(a: Monomial, b: Monomial) -> Monomial:
    if not a:
        return b
    if not b:
        return a
    exps = dict(a)
    for k, e in b:
        exps[k] = exps.get(k, 0) + e
    return tuple(sorted(exps.items()))


def _mono_div(a: Monomial, b: Monomial) -> Monomial | None:
    exps = dict(a)
    for k, e in b:
        have = exps.get(k, 0)
        if have < e:
            return None
        exps[k] = have - e
    return tuple(sorted((k, e) for k, e in exps.items() if e))


DimLike = Union[int, Sym, Poly]


# -- conversion between IR dims and polynomials -------------------------------------------------

def to_poly(d: DimLike) -> Poly:
    if isinstance(d, Poly):
        return d
    if isinstance(d, int):
        return Poly.const(d)
    return _parse(d.expr)


def to_dim(d: DimLike) -> int | Sym:
    """The IR form: an int when constant, else a canonical :class:`Sym`."""
    if isinstance(d, int):
        return d
    p = d if isinstance(d, Poly) else to_poly(d)
    if p.is_const:
        return p.const_value
    return _sym(str(p))


@lru_cache(maxsize=65536)
def _sym(text: str) -> Sym:
    return Sym(text)


@lru_cache(maxsize=65536)
def _parse(expr: str) -> Poly:
    """A Sym's text as a polynomial; anything outside + - * and integer powers is one opaque atom."""
    try:
        tree = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return Poly.atom(expr)
    return _from_ast(tree)


def _from_ast(node: ast.AST) -> Poly:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return Poly.const(node.value)
    if isinstance(node, ast.Name):
        return Poly.atom(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_from_ast(node.operand)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
        return _from_ast(node.operand)
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Add):
            return _from_ast(node.left) + _from_ast(node.right)
        if isinstance(node.op, ast.Sub):
            return _from_ast(node.left) - _from_ast(node.right)
        if isinstance(node.op, ast.Mult):
            return _from_ast(node.left) * _from_ast(node.right)
        if isinstance(node.op, ast.Pow) and isinstance(node.right, ast.Constant) \
                and isinstance(node.right.value, int) and 0 <= node.right.value <= 8:
            out = Poly.const(1)
            base = _from_ast(node.left)
            for _ in range(node.right.value):
                out = out * base
            return out
        if isinstance(node.op, ast.FloorDiv):
            return _as_poly(dim_floordiv(_from_ast(node.left), _from_ast(node.right)))
    return Poly.atom(ast.unparse(node))


def _as_poly(d: DimLike) -> Poly:
    return d if isinstance(d, Poly) else to_poly(d)


def _norm(p: Poly) -> int | Poly:
    return p.const_value if p.is_const else p


# -- operations used by shape rules and constant folding (ints stay ints) -----------------------

def dim_add(a: DimLike, b: DimLike) -> int | Poly:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return _norm(to_poly(a) + to_poly(b))


def dim_sub(a: DimLike, b: DimLike) -> int | Poly:
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    return _norm(to_poly(a) - to_poly(b))


def dim_mul(a: DimLike, b: DimLike) -> int | Poly:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return _norm(to_poly(a) * to_poly(b))


def dim_floordiv(a: DimLike, b: DimLike) -> int | Poly:
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError("dim division by zero")
        return a // b
    pa, pb = to_poly(a), to_poly(b)
    if pb.is_const and pb.const_value == 0:
        raise ZeroDivisionError("dim division by zero")
    if pa.is_const and pb.is_const:
        return pa.const_value // pb.const_value
    q = pa.exact_div(pb)
    if q is not None:
        return _norm(q)
    return Poly.atom(f"floordiv({pa}, {pb})")


def dim_ceildiv(a: DimLike, b: DimLike) -> int | Poly:
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    pa, pb = to_poly(a), to_poly(b)
    q = pa.exact_div(pb)
    if q is not None:
        return _norm(q)
    return Poly.atom(f"ceildiv({pa}, {pb})")


def dim_mod(a: DimLike, b: DimLike) -> int | Poly:
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    pa, pb = to_poly(a), to_poly(b)
    if pa.exact_div(pb) is not None:
        return 0
    return Poly.atom(f"Mod({pa}, {pb})")


def dim_max(a: DimLike, b: DimLike) -> int | Poly:
    return _extreme(a, b, largest=True)


def dim_min(a: DimLike, b: DimLike) -> int | Poly:
    return _extreme(a, b, largest=False)


def _extreme(a: DimLike, b: DimLike, *, largest: bool) -> int | Poly:
    """max or min: decided when the difference has a known sign, else a symbolic atom."""
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b) if largest else min(a, b)
    pa, pb = to_poly(a), to_poly(b)
    diff = pa - pb
    if diff.nonneg:
        return _norm(pa if largest else pb)
    if (-diff).nonneg:
        return _norm(pb if largest else pa)
    lo, hi = sorted((str(pa), str(pb)))
    return Poly.atom(f"{'max' if largest else 'min'}({lo}, {hi})")


def dim_eq(a: DimLike, b: DimLike) -> bool | None:
    """True/False when decidable (dims are never negative), None when it depends on the binding."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    diff = to_poly(a) - to_poly(b)
    if not diff.terms:
        return True
    if diff.is_const:
        return False
    if diff.nonneg and diff.const_value > 0 or (-diff).nonneg and (-diff).const_value > 0:
        return False
    return None


def dim_lt(a: DimLike, b: DimLike) -> bool | None:
    if isinstance(a, int) and isinstance(b, int):
        return a < b
    diff = to_poly(b) - to_poly(a)  # a < b  <=>  b - a > 0
    if diff.is_const:
        return diff.const_value > 0
    if diff.nonneg and diff.const_value > 0:
        return True
    if (-diff).nonneg:
        return False
    return None


# -- names ------------------------------------------------------------------------------------

def sanitize_symbol(name: str) -> str:
    """An identifier usable in dim expressions (``batch size`` -> ``batch_size``)."""
    text = re.sub(r"\W", "_", name.strip()) or "dim"
    if text[0].isdigit():
        text = "d_" + text
    if text in _RESERVED:
        text += "_"
    return text


@lru_cache(maxsize=16384)
def parse_dim_param(text: str) -> tuple[int | Sym, str]:
    """An ONNX ``dim_param`` as an IR dim, and the name to declare when it is a plain symbol.

    Expressions the exporters write (``batch*sequence``, ``s0 + 1``) stay expressions; any other
    string becomes one identifier.
    """
    text = text.strip()
    if _IDENT.match(text):
        name = sanitize_symbol(text)
        return _sym(name), name
    try:
        tree = ast.parse(text, mode="eval").body
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        if names and not (names & _RESERVED) and all(_IDENT.match(n) for n in names) and \
                all(isinstance(n, (ast.BinOp, ast.UnaryOp, ast.Name, ast.Constant, ast.Add, ast.Sub,
                                   ast.Mult, ast.USub, ast.UAdd, ast.Load)) for n in ast.walk(tree)):
            return to_dim(_from_ast(tree)), ""
    except (SyntaxError, ValueError, RecursionError):
        pass
    name = sanitize_symbol(text)
    return _sym(name), name
