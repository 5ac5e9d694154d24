"""Checking a document against the shipped schema without the ``jsonschema`` package.

Why: the readers (``Report.from_json``, ``Plan.from_json``) must refuse a damaged file with a
narrowpipe error naming the field, and the schema already says what every field holds. Checking each
field by hand in each reader drifted from the schema (a ``flops`` of ``"abc"`` loaded, a missing
``parallel.tp`` became 1), while ``jsonschema`` is only a test extra. The bundle uses a small part
of JSON Schema 2020-12, implemented here with its semantics (an ``integer`` may be written ``3.0``,
a boolean is no number); a keyword outside that part is an error, so the schema cannot grow a
constraint the readers would silently skip. ``tests/schema`` holds this checker to ``jsonschema``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

from ..errors import NarrowpipeError

__all__ = ["check_against", "SchemaMismatch", "read_version", "added_after"]

#: Keywords that say nothing about a value (annotations and the bundle's bookkeeping).
_NOTES = frozenset({"description", "title", "$schema", "$id", "$defs", "$comment"})
_CHECKED = frozenset({"type", "properties", "required", "additionalProperties", "items", "$ref", "const", "enum",
                      "anyOf", "oneOf", "minimum"})


class SchemaMismatch(NarrowpipeError):
    """A document does not match its schema: ``path`` (``ops/3/flops``) and ``reason``."""

    def __init__(self, path: str, reason: str) -> None:
        self.path, self.reason = path or "(top level)", reason
        super().__init__(f"{self.path}: {reason}")


def _is_type(value: Any, name: str) -> bool:
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "object":
        return isinstance(value, Mapping)
    if name == "array":
        return isinstance(value, list)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False                     # JSON has no NaN or Infinity
    if name == "number":
        return True
    if name == "integer":
        return isinstance(value, int) or value.is_integer()
    raise NarrowpipeError(f"schema: unknown type {name!r}")


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, ``1.0`` is ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b or (isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == b)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Checker:
    def __init__(self, bundle: Mapping[str, Any], may_lack: Collection[str]) -> None:
        self.defs, self.may_lack = bundle["$defs"], frozenset(may_lack)

    def check(self, value: Any, node: Mapping[str, Any], path: str, pattern: str = "") -> None:
        unknown = set(node) - _CHECKED - _NOTES
        if unknown:
            raise NarrowpipeError(f"schema: keyword(s) {', '.join(sorted(unknown))} at {path or 'top'} are not "
                                  "checked by narrowpipe.schema.check (add them there)")
        if "$ref" in node:
            self.check(value, self.defs[node["$ref"].rsplit("/", 1)[-1]], path, pattern)
        if "type" in node:
            names = node["type"] if isinstance(node["type"], list) else [node["type"]]
            if not any(_is_type(value, n) for n in names):
                raise SchemaMismatch(path, f"{_shown(value)} is not of type {' or '.join(names)}")
        if "const" in node and not _same(value, node["const"]):
            raise SchemaMismatch(path, f"{_shown(value)} is not {node['const']!r}")
        if "enum" in node and not any(_same(value, e) for e in node["enum"]):
            raise SchemaMismatch(path, f"{_shown(value)} is not one of {', '.join(map(repr, node['enum']))}")
        if "minimum" in node and _is_type(value, "number") and value < node["minimum"]:
            raise SchemaMismatch(path, f"{_shown(value)} is below the minimum {node['minimum']}")
        for key in ("anyOf", "oneOf"):
            if key in node:
                errors = [self._mismatch(value, option, path, pattern) for option in node[key]]
                matched = errors.count(None)
                failed = [e for e in errors if e is not None]
                deeper = [e for e in failed if e.path != (path or "(top level)") or "lacks" in e.reason]
                if matched == 0 and deeper:   # the form of the value's type, wrong inside: say where
                    raise deeper[0]
                if matched == 0 or (key == "oneOf" and matched > 1):
                    raise SchemaMismatch(path, f"{_shown(value)} matches {'none' if not matched else matched} "
                                               f"of the {len(node[key])} forms it may take")
        if isinstance(value, Mapping):
            self._object(value, node, path, pattern)
        if isinstance(value, list) and "items" in node:
            for i, item in enumerate(value):
                self.check(item, node["items"], _join(path, str(i)), _join(pattern, "*"))

    def _mismatch(self, value: Any, node: Mapping[str, Any], path: str, pattern: str) -> SchemaMismatch | None:
        try:
            self.check(value, node, path, pattern)
        except SchemaMismatch as e:
            return e
        return None

    def _object(self, value: Mapping[str, Any], node: Mapping[str, Any], path: str, pattern: str) -> None:
        props = node.get("properties", {})
        missing = [k for k in node.get("required", ()) if k not in value and _join(pattern, k) not in self.may_lack]
        if missing:
            raise SchemaMismatch(path, f"lacks the field {missing[0]!r}")
        extra = node.get("additionalProperties", True)
        for key, item in value.items():
            where, like = _join(path, str(key)), _join(pattern, str(key))
            if key in props:
                self.check(item, props[key], where, like)
            elif extra is False:
                raise SchemaMismatch(where, "is not a field of this document")
            elif isinstance(extra, Mapping):
                self.check(item, extra, where, like)


def _join(path: str, key: str) -> str:
    return f"{path}/{key}" if path else key


def check_against(document: Any, definition: str, bundle: Mapping[str, Any], *,
                  may_lack: Collection[str] = ()) -> None:
    """Raise :class:`SchemaMismatch` (path and reason) where ``document`` breaks the bundle's
    ``definition``. ``may_lack``: required fields a file may leave out, as paths with ``*`` for any
    list index (``timeline/*/passes``): those an older version did not write yet. Every field
    present must hold what the schema says."""
    _Checker(bundle, may_lack).check(document, bundle["$defs"][definition], "")


def read_version(data: Mapping[str, Any], current: int, what: str, error: type[NarrowpipeError]) -> int:
    """The document's version, which this narrowpipe must have written or be able to read: an
    integer from 1 to ``current`` (``true``, ``"6"``, 0 and -3 once loaded; a missing version read
    as "version None is newer")."""
    if "version" not in data:
        raise error(f"{what} JSON lacks the field 'version'")
    version = data["version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise error(f"{what} version {version!r} is not a version number")
    if version > current:
        raise error(f"{what} version {version} is newer than this narrowpipe reads ({current})")
    if version < 1:
        raise error(f"{what} version {version} is not one narrowpipe wrote (versions start at 1)")
    return version


def added_after(version: int, added: Mapping[str, int]) -> set[str]:
    """The fields (paths as :func:`check_against`'s ``may_lack``) a file of ``version`` may lack:
    those ``added`` (path -> the version that first wrote it) in a later version."""
    return {path for path, since in added.items() if version < since}
