"""Integer polynomials over atoms, the arithmetic under :class:`~narrowpipe.ir.Sym`.

Kept apart from ``Sym`` so the algebra (term dicts in, term dicts out) can be read and tested on
its own. An atom is a dim name (``str``) or an opaque call (``floordiv(seq + 1, 2)``); anything
hashable that prints itself works. Monomials keep their atoms sorted by text, so ``batch*seq`` and
``seq*batch`` are one key and equal dims compare equal without any simplifier.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Union

__all__ = ["Atom", "Monomial", "Terms", "add", "neg", "mul", "exact_div", "canonical", "format_terms",
           "mono_key"]

Atom = Union[str, Hashable]
Monomial = tuple[tuple[Atom, int], ...]
Terms = dict[Monomial, int]


def mono_key(m: Monomial) -> tuple[tuple[str, int], ...]:
    return tuple((str(a), e) for a, e in m)


def _sorted_mono(exps: dict[Atom, int]) -> Monomial:
    return tuple(sorted(((a, e) for a, e in exps.items() if e), key=lambda ae: str(ae[0])))


def _mono_mul(a: Monomial, b: Monomial) -> Monomial:
    if not a:
        return b
    if not b:
        return a
    exps = dict(a)
    for k, e in b:
        exps[k] = exps.get(k, 0) + e
    return _sorted_mono(exps)


def _mono_div(a: Monomial, b: Monomial) -> Monomial | None:
    exps = dict(a)
    for k, e in b:
        have = exps.get(k, 0)
        if have < e:
            return None
        exps[k] = have - e
    return _sorted_mono(exps)


def add(x: Terms, y: Terms) -> Terms:
    out = dict(x)
    for m, c in y.items():
        out[m] = out.get(m, 0) + c
    return {m: c for m, c in out.items() if c}


def neg(x: Terms) -> Terms:
    return {m: -c for m, c in x.items()}


def mul(x: Terms, y: Terms) -> Terms:
    out: Terms = {}
    for m1, c1 in x.items():
        for m2, c2 in y.items():
            m = _mono_mul(m1, m2)
            out[m] = out.get(m, 0) + c1 * c2
    return {m: c for m, c in out.items() if c}


def exact_div(x: Terms, y: Terms) -> Terms | None:
    """``x / y`` when ``y`` is one term dividing every term of ``x`` exactly (or ``x == y``), else None."""
    if len(y) != 1:
        return {(): 1} if y and canonical(x) == canonical(y) else None
    (dm, dc), = y.items()
    out: Terms = {}
    for m, c in x.items():
        q = _mono_div(m, dm)
        if q is None or c % dc:
            return None
        out[q] = c // dc
    return out


def canonical(x: Terms) -> tuple[tuple[Monomial, int], ...]:
    """The terms in print order (highest degree first, then by atom text): the identity of a dim."""
    return tuple(sorted(((m, c) for m, c in x.items() if c), key=lambda mc: (-len(mc[0]), mono_key(mc[0]))))


def format_terms(terms: tuple[tuple[Monomial, int], ...]) -> str:
    """Python-syntax text (``2*seq + 1``, ``batch*seq``) that parses back to the same terms."""
    if not terms:
        return "0"
    parts: list[str] = []
    for m, c in terms:
        factors = [str(a) if e == 1 else f"{a}**{e}" for a, e in m]
        if not factors:
            body = str(abs(c))
        elif abs(c) == 1:
            body = "*".join(factors)
        else:
            body = "*".join([str(abs(c)), *factors])
        parts.append(("- " if c < 0 else "+ ") + body)
    text = " ".join(parts)
    return text[2:] if text.startswith("+ ") else "-" + text[2:]
