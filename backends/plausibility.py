"""A user's spec-file numbers far outside every catalog chip of the family: most likely a unit slip.

The unit is part of each key (``memory_bandwidth_tbps``), so a number copied from a datasheet row in
another unit (864 GB/s written under ``_tbps``) loads as a valid, positive value a thousand times
off, and every prediction on that chip is silently wrong. Such slips are factors of about a
thousand; real chips of one family span far less (a T4's 0.32 TB/s to a B200's 8 TB/s). A value more
than :data:`ABOVE_FACTOR` times above the catalog's largest for the same family and field, or
:data:`BELOW_FACTOR` times below its least, is warned about, naming the key as written, the
catalog's extreme in the key's own unit and the chip that holds it. Below is far more lenient
because the catalog holds each family's large chips and small devices are real (this machine's
calibrated 2-core VM has 1/30 of the smallest catalog CPU's memory), and FLOP rates are not checked
below at all: a dtype without its unit on one chip runs emulated, thousands of times slower (this
VM's fp16 matmuls: 36 GFLOP/s; Xeon 6980P's AMX: 262 TFLOP/s). It is a warning, not an error: a
new kind of chip may legitimately lie outside.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from functools import cache
from typing import Any

from ..errors import NarrowpipeWarning
from .fields import keymap, specs

__all__ = ["ABOVE_FACTOR", "BELOW_FACTOR", "ImplausibleSpecWarning", "catalog_ranges", "implausible_values",
           "warn_implausible"]

#: How far above the catalog's largest value (as a factor) a value may lie before it is warned about.
ABOVE_FACTOR = 20.0
#: How far below the catalog's least value a quantity (not a FLOP rate) may lie before it is warned about.
BELOW_FACTOR = 1000.0

#: (field, dtype key or "") -> (least value, its chip, largest value, its chip), SI, nonzero values.
Ranges = Mapping[tuple[str, str], tuple[float, str, float, str]]


class ImplausibleSpecWarning(NarrowpipeWarning):
    """A spec-file value far outside the catalog's range for its family (probably the wrong unit)."""


def _numbers(value: Any) -> list[tuple[str, float]]:
    """(dtype key or "", value) of a quantity or a rates table; nothing for other kinds."""
    if isinstance(value, Mapping):
        return [(str(k), float(v)) for k, v in value.items() if isinstance(v, (int, float))]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [("", float(value))]
    return []


@cache
def catalog_ranges(family: str) -> Ranges:
    """Every quantity and rate of the catalog's chips of ``family``: its range over those chips."""
    from .registry import _targets  # the registry loads the loader, which loads this module

    out: dict[tuple[str, str], tuple[float, str, float, str]] = {}
    for chip in _targets().by_name.values():
        if chip.family != family:
            continue
        for name, spec in specs(type(chip)):
            if spec.kind not in ("quantity", "rates"):
                continue
            for key, v in _numbers(getattr(chip, name)):
                if v <= 0:
                    continue
                lo, lo_chip, hi, hi_chip = out.get((name, key), (v, chip.name, v, chip.name))
                out[name, key] = (*((v, chip.name) if v < lo else (lo, lo_chip)),
                                  *((v, chip.name) if v > hi else (hi, hi_chip)))
    return out


def implausible_values(cls: type, family: str, raw: Mapping[str, Any]) -> list[str]:
    """``key = value (how far, the catalog's extreme and its chip)`` for every number in ``raw`` (a
    spec file's table, keys as written) more than :data:`ABOVE_FACTOR` above the catalog's range
    for ``family`` (quantities: or :data:`BELOW_FACTOR` below it); the extreme is in the key's unit."""
    ranges = catalog_ranges(family)
    keys = keymap(cls)
    found = []
    for written, raw_value in raw.items():
        if written not in keys:
            continue
        name, spec, factor = keys[written]
        if spec.kind not in ("quantity", "rates") or factor is None:
            continue
        for dtype, human in _numbers(raw_value):
            span = ranges.get((name, dtype))
            si = human * float(factor)
            if span is None or si <= 0:
                continue
            lo, lo_chip, hi, hi_chip = span
            label = f"{written}.{dtype}" if dtype else written
            if si > hi * ABOVE_FACTOR:
                ratio, extreme, chip, side = si / hi, hi / float(factor), hi_chip, "above the largest"
            elif si < lo / BELOW_FACTOR and spec.kind == "quantity":
                ratio, extreme, chip, side = lo / si, lo / float(factor), lo_chip, "below the least"
            else:
                continue
            found.append(f"{label} = {human:g} ({ratio:,.0f}x {side}, {extreme:.4g} on {chip})")
    return found


def warn_implausible(cls: type, family: str, raw: Mapping[str, Any], origin: str) -> None:
    """Warn once for ``origin`` about every value :func:`implausible_values` finds."""
    found = implausible_values(cls, family, raw)
    if found:
        warnings.warn(f"{origin}: far outside every {family} chip in the catalog; is the number in another unit "
                      f"than its key's suffix? " + "; ".join(found), ImplausibleSpecWarning, stacklevel=4)
