"""The catalog: real chips and systems shipped as spec files, looked up by name or alias.

Loaded lazily on first use and cached, because most runs touch one target. (This module is not
called ``catalog.py`` because ``catalog/`` is the data folder beside it.) Names are matched
case-insensitively, with ``_`` and spaces read as ``-``; anything that looks like a path is loaded
as a user spec file, so a new chip needs no code.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterable, Mapping
from functools import cache, partial
from math import prod
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..errors import NarrowpipeError, TargetSpecError, UnknownTargetError
from .loader import load_system_file, load_target_file
from .system import System
from .target import Target
from .tomlio import read_toml
from .twins import renamed_copy

__all__ = ["CATALOG_DIR", "SYSTEMS_DIR", "targets", "get_target", "systems", "get_system",
           "source_refs", "clear_cache", "name_index", "is_system_file", "chip_and_system", "chip_on_system",
           "file_target"]

CATALOG_DIR = Path(__file__).parent / "catalog"
SYSTEMS_DIR = Path(__file__).parent / "systems"
_SOURCES_FILE = "SOURCES.toml"


class _Index:
    """Objects by canonical name plus an alias table, built from one folder of spec files."""

    def __init__(self, folder: Path, load: Callable[[Path], Any]) -> None:
        self.by_name: dict[str, Any] = {}
        self.alias: dict[str, str] = {}
        for path in sorted(folder.glob("*.toml")):
            if path.name == _SOURCES_FILE:
                continue
            obj = load(path)
            if obj.name != path.stem:
                raise TargetSpecError(f"{path}: field 'name': {obj.name!r} must match the file "
                                      f"name {path.stem!r}")
            for key in (obj.name, *obj.aliases):
                if key in self.by_name or key in self.alias:
                    raise TargetSpecError(f"{path}: name or alias {key!r} is already used")
                self.alias[key] = obj.name
            self.by_name[obj.name] = obj

    def lookup(self, spec: str, what: str) -> Any:
        key = spec.strip().lower().replace("_", "-").replace(" ", "-")
        name = self.alias.get(key) or self.alias.get(spec.strip().lower())
        if name is not None:
            return self.by_name[name]
        close = difflib.get_close_matches(key, list(self.alias), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(sorted({self.alias[c] for c in close}))}?" if close \
            else ""
        raise UnknownTargetError(f"unknown {what} {spec!r}.{hint} Known {what}s: "
                                 f"{', '.join(sorted(self.by_name))}; or pass a path to a "
                                 ".toml spec file.")


@cache
def _targets() -> _Index:
    return _Index(CATALOG_DIR, partial(load_target_file, require_sources=True))


@cache
def _systems() -> _Index:
    return _Index(SYSTEMS_DIR, partial(load_system_file, require_sources=True))


def clear_cache() -> None:
    """Forget the loaded catalog, e.g. after editing its files in a session."""
    _targets.cache_clear()
    _systems.cache_clear()
    source_refs.cache_clear()


def _is_path(spec: str | os.PathLike[str]) -> bool:
    return isinstance(spec, os.PathLike) or spec.endswith(".toml") or os.sep in spec \
        or "/" in spec


def targets() -> list[tuple[str, str]]:
    """(name, family) of every catalog target, sorted by name."""
    return sorted((name, t.family) for name, t in _targets().by_name.items())


def get_target(spec: str | os.PathLike[str] | Target) -> Target:
    """A target by catalog name, alias (any case), or path to a ``.toml`` spec file."""
    if isinstance(spec, Target):
        return spec
    if not isinstance(spec, (str, os.PathLike)):
        raise UnknownTargetError(f"expected a target name or path, got {spec!r}")
    if _is_path(spec):
        return file_target(spec)[1]
    try:
        target: Target = _targets().lookup(os.fspath(spec), "target")
    except UnknownTargetError:
        system = _system_named(os.fspath(spec))
        if system is None:
            raise
        raise UnknownTargetError(_system_as_chip(system, os.fspath(spec))) from None
    return target


def file_target(path: str | os.PathLike[str]) -> tuple[Target, Target]:
    """A user's chip file: (the chip as the file writes it, the chip as a run reports it). The two
    differ where the file keeps a catalog chip's name or alias with other numbers: that one is
    renamed ``name@file.toml``, with a warning (:mod:`.twins`), wherever a file is given (``--target``,
    ``--targets``, ``--target-file``, a system's ``chip``, the Python API): under the catalog's name
    its JSON, HTML and trace read as the catalog chip's, kernel check included. ``--target-file``
    needs the first too: ``--targets`` may name its chip by the name the file gives it."""
    if is_system_file(path):
        raise TargetSpecError(_system_as_chip(get_system(path), os.fspath(path)))
    chip = load_target_file(path)
    namesake = _catalog_chip(chip.name)
    if namesake is None:
        return chip, chip
    return chip, renamed_copy(chip, namesake, path, read_toml(path))


def _catalog_chip(name: str) -> Target | None:
    """The catalog chip ``name`` names (as a name or an alias), or None."""
    try:
        found: Target = _targets().lookup(name, "target")
    except UnknownTargetError:
        return None
    return found


def _system_named(spec: str) -> System | None:
    """The catalog system ``spec`` names, or None."""
    try:
        found: System = _systems().lookup(spec, "system")
    except UnknownTargetError:
        return None
    return found


def _system_as_chip(system: System, spec: str) -> str:
    """Why a system given where one chip is timed is refused, and what to give instead."""
    return (f"{spec} is a system ({system.devices} x {system.chip}), not a chip: this command times one "
            f"chip (give {system.chip!r}); plan and serve take the system (--target or --system)")


def is_system_file(spec: object) -> bool:
    """A ``.toml`` path whose table names a ``chip`` and no ``family``: a system's file, given where a
    chip or a system may be (read as a chip, its typos were reported as a missing ``family``)."""
    if not isinstance(spec, (str, os.PathLike)) or not os.fspath(spec).lower().endswith(".toml"):
        return False
    try:
        data = read_toml(spec)
    except NarrowpipeError:
        return False     # unreadable: the loader that reads it says why
    return "chip" in data and "family" not in data


def chip_and_system(spec: str | os.PathLike[str] | Target) -> tuple[Target, System | None]:
    """What a ``--target`` names where a chip or a system's file may stand: (its chip, the system)
    for a system file (:func:`is_system_file`, whose mistakes are reported as its own), else (the
    chip, None). One place, so every command reads a system file given as a target the same way."""
    if not isinstance(spec, Target) and is_system_file(spec):
        system = get_system(spec)
        return system.target(), system
    if isinstance(spec, str) and not _is_path(spec):
        try:
            return get_target(spec), None
        except UnknownTargetError:
            named = _system_named(spec)      # a catalog system's name (dgx-h100) where a chip may stand
            if named is None:
                raise
            return named.target(), named
    return get_target(spec), None


def chip_on_system(target: str | os.PathLike[str] | Target | None, system: str | os.PathLike[str] | System
                   ) -> tuple[Target, System]:
    """The chip a run on ``system`` uses when a ``target`` is named too: the same chip (by name or
    alias), else a :class:`TargetSpecError` (``--target tpu-v5e --system dgx-h100`` planned on H100s
    or priced a TPU's collectives on NVLink, saying nothing). ``target`` None: the system's chip."""
    found = get_system(system)
    chip = found.target()
    if target is None:
        return chip, found
    named = get_target(target) if not (isinstance(target, (str, os.PathLike)) and is_system_file(target)) \
        else get_system(target).target()
    if named.name != chip.name:
        raise TargetSpecError(f"--target {named.name} and --system {found.name}, a system of {chip.name}: name one "
                              f"of them, a system of {named.name}, or a system file whose chip is your chip's file")
    return named, found


def name_index(chips: Iterable[Target]) -> dict[str, Target]:
    """``chips`` (targets in hand: a ``--target-file``'s) by lower-case name and alias, the way
    :func:`get_target` finds catalog chips, so a user may name a file's chip either way."""
    return {n.lower(): t for t in chips for n in (t.name, *t.aliases)}


def systems() -> list[tuple[str, str]]:
    """(name, chip) of every catalog system, sorted by name."""
    return sorted((name, s.chip) for name, s in _systems().by_name.items())


def get_system(spec: str | os.PathLike[str] | System) -> System:
    """A system by catalog name, alias (any case), or path to a ``.toml`` spec file."""
    if isinstance(spec, System):
        return spec
    if not isinstance(spec, (str, os.PathLike)):
        raise UnknownTargetError(f"expected a system name or path, got {spec!r}")
    if _is_path(spec):
        return load_system_file(spec)
    try:
        system: System = _systems().lookup(os.fspath(spec), "system")
    except UnknownTargetError:
        derived = _slice_named(os.fspath(spec))
        if derived is None:
            raise
        return derived
    return system


def _slice_named(spec: str) -> System | None:
    """A standard slice named as the planner names it (``tpu-v5p-4x4x4``: the chip, then the shape),
    derived from the catalog pod that lists it, so a plan's system name reads back as that system."""
    key = spec.strip().lower()
    for pod in _systems().by_name.values():
        for shape in pod.slices:
            dims = shape.replace("w", "")
            if key == f"{pod.chip}-{dims}":
                found: System | None = pod.slice_of(prod(int(k) for k in dims.split("x")))
                return found
    return None


@cache
def source_refs() -> Mapping[str, Mapping[str, str]]:
    """Source key -> {"source": URL/reference, "date": ...}, from ``catalog/SOURCES.toml``."""
    raw = read_toml(CATALOG_DIR / _SOURCES_FILE)
    return MappingProxyType({k: MappingProxyType(dict(v)) for k, v in raw.items()})
