"""Units of spec files: the unit is part of the key name, so nobody has to guess it.

``memory_bandwidth_tbps = 3.35`` reads like the datasheet row it was copied from, and a unit typo
(``memory_bandwidth_tbs``) is an unknown-key error instead of a silent factor of a thousand. Inside
narrowpipe every number is in SI base units (FLOP/s, bytes, bytes/s, seconds, watts, hertz, USD).

Conversions go through :class:`decimal.Decimal` so that ``3.35`` TB/s becomes exactly the float
``3.35e12`` (plain float multiplication can land one ulp off), which keeps dump -> load exact.

Bandwidth suffixes are bytes per second: ``gbps`` = GB/s and ``tbps`` = TB/s (the vendor headline
style). Network link rates in bits use ``gbitps`` / ``tbitps`` so 400 Gb/s NICs are never misread.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from types import MappingProxyType

__all__ = ["UNITS", "SI_SUFFIX", "to_si", "from_si"]


def _table(**factors: str) -> Mapping[str, Decimal]:
    return MappingProxyType({suffix: Decimal(f) for suffix, f in factors.items()})


#: Unit kind -> {key suffix: factor to the SI base unit}. The first entry is the SI unit itself.
UNITS: Mapping[str, Mapping[str, Decimal]] = MappingProxyType({
    # FLOP/s, and OP/s for integer dtypes (TOPS is written tflops).
    "flops": _table(flops="1", gflops="1e9", tflops="1e12", pflops="1e15"),
    # Bytes. Vendors' "GB" is often GiB; write the unit the source states.
    "bytes": _table(bytes="1", kb="1e3", kib="1024", mb="1e6", mib="1048576", gb="1e9",
                    gib="1073741824", tb="1e12", tib="1099511627776", pb="1e15"),
    # Bytes per second; *bitps* variants are bits per second.
    "bandwidth": _table(bytes_per_s="1", gbps="1e9", tbps="1e12", pbps="1e15",
                        gbitps="1.25e8", tbitps="1.25e11", pbitps="1.25e14"),
    "time": _table(s="1", ms="1e-3", us="1e-6", ns="1e-9"),
    "power": _table(w="1", kw="1e3"),
    "frequency": _table(hz="1", mhz="1e6", ghz="1e9"),
    "usd": _table(usd="1"),
})

#: Unit kind -> suffix of its SI base unit (``dump`` falls back to it when a human unit is inexact).
SI_SUFFIX: Mapping[str, str] = MappingProxyType({k: next(iter(t)) for k, t in UNITS.items()})


def _decimal(value: int | float) -> Decimal:
    # repr() is the shortest string that reads back as the same float: 3.35 -> Decimal("3.35").
    return Decimal(value) if isinstance(value, int) else Decimal(repr(value))


def to_si(value: int | float, factor: Decimal) -> float:
    """Convert a human-unit number to SI, correctly rounded (``3.35`` TB/s -> ``3.35e12``)."""
    return float(_decimal(value) * factor)


def from_si(value: float, factor: Decimal) -> int | float | None:
    """The human-unit number that converts back to exactly ``value``, or None if there is none.

    Integral results come back as ``int`` so dumped files read ``bf16 = 989`` not ``989.0``.
    """
    human = float(_decimal(value) / factor)
    if to_si(human, factor) != value:
        return None
    if human.is_integer() and abs(human) < 2**53:
        return int(human)
    return human
