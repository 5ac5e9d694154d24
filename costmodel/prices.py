"""Prices in USD per device-hour, as the API and the CLI take them: one rule for every entry point.

Why one module: ``compare`` resolved a price's key (alias, path, a file's chip) and refused bad
numbers, while ``plan_capacity`` looked the key up raw (a price for ``"h100"`` priced nothing and the
catalog's was used), ``analyze`` and ``serve`` took any float (a fleet at -$8/h ranked cheapest, NaN
written into the JSON). Every price now passes :func:`checked_price`, every mapping
:func:`prices_by_target`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from ..backends import Target, get_target, name_index
from ..errors import NarrowpipeError, NarrowpipeWarning

__all__ = ["checked_price", "prices_by_target", "price_per_target"]


def _bad(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0


def checked_price(value: Any, what: str = "price") -> float | None:
    """``value`` as a float, None left None; anything but a positive finite number is an error."""
    if value is None:
        return None
    if _bad(value):
        raise NarrowpipeError(f"{what} must be a positive number of USD per device-hour, got {value!r}")
    return float(value)


def prices_by_target(prices: Mapping[str, float] | None, known: Iterable[Target] = ()) -> dict[str, float]:
    """USD per device-hour keyed by canonical target name (users may write aliases or paths); each
    price must be a positive number. ``known`` are the targets in hand (a ``--target-file`` chip):
    a price may name them by name or alias, as ``--targets`` does (only the catalog was searched,
    so ``--price mychip=0.1`` for a file's chip was an unknown target)."""
    if prices is not None and not isinstance(prices, Mapping):
        raise NarrowpipeError(f"prices must map target names to USD per device-hour, got {type(prices).__name__}")
    bad = {k: v for k, v in (prices or {}).items() if _bad(v)}
    if bad:
        raise NarrowpipeError("prices must be positive USD per device-hour: "
                              + ", ".join(f"{k}={v!r}" for k, v in bad.items()))
    by_name = name_index(known)
    return {(by_name[k.lower()] if k.lower() in by_name else get_target(k)).name: float(v)
            for k, v in (prices or {}).items()}


def price_per_target(price: float | Mapping[str, float] | None, targets: Iterable[Target],
                     what: str = "price") -> dict[str, float]:
    """A price for each of ``targets`` that has one, by canonical name: one number for all, or a
    mapping resolved as :func:`prices_by_target` does; a price for a target not among them prices
    nothing and is warned about, as compare does."""
    chips = list(targets)
    if not isinstance(price, Mapping):
        one = checked_price(price, what)
        return {} if one is None else {t.name: one for t in chips}
    priced = prices_by_target(price, chips)
    unused = sorted(set(priced) - {t.name for t in chips})
    if unused:
        warnings.warn(f"{what} for {', '.join(unused)}: not among the targets, so it prices nothing",
                      NarrowpipeWarning, stacklevel=3)
    return priced
