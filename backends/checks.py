"""Value checks shared by the schema classes and the spec-file loader.

The loader runs them on the numbers as written (so an error quotes ``-3`` under the key
``memory_bandwidth_tbps``, which is what the user typed) and the dataclasses run them again on SI
values, so a target built in Python is held to the same rules as one read from a file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..errors import TargetSpecError
from .fields import Spec, specs
from .frozen import FrozenMap
from .slices import parse_slice
from .vocab import DTYPES

__all__ = ["check_value", "describe", "is_absent", "normalize_fields"]


def is_absent(value: Any) -> bool:
    """None, or an empty table/tuple: the field is not set (and needs no source)."""
    return value is None or (isinstance(value, (tuple, Mapping)) and len(value) == 0)


def describe(value: Any) -> str:
    """``value`` as the user wrote it, with its TOML type when the type is the problem."""
    kinds = {bool: "boolean", str: "string", int: "integer", float: "float", list: "array",
             tuple: "array", dict: "table", FrozenMap: "table"}
    kind = kinds.get(type(value), type(value).__name__)
    return f"{value!r} (a {kind})"


def _fail(label: str, expected: str, value: Any, *, show_type: bool = True) -> TargetSpecError:
    got = describe(value) if show_type else repr(value)
    return TargetSpecError(f"field {label!r}: expected {expected}, got {got}")


def _number(label: str, value: Any, allow_zero: bool) -> float:
    expected = "a non-negative number" if allow_zero else "a positive number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(label, expected, value)
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise _fail(label, expected, value, show_type=False)
    return float(value)


def _count(label: str, value: Any, allow_zero: bool) -> int:
    expected = "a non-negative integer" if allow_zero else "a positive integer"
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(label, expected, value)
    if value < 0 or (value == 0 and not allow_zero):
        raise _fail(label, expected, value, show_type=False)
    return value


def _fraction(label: str, value: Any, allow_zero: bool = False) -> float:
    expected = "a fraction in [0, 1]" if allow_zero else "a fraction in (0, 1]"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(label, expected, value)
    if not ((0 <= value if allow_zero else 0 < value) and value <= 1):
        raise _fail(label, expected, value, show_type=False)
    return float(value)


def _sequence(label: str, value: Any, expected: str) -> tuple[Any, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise _fail(label, expected, value)
    return tuple(value)


def _rates(label: str, value: Any, keys: tuple[str, ...] = ()) -> FrozenMap[str, float]:
    allowed = keys or DTYPES
    what = "dtype" if not keys else "key"
    if not hasattr(value, "items") or isinstance(value, (str, bytes)):
        raise _fail(label, f"a table of {what} = number", value)
    out: dict[str, float] = {}
    for dtype, rate in value.items():
        if dtype not in allowed:
            raise TargetSpecError(
                f"field '{label}.{dtype}': unknown {what} {dtype!r}; "
                f"expected one of: {', '.join(allowed)}")
        out[dtype] = _number(f"{label}.{dtype}", rate, allow_zero=False)
    return FrozenMap(out)


def _curve(label: str, value: Any) -> tuple[tuple[float, float], ...]:
    expected = "an array of [size, fraction] pairs with increasing sizes"
    points = _sequence(label, value, expected)
    out: list[tuple[float, float]] = []
    for i, point in enumerate(points):
        pair = _sequence(f"{label}[{i}]", point, "a [size, fraction] pair")
        if len(pair) != 2:
            raise _fail(f"{label}[{i}]", "a [size, fraction] pair", point, show_type=False)
        size = _number(f"{label}[{i}][0]", pair[0], allow_zero=False)
        frac = _fraction(f"{label}[{i}][1]", pair[1])
        if out and size <= out[-1][0]:
            raise _fail(label, expected, value, show_type=False)
        out.append((size, frac))
    return tuple(out)


def _tile(label: str, value: Any) -> tuple[int, int, int]:
    triple = _sequence(label, value, "an [M, N, K] array of 3 positive integers")
    if len(triple) != 3:
        raise _fail(label, "an [M, N, K] array of 3 positive integers", value, show_type=False)
    m, n, k = (_count(f"{label}[{i}]", x, allow_zero=False) for i, x in enumerate(triple))
    return (m, n, k)


def _grid(label: str, value: Any) -> tuple[tuple[int, int, int, float], ...]:
    """(M, N, K, fraction) points, one for every combination of the M, N and K values they list (a
    full grid, so it can be interpolated cell by cell), each shape once."""
    expected = "an array of [M, N, K, fraction] points"
    out: list[tuple[int, int, int, float]] = []
    for i, point in enumerate(_sequence(label, value, expected)):
        row = _sequence(f"{label}[{i}]", point, "an [M, N, K, fraction] point")
        if len(row) != 4:
            raise _fail(f"{label}[{i}]", "an [M, N, K, fraction] point", point, show_type=False)
        m, n, k = (_count(f"{label}[{i}][{j}]", x, allow_zero=False) for j, x in enumerate(row[:3]))
        out.append((m, n, k, _fraction(f"{label}[{i}][3]", row[3])))
    shapes = {p[:3] for p in out}
    axes = [{p[j] for p in out} for j in range(3)]
    if len(shapes) != len(out) or len(out) != len(axes[0]) * len(axes[1]) * len(axes[2]):
        raise TargetSpecError(f"field {label!r}: expected one point for every combination of its M, N and K "
                              f"values ({len(axes[0])} x {len(axes[1])} x {len(axes[2])}), got {len(out)} "
                              f"points for {len(shapes)} shapes")
    return tuple(sorted(out))


def _text(label: str, value: Any, spec: Spec) -> str:
    if not isinstance(value, str):
        raise _fail(label, "a string", value)
    if spec.required and not value.strip():
        raise _fail(label, "a non-empty string", value, show_type=False)
    if spec.choices and value and value not in spec.choices:  # "" is an optional field left unset
        raise TargetSpecError(f"field {label!r}: unknown value {value!r}; "
                              f"expected one of: {', '.join(spec.choices)}")
    return value


def check_value(label: str, spec: Spec, value: Any) -> Any:
    """Check ``value`` against ``spec`` and return it normalised (tuples, FrozenMap, float)."""
    kind = spec.kind
    if kind == "quantity":
        return _number(label, value, spec.allow_zero)
    if kind == "rates":
        return _rates(label, value, spec.keys)
    if kind == "count":
        return _count(label, value, spec.allow_zero)
    if kind == "fraction":
        return _fraction(label, value, spec.allow_zero)
    if kind == "flag":
        if not isinstance(value, bool):
            raise _fail(label, "true or false", value)
        return value
    if kind == "curve":
        return _curve(label, value)
    if kind == "tile":
        return _tile(label, value)
    if kind == "grid":
        return _grid(label, value)
    if kind == "tiles":
        tiles = _sequence(label, value, "an array of [M, N, K] tiles")
        return tuple(_tile(f"{label}[{i}]", t) for i, t in enumerate(tiles))
    if kind == "dims":
        dims = _sequence(label, value, "an array of positive integers")
        return tuple(_count(f"{label}[{i}]", d, allow_zero=False) for i, d in enumerate(dims))
    if kind == "flags":
        flags = _sequence(label, value, "an array of true/false, one per axis")
        for i, flag in enumerate(flags):
            if not isinstance(flag, bool):
                raise _fail(f"{label}[{i}]", "true or false", flag)
        return flags
    if kind == "slices":
        shapes = _sequence(label, value, "an array of slice shapes such as \"4x4x8\" or \"8x16w\"")
        for i, item in enumerate(shapes):
            parse_slice(f"{label}[{i}]", item)
        return shapes
    if kind == "text":
        return _text(label, value, spec)
    if kind == "level":
        if not isinstance(value, spec.schema):
            raise _fail(label, f"a {spec.schema.__name__}", value)
        return value
    if kind == "names":
        names = _sequence(label, value, "an array of strings")
        for i, item in enumerate(names):
            if not isinstance(item, str) or not item.strip():
                raise _fail(f"{label}[{i}]", "a non-empty string", item)
        return names
    raise AssertionError(f"check_value does not handle kind {kind!r}")


def normalize_fields(obj: Any) -> None:
    """Check and normalise every field of a frozen schema dataclass in place (from __post_init__).

    Absent optional fields stay absent; ``sources`` is left to :mod:`.sourcing`.
    """
    for name, spec in specs(type(obj)):
        value = getattr(obj, name)
        if spec.kind == "sources" or (is_absent(value) and not spec.required):
            continue
        if value is None:
            raise TargetSpecError(f"missing required field {name!r}")
        object.__setattr__(obj, name, check_value(name, spec, value))
