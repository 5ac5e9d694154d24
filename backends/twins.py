"""A user's spec file that keeps a catalog chip's name but not its numbers.

Copying ``backends/catalog/h100-sxm.toml`` and changing one number is the quickest what-if a user
can write, and the copy keeps ``name = "h100-sxm"``. Reported under that name, its result read as a
real H100's everywhere a name is all there is (a shared JSON, HTML page or trace), with the
catalog chip's kernel-accuracy check (looked up by name) claimed for numbers it was never checked
on. So such a chip is renamed where it is loaded, ``h100-sxm@h100-fast.toml`` (its name, then the
file it came from), with a warning that names the fields that differ as the file writes them.

Why that label: it stays a valid target name (:data:`~.target.NAME_PATTERN`, as the what-if
copies' ``h100-sxm@hbm_bandwidth=2``), keeps the chip it was copied from readable, can never be a
catalog name (none has an ``@``), and stays unique between two copies unless both files have the
same file name (then the comparison's twin check names both paths). The file's stem alone was not
enough: a copy saved as ``h100-sxm.toml`` would be named exactly as the catalog chip again.

A copy whose numbers all equal the catalog chip's (only its display name, notes or sources
edited) is that chip, and keeps its name and its check. :func:`differing_fields` is the one rule:
the kernel checks ask it too.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import NarrowpipeWarning
from .checks import is_absent
from .fields import specs
from .spelling import spelled, written_keys
from .target import Target

__all__ = ["differing_fields", "file_label", "renamed_copy", "CatalogNameWarning"]

#: Fields that say who a chip is or where its numbers come from, not how it runs.
_IDENTITY = frozenset({"name", "display_name", "vendor", "notes", "aliases", "sources"})
#: Differing fields named in a warning before "and N more".
_LISTED = 8


class CatalogNameWarning(NarrowpipeWarning):
    """A user's file keeps a catalog chip's name with other numbers: it is renamed, and said."""


def differing_fields(chip: Target, catalog: Target) -> list[str]:
    """The field keys (``memory_bandwidth``, ``matrix_flops.bf16``) whose values ``chip`` and
    ``catalog`` do not share, in declaration order; empty when ``chip`` runs as ``catalog`` does.
    Names, display names, notes and sources are not compared: they change no number."""
    if type(chip) is not type(catalog):
        return ["family"]
    out: list[str] = []
    for name, spec in specs(type(chip)):
        if name in _IDENTITY:
            continue
        mine, theirs = getattr(chip, name), getattr(catalog, name)
        if spec.kind == "rates":
            dtypes = [*mine, *(d for d in theirs if d not in mine)]
            out += [f"{name}.{d}" for d in dtypes if not _same(mine.get(d), theirs.get(d))]
        elif not _same(mine, theirs):
            out.append(name)
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal values; floats within a part in 10^9 (a bandwidth written in GB/s instead of TB/s
    converts to the same number up to the last bit)."""
    if is_absent(a) or is_absent(b):
        return is_absent(a) and is_absent(b)
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-9)
    return bool(a == b)


def _in_file(raw: Mapping[str, Any], written: Mapping[str, Any], key: str) -> bool:
    """Whether the file writes field ``key`` (a rate table's entry: that dtype in its table)."""
    head, _, dtype = key.partition(".")
    if head not in written:
        return False
    table = raw.get(written[head])
    return not dtype or (isinstance(table, Mapping) and dtype in table)


def file_label(name: str, path: str | os.PathLike[str]) -> str:
    """``name@file.toml``: a file's chip named so it cannot pass for the catalog chip ``name``
    (characters a target name may not hold become ``-``)."""
    return f"{name}@{re.sub(r'[^a-z0-9._-]', '-', Path(path).name.lower())}"


def renamed_copy(chip: Target, catalog: Target, path: str | os.PathLike[str],
                 raw: Mapping[str, Any]) -> Target:
    """``chip`` (loaded from ``path``, whose table is ``raw``) as a run reports it: itself when it runs
    as the catalog chip its name names does, else renamed by :func:`file_label`, without the
    catalog's aliases, with a warning naming the differing fields by the file's keys."""
    differ = differing_fields(chip, catalog)
    if not differ:
        return chip
    label = file_label(chip.name, path)
    written = written_keys(type(chip), raw)
    keys = [spelled(written, k) if _in_file(raw, written, k) else f"{k} (not in the file)" for k in differ]
    listed = ", ".join(keys[:_LISTED]) + (f" and {len(keys) - _LISTED} more" if len(keys) > _LISTED else "")
    warnings.warn(f"{path}: its chip keeps the catalog's name {chip.name!r} ({catalog.display_name}) but differs "
                  f"in {listed}; it is reported as {label!r}, so its results cannot pass for the catalog chip's "
                  "(and the catalog's kernel-model check is not claimed for it)", CatalogNameWarning, stacklevel=4)
    return dataclasses.replace(chip, name=label, aliases=(), display_name=f"{chip.display_name} ({Path(path).name})")
