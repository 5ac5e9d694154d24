"""Source bookkeeping: every hardware fact in a target or system names where it came from.

A cost model is only as credible as its inputs, so a number without a source is an error rather
than a silent default. Keys are field names, dotted for table entries (``matrix_flops.bf16``) and
nested levels (``scale_up.bandwidth``). A guess is allowed, but it must say so:
``"assumption: <why>"``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from ..errors import NarrowpipeWarning, TargetSpecError
from .checks import is_absent
from .fields import NUMERIC_KINDS, specs
from .frozen import FrozenMap
from .vocab import DTYPES

__all__ = ["value_keys", "needed_keys", "possible_keys", "check_sources", "suggest", "UNSOURCED",
           "UnsourcedSpecWarning"]

#: The source a user file's unsourced number gets (with a warning); the catalog never has one.
UNSOURCED = "unsourced: the spec file gives no source"


class UnsourcedSpecWarning(NarrowpipeWarning):
    """A user's spec file has numbers without a source: loaded, but said."""


def value_keys(obj: Any, prefix: str = "") -> list[str]:
    """Source keys of the facts ``obj`` actually holds, in declaration order."""
    return needed_keys(type(obj), {name: getattr(obj, name) for name, _ in specs(type(obj))}, prefix)


def needed_keys(cls: type, values: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Source keys that field ``values`` of schema ``cls`` need (before the object exists)."""
    keys: list[str] = []
    for name, spec in specs(cls):
        value: Any = values.get(name)
        if is_absent(value):
            continue
        if spec.kind == "level":
            keys += value_keys(value, f"{prefix}{name}.")
        elif spec.kind == "rates":
            keys += [f"{prefix}{name}.{dtype}" for dtype in (spec.keys or DTYPES) if dtype in value]
        elif spec.kind in NUMERIC_KINDS:
            keys.append(prefix + name)
    return keys


def possible_keys(cls: type, prefix: str = "") -> list[str]:
    """Every source key a schema class could need, for typo suggestions."""
    keys: list[str] = []
    for name, spec in specs(cls):
        if spec.kind == "level":
            keys += possible_keys(spec.schema, f"{prefix}{name}.")
        elif spec.kind == "rates":
            keys += [f"{prefix}{name}.{dtype}" for dtype in (spec.keys or DTYPES)]
        elif spec.kind in NUMERIC_KINDS:
            keys.append(prefix + name)
    return keys


def suggest(word: str, candidates: list[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest candidate, or nothing."""
    close = difflib.get_close_matches(word, candidates, n=3, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


def check_sources(obj: Any) -> FrozenMap[str, str]:
    """Check ``obj.sources`` covers exactly the facts ``obj`` holds; return it in field order."""
    sources = obj.sources
    if not isinstance(sources, Mapping):
        raise TargetSpecError(f"field 'sources': expected a table, got {sources!r}")
    needed = value_keys(obj)
    needed_set = set(needed)
    universe = possible_keys(type(obj))
    for key, text in sources.items():
        if not isinstance(key, str) or key not in universe:
            hint = suggest(str(key), universe)
            raise TargetSpecError(f"field 'sources.{key}': no such field{hint}")
        if not isinstance(text, str) or not text.strip():
            raise TargetSpecError(
                f"field 'sources.{key}': expected a non-empty string, got {text!r}")
        if key not in needed_set:
            raise TargetSpecError(f"field 'sources.{key}': a source for a value that is not set")
    missing = [key for key in needed if key not in sources]
    if missing:
        raise TargetSpecError(
            "no source for " + ", ".join(repr(k) for k in missing)
            + "; every number needs one (write 'assumption: <why>' for a guess)")
    return FrozenMap((key, sources[key]) for key in needed)
