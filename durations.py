"""Durations as the CLI and the API take them: ``"30ms"``, ``"0.5s"``, ``"250us"``, or a number.

One parser for both, so ``plan_capacity(tpot="30ms")`` means what ``--tpot 30ms`` means (it was a
raw ``TypeError`` comparing a string with 0). A bare number is the caller's unit: milliseconds on
the command line (``--tpot 30``), seconds in the API (``tpot=0.03``); a bare numeric string in the
API is refused rather than guessed.
"""

from __future__ import annotations

import math
import re

from .errors import NarrowpipeError

__all__ = ["parse_duration", "as_seconds"]

_UNITS = {"ms": 1e-3, "s": 1.0, "us": 1e-6}
#: A signed number so that ``--tpot=-30ms`` is refused for its sign ("must be positive"), not as text
#: that is no duration at all.
_PATTERN = re.compile(r"\s*([-+]?[0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*(ms|s|us)?\s*")


def parse_duration(text: str | None, flag: str, bare_unit: str | None = "ms") -> float | None:
    """``text`` in seconds; a number without a unit is in ``bare_unit`` (None: a unit is required).
    Every duration taken is a latency target, so zero and negative ones are refused here, by flag."""
    if text is None:
        return None
    m = _PATTERN.fullmatch(str(text))
    if not m:
        raise NarrowpipeError(f"{flag} expects a duration such as 30ms or 0.5s, got {text!r}")
    if m.group(2) is None and bare_unit is None:
        raise NarrowpipeError(f"{flag} {text!r} has no unit: write seconds as a number (0.03) or a duration "
                              "with its unit ('30ms', '0.5s', '250us')")
    seconds = float(m.group(1)) * _UNITS[m.group(2) or str(bare_unit)]
    if not (math.isfinite(seconds) and seconds > 0):
        raise NarrowpipeError(f"{flag} must be a positive duration, got {text!r}")
    return seconds


def as_seconds(value: object, what: str) -> float | None:
    """An API duration: a positive finite number of seconds, or a string with its unit (``"30ms"``)."""
    if value is None:
        return None
    if isinstance(value, str):
        seconds = parse_duration(value, what, bare_unit=None)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NarrowpipeError(f"{what} must be seconds (0.03) or a duration such as '30ms', got {value!r}")
    else:
        seconds = float(value)
    if seconds is None or not (math.isfinite(seconds) and seconds > 0):
        raise NarrowpipeError(f"{what} must be a positive finite duration, got {value!r}")
    return seconds
