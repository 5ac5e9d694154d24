"""Spec files <-> schema objects: unit suffixes, typo detection, defaults and exact round trips.

The loader checks every key as the user wrote it, so an error reads
``my.toml: field 'memory_bandwidth_tbps': expected a positive number, got -3`` rather than
complaining about an SI value the user never typed. Unknown keys are errors with a suggestion:
a misspelt optional field must not silently vanish. Writing picks the field's human unit when the
number converts back exactly, else the SI unit, so ``load(dump(t)) == t`` always holds.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

from ..errors import TargetSpecError
from .checks import check_value, describe, is_absent
from .defaults import LINK_LATENCY_DEFAULT, default_for
from .families import TARGET_CLASSES
from .fields import Spec, keymap, specs, stem
from .frozen import FrozenMap
from .plausibility import warn_implausible
from .sourcing import UNSOURCED, UnsourcedSpecWarning, needed_keys, suggest
from .spelling import source_key, spelled, written_keys
from .system import System
from .target import Target
from .tomlio import dumps, read_toml
from .units import SI_SUFFIX, UNITS, from_si, to_si
from .vocab import DTYPES, FAMILIES

__all__ = ["target_from_dict", "target_to_dict", "load_target_file", "dump_target",
           "system_from_dict", "system_to_dict", "load_system_file", "dump_system"]

_HEADER = ("narrowpipe {what} spec. Units are key suffixes (tflops = 1e12 FLOP/s, gb = 1e9 bytes,\n"
           "tbps/gbps = TB/s / GB/s, gbitps = Gb/s, us = microseconds); see backends/units.py.\n"
           "Bandwidths are per device and one direction. Every number names its source in [sources].")
_INTERCONNECT = ("scale_up_bandwidth", "scale_out_bandwidth", "ici_link_bandwidth",
                 "chip_to_chip_bandwidth")


# ---------------------------------------------------------------- generic field decoding


def _decode(cls: type, raw: Mapping[str, Any], prefix: str = "",
            errors: list[str] | None = None) -> dict[str, Any]:
    """Field values (SI) from one TOML table, checked key by key as written.

    With ``errors``, a bad key is recorded there and the rest are still read, so one load reports
    every problem in the file at once (fixing a spec file one error per run is a chore).
    """
    collect: list[str] = [] if errors is None else errors
    keys = keymap(cls)
    values: dict[str, Any] = {}
    used: dict[str, str] = {}
    for key, raw_value in raw.items():
        label = prefix + key
        try:
            decoded = _decode_key(keys, key, label, raw_value, used, collect)
        except TargetSpecError as e:
            collect.append(str(e))
            continue
        if decoded is not None:
            values[decoded[0]] = decoded[1]
    if errors is None and collect:
        raise TargetSpecError(collect[0])
    return values


def _decode_key(keys: Mapping[str, tuple[str, Spec, Decimal | None]], key: str, label: str,
                raw_value: Any, used: dict[str, str], errors: list[str]) -> tuple[str, Any] | None:
    """(field name, SI value) of one key; None when a nested table had errors (recorded)."""
    if key not in keys:
        raise TargetSpecError(f"field {label!r}: unknown key{suggest(key, list(keys))}")
    name, spec, factor = keys[key]
    if name in used:
        raise TargetSpecError(f"field {label!r}: {name!r} is already given as "
                              f"{label[:len(label) - len(key)] + used[name]!r}")
    used[name] = key
    if spec.kind == "level":
        if not isinstance(raw_value, Mapping):
            raise TargetSpecError(f"field {label!r}: expected a table, got {describe(raw_value)}")
        before = len(errors)
        sub = _decode(spec.schema, raw_value, f"{label}.", errors)
        errors += _missing(spec.schema, sub, f"{label}.", written=raw_value)
        if len(errors) > before:
            return None
        try:
            return name, spec.schema(**sub)
        except TargetSpecError as e:
            raise TargetSpecError(f"{label}: {e}") from None
    value = check_value(label, spec, raw_value)
    if factor is not None and spec.kind == "rates":
        value = FrozenMap({d: to_si(r, factor) for d, r in value.items()})
    elif factor is not None:
        value = to_si(value, factor)
    return name, value


def _missing(cls: type, values: Mapping[str, Any], prefix: str = "",
             written: Mapping[str, Any] | None = None) -> list[str]:
    """One message per required field of ``cls`` that ``values`` lacks, with the key to write;
    a field ``written`` (the raw table) with a bad value has its error already."""
    attempted = _attempted(cls, written or {})
    out: list[str] = []
    for name, spec in specs(cls):
        if spec.required and name not in values and name not in attempted:
            example = f"{stem(name, spec)}_{spec.unit or SI_SUFFIX[spec.units]}" \
                if spec.units else name
            hint = f" (write it as {prefix}{example})" if example != name else ""
            out.append(f"missing required field {prefix + name!r}{hint}")
    return out


def _attempted(cls: type, raw: Mapping[str, Any]) -> frozenset[str]:
    """Fields a raw table writes, valid or not."""
    keys = keymap(cls)
    return frozenset(keys[k][0] for k in raw if k in keys)


def _require(cls: type, values: Mapping[str, Any], prefix: str = "") -> None:
    _raise_all(_missing(cls, values, prefix))


def _raise_all(errors: list[str]) -> None:
    """One error naming every problem: the first alone reads as before, several are listed."""
    if len(errors) == 1:
        raise TargetSpecError(errors[0])
    if errors:
        raise TargetSpecError(f"{len(errors)} problems:\n  " + "\n  ".join(errors))


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


def _sources(cls: type, raw: Any, values: Mapping[str, Any], *, require: bool = True,
             reported: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Flatten sources into field names, expand a table-wide source (``matrix_flops = "X"``) to
    its entries, and reject sources for values the file does not set (before defaults could fill
    them; fields in ``reported`` already have an error). Without ``require`` (a user's file), a
    number with no source gets :data:`UNSOURCED` (:func:`_warn_unsourced` says which once the file
    has loaded): the file is the user's own, the numbers their call."""
    sources: dict[str, Any] = {}
    for written, text in _flatten(raw).items():
        key = source_key(cls, written)
        if key in sources:
            raise TargetSpecError(f"field 'sources.{written}': the source of {key!r} is given twice")
        sources[key] = text
    fields = dict(specs(cls))
    for key in list(sources):
        spec = fields.get(key)
        if spec is not None and spec.kind == "rates":
            text = sources.pop(key)
            for dtype in values.get(key, {}):
                sources.setdefault(f"{key}.{dtype}", text)
            if not values.get(key) and key not in reported:
                raise TargetSpecError(f"field 'sources.{key}': a source for a value that is "
                                      "not set")
        elif key.split(".")[0] in fields and key.split(".")[0] not in values.keys() | reported:
            raise TargetSpecError(f"field 'sources.{key}': a source for a value that is not set")
    if not require:
        sources.update({k: UNSOURCED for k in needed_keys(cls, values) if k not in sources})
    return sources


def _warn_unsourced(obj: Any, raw: Mapping[str, Any], origin: str) -> None:
    """One warning naming the numbers of a user's file that have no source, by the keys the file
    writes them under (``tdp_w``, ``vector_tflops.fp32``: what the user greps for and may key a
    source by), once the file has loaded: before an error about the same file it is noise."""
    written = written_keys(type(obj), raw)
    missing = [spelled(written, k) for k, text in obj.sources.items() if text == UNSOURCED]
    if missing:
        warnings.warn(f"{origin}: no source for {', '.join(missing)}; the numbers are used as given "
                      "(write 'assumption: <why>' to say where one came from)", UnsourcedSpecWarning, stacklevel=4)


def _construct(cls: type, values: dict[str, Any], sources: dict[str, Any]) -> Any:
    _require(cls, values)
    return cls(**values, sources=sources)


# ---------------------------------------------------------------- generic field encoding


def _encode(obj: Any) -> dict[str, Any]:
    out, written = _encode_fields(obj)
    if hasattr(obj, "sources"):
        out["sources"] = {spelled(written, key): text for key, text in obj.sources.items()}
    return out


def _encode_fields(obj: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the TOML table of ``obj``'s fields, field name -> the key it was written under, nested
    for levels), so sources can be keyed the way their values are spelled."""
    out: dict[str, Any] = {}
    written: dict[str, Any] = {}
    for name, spec in specs(type(obj)):
        value = getattr(obj, name)
        if spec.kind == "sources" or is_absent(value) or value == "":
            continue
        key = name
        if spec.kind == "level":
            out[name], written[name] = _encode_fields(value)
            continue
        if spec.units is not None:
            suffix, human = _human(value, spec)
            key = f"{stem(name, spec)}_{suffix}"
            out[key] = human
        elif isinstance(value, tuple):
            out[name] = [list(v) if isinstance(v, tuple) else v for v in value]
        else:
            out[name] = value
        written[name] = key
    return out, written


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


def target_from_dict(raw: Mapping[str, Any], origin: str = "<dict>", *,
                     require_sources: bool = True) -> Target:
    """Build a target from parsed TOML (human units); errors are prefixed with ``origin``.

    Every problem in the file is reported in one error. ``require_sources=False`` (user files)
    turns a missing source into a warning; the catalog requires them.
    """
    try:
        return _target_from_dict(raw, require_sources, origin)
    except TargetSpecError as e:
        raise TargetSpecError(f"{origin}: {e}") from None


def _target_from_dict(raw: Mapping[str, Any], require_sources: bool, origin: str) -> Target:
    if not isinstance(raw, Mapping):
        raise TargetSpecError(f"expected a table of fields, got {describe(raw)}")
    family = raw.get("family")
    if family is None:
        raise TargetSpecError(f"missing required field 'family' (one of: {', '.join(FAMILIES)})")
    if family not in TARGET_CLASSES:
        raise TargetSpecError(f"field 'family': unknown family {family!r}; expected one of: "
                              f"{', '.join(FAMILIES)}")
    cls = TARGET_CLASSES[family]
    errors: list[str] = []
    values = _decode(cls, {k: v for k, v in raw.items() if k != "sources"}, errors=errors)
    defaults: dict[str, tuple[Any, str]] = {}
    for name, _spec in specs(cls):
        default = None if name in values else default_for(family, name)
        if default is not None:
            defaults[name] = default
    if "link_latency" not in values and any(values.get(f) for f in _INTERCONNECT):
        defaults["link_latency"] = LINK_LATENCY_DEFAULT
    errors += _missing(cls, {**values, **defaults}, written=raw)
    reported = _attempted(cls, raw) | {n for n, spec in specs(cls) if spec.required and n not in values}
    sources: dict[str, Any] = {}
    try:   # before defaults: see _sources
        sources = _sources(cls, raw.get("sources", {}), values, require=require_sources, reported=reported)
    except TargetSpecError as e:
        errors.append(str(e))
    _raise_all(errors)
    for name, (value, source) in defaults.items():
        values[name], sources[name] = value, source
    target: Target = _construct(cls, values, sources)
    if not require_sources:      # a user's numbers; the catalog's are the yardstick
        _warn_unsourced(target, raw, origin)
        warn_implausible(cls, family, raw, origin)
    return target


def target_to_dict(target: Target) -> dict[str, Any]:
    """The TOML document for ``target`` in human units (inverse of :func:`target_from_dict`)."""
    return _encode(target)


def load_target_file(path: str | os.PathLike[str], *, require_sources: bool = False) -> Target:
    """Read and validate one target spec file; every error names the file and the field. A user's
    file may leave sources out (a warning says which); the catalog loads with ``require_sources``."""
    return target_from_dict(read_toml(path), origin=str(path), require_sources=require_sources)


def dump_target(target: Target, path: str | os.PathLike[str]) -> Path:
    """Write ``target`` as a spec file that :func:`load_target_file` reads back equal."""
    p = Path(path)
    p.write_text(dumps(target_to_dict(target), _HEADER.format(what="target")), encoding="utf-8")
    return p


# ---------------------------------------------------------------- systems


def system_from_dict(raw: Mapping[str, Any], origin: str = "<dict>", *,
                     require_sources: bool = True) -> System:
    """Build a system from parsed TOML; errors (all of them at once) are prefixed with ``origin``."""
    try:
        if not isinstance(raw, Mapping):
            raise TargetSpecError(f"expected a table of fields, got {describe(raw)}")
        errors: list[str] = []
        values = _decode(System, {k: v for k, v in raw.items() if k != "sources"}, errors=errors)
        errors += _missing(System, values, written=raw)
        sources: dict[str, Any] = {}
        try:
            sources = _sources(System, raw.get("sources", {}), values, require=require_sources,
                               reported=_attempted(System, raw))
        except TargetSpecError as e:
            errors.append(str(e))
        _raise_all(errors)
        system: System = _construct(System, values, sources)
        if not require_sources:
            _warn_unsourced(system, raw, origin)
        return system
    except TargetSpecError as e:
        raise TargetSpecError(f"{origin}: {e}") from None


def system_to_dict(system: System) -> dict[str, Any]:
    """The TOML document for ``system`` (inverse of :func:`system_from_dict`)."""
    return _encode(system)


def load_system_file(path: str | os.PathLike[str], *, require_sources: bool = False) -> System:
    """Read and validate one system spec file (sources optional for a user's, as for targets). A
    relative ``chip = "mychip.toml"`` names the file beside this one (it was read from the current
    folder, so the same system worked from one folder and not from another)."""
    data = read_toml(path)
    chip = data.get("chip")
    if isinstance(chip, str) and chip.lower().endswith(".toml") and not os.path.isabs(chip):
        beside = Path(path).parent / chip
        if beside.is_file():
            data = {**data, "chip": str(beside)}
    return system_from_dict(data, origin=str(path), require_sources=require_sources)


def dump_system(system: System, path: str | os.PathLike[str]) -> Path:
    """Write ``system`` as a spec file that :func:`load_system_file` reads back equal."""
    p = Path(path)
    p.write_text(dumps(system_to_dict(system), _HEADER.format(what="system")), encoding="utf-8")
    return p
