"""Number formatting for people: SI prefixes for FLOPs and bytes, fixed units for times."""

from __future__ import annotations

__all__ = ["si", "flops", "nbytes", "seconds", "count", "percent"]

_PREFIXES = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si(x: float, unit: str = "", digits: int = 3) -> str:
    """``1.23 G`` style; exact integers below 1000 are printed as they are."""
    ax = abs(x)
    for scale, p in _PREFIXES:
        if ax >= scale:
            return f"{x / scale:.{digits}g} {p}{unit}"
    if float(x).is_integer():
        return f"{int(x)} {unit}".rstrip()
    return f"{x:.{digits}g} {unit}".rstrip()


def flops(x: float) -> str:
    return si(x, "FLOP")


def nbytes(x: float) -> str:
    return si(x, "B")


def seconds(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 1:
        return f"{x:.3g} s"
    if x >= 1e-3:
        return f"{x * 1e3:.3g} ms"
    if x >= 1e-6:
        return f"{x * 1e6:.3g} us"
    return f"{x * 1e9:.3g} ns"


def count(n: int) -> str:
    return f"{n:,}"


def percent(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"
