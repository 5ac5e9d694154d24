"""Number formatting for people: SI prefixes for FLOPs and bytes, fixed units for times.

Every formatter rounds to its significant digits *before* it picks the unit: 999.77 us rounds to
1000 us, which reads "1 ms" (it read "1e+03 us"), and 22,450 tokens/J reads "22.5 k". Past the
largest unit numbers are written out with thousands separators, never in scientific notation.
"""

from __future__ import annotations

import math

__all__ = ["si", "flops", "nbytes", "seconds", "count", "percent", "dollars"]

#: (scale, prefix), smallest first: a value takes the largest prefix it reaches once rounded.
_PREFIXES = ((1.0, ""), (1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T"), (1e15, "P"), (1e18, "E"))
#: (seconds per unit, unit, the rounded value from which the next unit takes over), smallest first.
#: Past 1000 s a time reads in minutes, past 100 minutes in hours, as people say a long run's length.
_TIME_UNITS = ((1e-9, "ns", 1000.0), (1e-6, "us", 1000.0), (1e-3, "ms", 1000.0), (1.0, "s", 1000.0),
               (60.0, "min", 100.0), (3600.0, "h", math.inf))


def _round(x: float, digits: int) -> float:
    """``x`` rounded to ``digits`` significant digits (what ``%g`` will print)."""
    return float(f"{x:.{digits}g}")


def _plain(v: float, digits: int) -> str:
    """A rounded value as people write it: ``%g`` below 1000, thousands separators from there on."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.{digits}g}"


def _scaled(x: float, units: tuple[tuple[float, str, float], ...], digits: int) -> tuple[float, str]:
    """(value in its unit, unit): from the smallest unit up, the first in which ``x``, rounded,
    stays below the next unit's threshold, so a value that rounds up to it moves on."""
    for i, (scale, name, limit) in enumerate(units):
        v = _round(x / scale, digits)
        if abs(v) < limit or i == len(units) - 1:
            return v, name
    raise AssertionError("unreachable: the last unit takes any value")


def si(x: float, unit: str = "", digits: int = 3) -> str:
    """``1.23 G`` style; exact integers below 1000 are printed as they are."""
    if abs(x) < 1000 and float(x).is_integer():
        return f"{int(x)} {unit}".rstrip()
    v, p = _scaled(x, tuple((s, p, 1000.0) for s, p in _PREFIXES), digits)
    return f"{_plain(v, digits)} {p}{unit}".rstrip()


def flops(x: float) -> str:
    return si(x, "FLOP")


def nbytes(x: float) -> str:
    return si(x, "B")


def seconds(x: float | None) -> str:
    """ns to s by the SI steps, then minutes and hours; 0 reads ``0 ns``."""
    if x is None:
        return "-"
    v, unit = _scaled(x, _TIME_UNITS, 3)
    return f"{_plain(v, 3)} {unit}"


def dollars(x: float) -> str:
    """``$0.00209``, ``$6.88``, ``$1,234``: three significant digits, never ``$3.07e-06``."""
    if x == 0 or not math.isfinite(x):
        return f"${x:g}"
    v = _round(x, 3)
    if abs(v) >= 1000:
        return f"${v:,.0f}"
    decimals = max(0, 2 - math.floor(math.log10(abs(v))))
    return f"${v:.{decimals}f}"


def count(n: int) -> str:
    return f"{n:,}"


def percent(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"
