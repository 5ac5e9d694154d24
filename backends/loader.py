"""Spec files <-> schema objects: unit suffixes, typo detection, defaults and exact round trips.

The loader checks every key as the user wrote it, so an error reads
``my.toml: field 'memory_bandwidth_tbps': expected a positive number, got -3`` rather than
complaining about an SI value the user never typed. Unknown keys are errors with a suggestion:
a misspelt optional field must not silently vanish. Writing picks the field's human unit when the
number converts back exactly, else the SI unit, so ``load(dump(t)) == t`` always holds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

from ..errors import TargetSpecError
from .checks import check_value, describe, is_absent
from .defaults import LINK_LATENCY_DEFAULT, default_for
from .families import TARGET_CLASSES
from .fields import Spec, file_keys, specs, stem
from .frozen import FrozenMap
from .sourcing import suggest
from .system import System
from .target import Target
from .tomlio import dumps, read_toml
from .units import SI_SUFFIX, UNITS, from_si, to_si
from .vocab import DTYPES, FAMILIES

__all__ = ["target_from_dict", "target_to_dict", "load_target_file", "dump_target",
           "system_from_dict", "system_to_dict", "load_system_file", "dump_system"]

_HEADER = ("narrowpipe {what} spec. Units are key suffixes (tflops = 1e12 FLOP/s, gb = 1e9 bytes,\n"
           "tbps/gbps = TB/s / GB/s, gbitps = Gb/s, us = microseconds); see backends/units.py.\n"
           "Bandwidths are per device and one direction. Every number needs a [sources] entry.")
_INTERCONNECT = ("scale_up_bandwidth", "scale_out_bandwidth", "ici_link_bandwidth",
                 "chip_to_chip_bandwidth")


# ---------------------------------------------------------------- generic field decoding


_KEYMAPS: dict[type, dict[str, tuple[str, Spec, Decimal | None]]] = {}


def _keymap(cls: type) -> dict[str, tuple[str, Spec, Decimal | None]]:
    """file key -> (field, spec, unit factor) for every spelling of every field of ``cls``."""
    if cls in _KEYMAPS:
        return _KEYMAPS[cls]
    keys: dict[str, tuple[str, Spec, Decimal | None]] = {}
    for name, spec in specs(cls):
        if spec.kind == "sources":
            continue
        for key in file_keys(name, spec):
            factor = UNITS[spec.units][key[len(stem(name, spec)) + 1:]] if spec.units else None
            assert key not in keys, f"{cls.__name__}: key {key!r} is ambiguous"
            keys[key] = (name, spec, factor)
    _KEYMAPS[cls] = keys
    return keys


def _decode(cls: type, raw: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Field values (SI) from one TOML table, checked key by key as written."""
    keymap = _keymap(cls)
    values: dict[str, Any] = {}
    used: dict[str, str] = {}
    for key, raw_value in raw.items():
        label = prefix + key
        if key not in keymap:
            raise TargetSpecError(f"field {label!r}: unknown key{suggest(key, list(keymap))}")
        name, spec, factor = keymap[key]
        if name in used:
            raise TargetSpecError(f"field {label!r}: {name!r} is already given as "
                                  f"{prefix + used[name]!r}")
        used[name] = key
        if spec.kind == "level":
            if not isinstance(raw_value, Mapping):
                raise TargetSpecError(f"field {label!r}: expected a table, got "
                                      f"{describe(raw_value)}")
            sub = _decode(spec.schema, raw_value, f"{label}.")
            _require(spec.schema, sub, f"{label}.")
            try:
                values[name] = spec.schema(**sub)
            except TargetSpecError as e:
                raise TargetSpecError(f"{label}: {e}") from None
            continue
        value = check_value(label, spec, raw_value)
        if factor is not None and spec.kind == "rates":
            value = FrozenMap({d: to_si(r, factor) for d, r in value.items()})
        elif factor is not None:
            value = to_si(value, factor)
        values[name] = value
    return values


def _require(cls: type, values: Mapping[str, Any], prefix: str = "") -> None:
    for name, spec in specs(cls):
        if spec.required and name not in values:
            example = f"{stem(name, spec)}_{spec.unit or SI_SUFFIX[spec.units]}" \
                if spec.units else name
            hint = f" (write it as {prefix}{example})" if example != name else ""
            raise TargetSpecError(f"missing required field {prefix + name!r}{hint}")


def _flatten(raw: Any, prefix: str = "") -> dict[str, Any]:
    """``[sources]`` as flat dotted keys; TOML dotted keys arrive as nested tables."""
    if not isinstance(raw, Mapping):
        raise TargetSpecError(f"field 'sources': expected a table, got {describe(raw)}")
    flat: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat


def _sources(cls: type, raw: Any, values: Mapping[str, Any]) -> dict[str, Any]:
    """Flatten sources, expand a table-wide source (``matrix_flops = "X"``) to its entries, and
    reject sources for values the file does not set (before defaults could fill them)."""
    sources = _flatten(raw)
    fields = dict(specs(cls))
    for key in list(sources):
        spec = fields.get(key)
        if spec is not None and spec.kind == "rates":
            text = sources.pop(key)
            for dtype in values.get(key, {}):
                sources.setdefault(f"{key}.{dtype}", text)
            if not values.get(key):
                raise TargetSpecError(f"field 'sources.{key}': a source for a value that is "
                                      "not set")
        elif key.split(".")[0] in fields and key.split(".")[0] not in values:
            raise TargetSpecError(f"field 'sources.{key}': a source for a value that is not set")
    return sources


def _construct(cls: type, values: dict[str, Any], sources: dict[str, Any]) -> Any:
    _require(cls, values)
    return cls(**values, sources=sources)


# ---------------------------------------------------------------- generic field encoding


def _encode(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, spec in specs(type(obj)):
        value = getattr(obj, name)
        if spec.kind == "sources" or is_absent(value) or value == "":
            continue
        if spec.kind == "level":
            out[name] = _encode(value)
        elif spec.units is not None:
            suffix, human = _human(value, spec)
            out[f"{stem(name, spec)}_{suffix}"] = human
        elif isinstance(value, tuple):
            out[name] = [list(v) if isinstance(v, tuple) else v for v in value]
        else:
            out[name] = value
    if hasattr(obj, "sources"):
        out["sources"] = dict(obj.sources)
    return out


def _human(value: Any, spec: Spec) -> tuple[str, Any]:
    """(unit suffix, number or table) that reads back exactly, shortest first.

    The field's preferred unit wins ties, so ``95 GiB`` dumps as ``memory_capacity_gib = 95``
    rather than ``memory_capacity_gb = 102.00547328``; SI is the exact last resort.
    """
    assert spec.units is not None
    units = UNITS[spec.units]
    order = [spec.unit or SI_SUFFIX[spec.units]] + [u for u in units if u != spec.unit]
    best: tuple[int, str, Any] | None = None
    for suffix in order:
        if spec.kind == "rates":
            table = {d: from_si(value[d], units[suffix]) for d in (spec.keys or DTYPES) if d in value}
            if any(h is None for h in table.values()):
                continue
            human: Any = table
            length = sum(len(repr(h)) for h in table.values())
        else:
            human = from_si(value, units[suffix])
            if human is None:
                continue
            length = len(repr(human))
        if best is None or length < best[0]:
            best = (length, suffix, human)
    assert best is not None  # the SI unit (factor 1) is always exact
    return best[1], best[2]


# ---------------------------------------------------------------- targets


def target_from_dict(raw: Mapping[str, Any], origin: str = "<dict>") -> Target:
    """Build a target from parsed TOML (human units); errors are prefixed with ``origin``."""
    try:
        return _target_from_dict(raw)
    except TargetSpecError as e:
        raise TargetSpecError(f"{origin}: {e}") from None


def _target_from_dict(raw: Mapping[str, Any]) -> Target:
    if not isinstance(raw, Mapping):
        raise TargetSpecError(f"expected a table of fields, got {describe(raw)}")
    family = raw.get("family")
    if family is None:
        raise TargetSpecError(f"missing required field 'family' (one of: {', '.join(FAMILIES)})")
    if family not in TARGET_CLASSES:
        raise TargetSpecError(f"field 'family': unknown family {family!r}; expected one of: "
                              f"{', '.join(FAMILIES)}")
    cls = TARGET_CLASSES[family]
    values = _decode(cls, {k: v for k, v in raw.items() if k != "sources"})
    defaults: dict[str, tuple[Any, str]] = {}
    for name, _spec in specs(cls):
        default = None if name in values else default_for(family, name)
        if default is not None:
            defaults[name] = default
    if "link_latency" not in values and any(values.get(f) for f in _INTERCONNECT):
        defaults["link_latency"] = LINK_LATENCY_DEFAULT
    _require(cls, {**values, **defaults})
    sources = _sources(cls, raw.get("sources", {}), values)  # before defaults: see _sources
    for name, (value, source) in defaults.items():
        values[name], sources[name] = value, source
    target: Target = _construct(cls, values, sources)
    return target


def target_to_dict(target: Target) -> dict[str, Any]:
    """The TOML document for ``target`` in human units (inverse of :func:`target_from_dict`)."""
    return _encode(target)


def load_target_file(path: str | os.PathLike[str]) -> Target:
    """Read and validate one target spec file; every error names the file and the field."""
    return target_from_dict(read_toml(path), origin=str(path))


def dump_target(target: Target, path: str | os.PathLike[str]) -> Path:
    """Write ``target`` as a spec file that :func:`load_target_file` reads back equal."""
    p = Path(path)
    p.write_text(dumps(target_to_dict(target), _HEADER.format(what="target")), encoding="utf-8")
    return p


# ---------------------------------------------------------------- systems


def system_from_dict(raw: Mapping[str, Any], origin: str = "<dict>") -> System:
    """Build a system from parsed TOML; errors are prefixed with ``origin``."""
    try:
        if not isinstance(raw, Mapping):
            raise TargetSpecError(f"expected a table of fields, got {describe(raw)}")
        values = _decode(System, {k: v for k, v in raw.items() if k != "sources"})
        _require(System, values)
        system: System = _construct(System, values,
                                    _sources(System, raw.get("sources", {}), values))
        return system
    except TargetSpecError as e:
        raise TargetSpecError(f"{origin}: {e}") from None


def system_to_dict(system: System) -> dict[str, Any]:
    """The TOML document for ``system`` (inverse of :func:`system_from_dict`)."""
    return _encode(system)


def load_system_file(path: str | os.PathLike[str]) -> System:
    """Read and validate one system spec file."""
    return system_from_dict(read_toml(path), origin=str(path))


def dump_system(system: System, path: str | os.PathLike[str]) -> Path:
    """Write ``system`` as a spec file that :func:`load_system_file` reads back equal."""
    p = Path(path)
    p.write_text(dumps(system_to_dict(system), _HEADER.format(what="system")), encoding="utf-8")
    return p
