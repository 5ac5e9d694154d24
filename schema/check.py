"""Checking a document against the shipped schema, with ``jsonschema`` (JSON Schema 2020-12).

Why: the readers (``Report.from_json``, ``Plan.from_json``) must refuse a damaged file with a
narrowpipe error naming the field, and the schema already says what every field holds. Checking each
field by hand in each reader drifted from the schema (a ``flops`` of ``"abc"`` loaded, a missing
``parallel.tp`` became 1). The reference implementation decides; this module only relaxes the
required fields an older version did not write yet and words its first error by the field's path.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from functools import lru_cache
from typing import Any

import jsonschema

from ..errors import NarrowpipeError
from ..jsonout import nonfinite_path

__all__ = ["check_against", "SchemaMismatch", "read_version", "added_after"]


class SchemaMismatch(NarrowpipeError):
    """A document does not match its schema: ``path`` (``ops/3/flops``) and ``reason``."""

    def __init__(self, path: str, reason: str) -> None:
        self.path, self.reason = path or "(top level)", reason
        super().__init__(f"{self.path}: {reason}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _join(path: str, key: str) -> str:
    return f"{path}/{key}" if path else key


def _branches(node: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]]:
    """``node`` and what it stands for: its reference's definition, its anyOf/oneOf forms."""
    out = [node]
    if "$ref" in node:
        out += _branches(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
    for key in ("anyOf", "oneOf"):
        for alt in node.get(key, ()):
            out += _branches(alt, defs)
    return out


def _relax(defs: dict[str, Any], definition: str, pattern: str) -> None:
    """Drop the last field of ``pattern`` (``timeline/*/passes``) from the required fields of every
    object the pattern reaches in ``defs`` (a fresh parse of the bundle: a definition shared with
    other places is relaxed there too, which only an older file's reader sees)."""
    *parents, field = pattern.split("/")
    nodes = [defs[definition]]
    for part in parents:
        nodes = [child for n in nodes for b in _branches(n, defs)
                 for child in ([b["items"]] if part == "*" and "items" in b else
                               [b["properties"][part]] if part in b.get("properties", {}) else [])]
    for n in nodes:
        for b in _branches(n, defs):
            if field in b.get("required", ()):
                b["required"] = [k for k in b["required"] if k != field]


@lru_cache(maxsize=64)
def _validator(definition: str, may_lack: frozenset[str]) -> Any:
    """A validator of the shipped bundle's ``definition``, relaxed by ``may_lack``; one per pair."""
    from . import schema  # the package imports this module: read the bundle when first asked
    bundle = schema()
    defs = bundle["$defs"]
    for pattern in sorted(may_lack):
        _relax(defs, definition, pattern)
    return jsonschema.Draft202012Validator({"$schema": bundle.get("$schema"), "$ref": f"#/$defs/{definition}",
                                           "$defs": defs})


def _reason(error: Any) -> tuple[str, str]:
    """(path, reason) of a jsonschema error, worded by the field: a missing field is its object's."""
    path = "/".join(str(p) for p in error.absolute_path)
    kind, value = error.validator, error.instance
    if kind == "type":
        names = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        return path, f"{_shown(value)} is not of type {' or '.join(names)}"
    if kind == "required" and isinstance(value, Mapping):
        missing = next((k for k in error.validator_value if k not in value), "?")
        return path, f"lacks the field {missing!r}"
    if kind == "additionalProperties" and isinstance(value, Mapping):
        allowed = set(error.schema.get("properties", {}))
        extra = next((k for k in value if k not in allowed), None)
        if extra is not None:
            return _join(path, str(extra)), "is not a field of this document"
    if kind == "const":
        return path, f"{_shown(value)} is not {error.validator_value!r}"
    return path, error.message


def _relevance(error: Any) -> tuple[Any, ...]:
    """jsonschema's relevance of an error without its sibling order by path."""
    rank = jsonschema.exceptions.relevance(error)
    return (rank[0], *rank[2:])


def check_against(document: Any, definition: str, *, may_lack: Collection[str] = ()) -> None:
    """Raise :class:`SchemaMismatch` (path and reason) where ``document`` breaks the shipped bundle's
    ``definition``. ``may_lack``: required fields a file may leave out, as paths with ``*`` for any
    list index (``timeline/*/passes``): those an older version did not write yet. Every field
    present must hold what the schema says, and be finite (JSON has no NaN or Infinity)."""
    nonfinite = nonfinite_path(document)
    if nonfinite is not None:
        raise SchemaMismatch(nonfinite, "is not a finite number")
    validator = _validator(definition, frozenset(may_lack))
    # the first damaged field in document order among the most relevant, as a reader scanning the
    # file finds it (best_match keeps the first of equals; its own key ranks siblings by path)
    errors = sorted(validator.iter_errors(document),
                    key=lambda e: tuple((isinstance(p, str), p) for p in e.absolute_path))
    error = jsonschema.exceptions.best_match(errors, key=_relevance)
    if error is not None:
        raise SchemaMismatch(*_reason(error))


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
