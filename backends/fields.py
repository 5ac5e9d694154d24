"""Field metadata: what each schema field holds, its units, and how it is spelled in a spec file.

One declaration per field drives validation, loading, dumping, source bookkeeping and what-if
scaling, so adding a field to a schema is one line and cannot leave the loader out of sync.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from .frozen import FrozenMap
from .units import SI_SUFFIX, UNITS

__all__ = ["Spec", "spec_field", "specs", "stem", "file_keys", "keymap", "NUMERIC_KINDS"]

#: Kinds of field. quantity: a physical number with units; rates: dtype -> FLOP/s table;
#: count: an integer; fraction: in (0, 1]; flag: bool; curve: ((size, fraction), ...);
#: tiles: ((M, N, K), ...); tile: (M, N, K); dims: (int, ...); flags: (bool, ...) (one per axis);
#: text: str; names: (str, ...); slices: ("4x4x8", "8x16w", ...) the standard slice shapes of a
#: pod, ``w`` marking an axis closed by wraparound links (:mod:`.slices`);
#: grid: ((M, N, K, fraction), ...) over every combination of the listed M, N and K;
#: level: a nested network level (systems only); sources: field -> source key.
KINDS = ("quantity", "rates", "count", "fraction", "flag", "curve", "tiles", "tile", "dims",
         "flags", "text", "names", "slices", "level", "sources", "grid")

#: Kinds whose values are facts about hardware and therefore need a source.
NUMERIC_KINDS = frozenset({"quantity", "rates", "count", "fraction", "flag", "curve", "tiles",
                           "tile", "dims", "flags", "slices", "grid"})


@dataclass(frozen=True)
class Spec:
    """How one dataclass field is checked and written. ``units`` names a table in ``UNITS``."""

    kind: str
    units: str | None = None
    unit: str | None = None          # preferred human suffix when dumping
    required: bool = False
    allow_zero: bool = False         # quantities/counts that may be 0 (overheads, absent memory)
    choices: tuple[str, ...] = ()    # allowed values of a text field
    stem: str | None = None          # key stem when it is not the field name minus its SI suffix
    schema: Any = None               # the nested dataclass of a "level" field
    keys: tuple[str, ...] = ()       # allowed keys of a "rates" table (default: the dtypes)

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind
        assert (self.units is not None) == (self.kind in ("quantity", "rates")), self
        assert self.unit is None or self.unit in UNITS[self.units or ""], self


def spec_field(kind: str, *, units: str | None = None, unit: str | None = None,
               required: bool = False, allow_zero: bool = False,
               choices: tuple[str, ...] = (), stem: str | None = None, schema: Any = None,
               keys: tuple[str, ...] = ()) -> Any:
    """A dataclass field carrying its :class:`Spec`; optional fields default to "absent"."""
    spec = Spec(kind, units, unit, required, allow_zero, choices, stem, schema, keys)
    meta = {"spec": spec}
    if required:
        return dataclasses.field(metadata=meta)
    if kind == "rates" or kind == "sources":
        return dataclasses.field(default=FrozenMap(), metadata=meta)
    if kind in ("curve", "tiles", "dims", "flags", "names", "slices", "grid"):
        return dataclasses.field(default=(), metadata=meta)
    if kind == "text":
        return dataclasses.field(default="", metadata=meta)
    return dataclasses.field(default=None, metadata=meta)


_SPECS: dict[type, tuple[tuple[str, Spec], ...]] = {}


def specs(cls: type) -> tuple[tuple[str, Spec], ...]:
    """(field name, spec) for every field of a schema dataclass, in declaration order."""
    if cls not in _SPECS:
        _SPECS[cls] = tuple((f.name, f.metadata["spec"]) for f in dataclasses.fields(cls)
                            if "spec" in f.metadata)
    return _SPECS[cls]


def stem(name: str, spec: Spec) -> str:
    """The key stem a unit suffix is appended to: ``l2_bytes`` -> ``l2`` (so ``l2_mb``)."""
    if spec.stem is not None:
        return spec.stem
    if spec.units is None:
        return name
    si = "_" + SI_SUFFIX[spec.units]
    return name[: -len(si)] if name.endswith(si) else name


def file_keys(name: str, spec: Spec) -> tuple[str, ...]:
    """Every spelling of a field in a spec file; the unit is the key's suffix."""
    if spec.units is None:
        return (name,)
    base = stem(name, spec)
    return tuple(f"{base}_{suffix}" for suffix in UNITS[spec.units])


_KEYMAPS: dict[type, dict[str, tuple[str, Spec, Decimal | None]]] = {}


def keymap(cls: type) -> dict[str, tuple[str, Spec, Decimal | None]]:
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
