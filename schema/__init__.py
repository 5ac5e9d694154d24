"""The JSON schema of everything narrowpipe writes with ``--json`` (JSON Schema 2020-12, shipped here).

Deployment tooling reads these documents without narrowpipe, so their shape is a contract: each
document names its ``format`` and ``version``, ``narrowpipe.schema.json`` holds one definition per
format with that version pinned, and every object forbids fields it does not list. A field added,
renamed or removed fails validation until the schema changes, and a schema change fails the
field-set snapshot in the tests until the format's version is bumped: nothing drifts silently.

``validate`` and the readers' ``check`` run the ``jsonschema`` package (a dependency).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from functools import cache
from importlib import resources
from typing import Any

from ..errors import NarrowpipeError
from ..jsonout import nonfinite_path
from .check import SchemaMismatch, check_against

__all__ = ["SCHEMA_VERSION", "SCHEMA_FILE", "FORMATS", "schema", "schema_for", "format_versions", "validate",
           "field_paths", "check", "SchemaMismatch"]

#: Version of the schema bundle: bumped with any format's version (it is in the schema's ``$id``).
SCHEMA_VERSION = 26
SCHEMA_FILE = "narrowpipe.schema.json"
#: Document format -> its definition in the bundle.
FORMATS = {"narrowpipe.report": "report", "narrowpipe.comparison": "comparison", "narrowpipe.sweep": "sweep",
           "narrowpipe.whatif": "whatif", "narrowpipe.diagnosis": "diagnosis",
           "narrowpipe.validation": "validation", "narrowpipe.launch": "launch", "narrowpipe.plan": "plan",
           "narrowpipe.serving": "serving", "narrowpipe.capacity": "capacity",
           "narrowpipe.serving_sweep": "servingSweep"}


@cache
def _bundle_text() -> str:
    return resources.files(__name__).joinpath(SCHEMA_FILE).read_text()


def schema() -> dict[str, Any]:
    """The whole bundle (a fresh copy: callers may change it)."""
    return json.loads(_bundle_text())


def schema_for(fmt: str) -> dict[str, Any]:
    """A standalone schema for one format (``narrowpipe.report``, ...): the bundle pointed at it."""
    if fmt not in FORMATS:
        raise NarrowpipeError(f"no schema for format {fmt!r}; formats: {', '.join(FORMATS)}")
    bundle = schema()
    return {"$schema": bundle["$schema"], "$id": bundle["$id"] + ":" + FORMATS[fmt],
            "$ref": f"#/$defs/{FORMATS[fmt]}", "$defs": bundle["$defs"]}


def format_versions() -> dict[str, int]:
    """Format -> the version its definition pins."""
    defs = schema()["$defs"]
    return {fmt: defs[name]["properties"]["version"]["const"] for fmt, name in FORMATS.items()}


def check(document: Any, fmt: str, *, may_lack: Collection[str] = ()) -> None:
    """What the readers use: raise :class:`SchemaMismatch` (a :class:`NarrowpipeError` with the
    field's path and the reason) where ``document`` breaks ``fmt``'s definition (:mod:`.check`).
    ``may_lack``: required fields an older version's file did not
    write yet (``timeline/*/passes``)."""
    if fmt not in FORMATS:
        raise NarrowpipeError(f"no schema for format {fmt!r}; formats: {', '.join(FORMATS)}")
    check_against(document, FORMATS[fmt], may_lack=may_lack)


def validate(document: dict[str, Any]) -> None:
    """Raise a :class:`NarrowpipeError` naming the first offending field if ``document`` (a parsed
    ``--json`` output) does not match its format's schema."""
    import jsonschema
    fmt = document.get("format") if isinstance(document, dict) else None
    if not isinstance(fmt, str):
        raise NarrowpipeError("not a narrowpipe document: no 'format' field")
    nonfinite = nonfinite_path(document)   # JSON has no NaN or Infinity; Python's reader accepts them
    if nonfinite is not None:
        raise NarrowpipeError(f"{fmt} v{document.get('version')}: {nonfinite}: not a finite number")
    validator = jsonschema.Draft202012Validator(schema_for(fmt))
    error = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise NarrowpipeError(f"{fmt} v{document.get('version')}: {where}: {error.message}")


def field_paths(fmt: str) -> list[str]:
    """Every field a format's documents may hold with its type, as sorted ``path: type`` lines
    (``timing.top[].kernel: string``; ``?`` marks an optional field), following references within
    the format. A nested document of another format (a comparison's reports) ends its path with
    that format's name: it carries its own version. Free-form objects (dims, plan, extra) end a
    path too. This is what the version snapshot in the tests pins."""
    defs = schema()["$defs"]
    documents = {name: f for f, name in FORMATS.items()}
    out: set[str] = set()

    def kind(node: dict[str, Any]) -> str:
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[1]
            return documents.get(name, name)
        if "anyOf" in node:
            return " | ".join(kind(alt) for alt in node["anyOf"])
        if "const" in node:
            return f"const {json.dumps(node['const'])}"
        if "enum" in node:
            return "enum " + "/".join(map(str, node["enum"]))
        t = node.get("type", "any")
        return "/".join(t) if isinstance(t, list) else t

    def walk(node: dict[str, Any], path: str) -> None:
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[1]
            if name not in documents:
                walk(defs[name], path)
            return
        for alt in node.get("anyOf", []):
            walk(alt, path)
        if "items" in node:
            out.add(f"{path}[]: {kind(node['items'])}")
            walk(node["items"], path + "[]")
        if isinstance(node.get("additionalProperties"), dict):
            out.add(f"{path}.*: {kind(node['additionalProperties'])}")
            walk(node["additionalProperties"], path + ".*")
        for key, sub in node.get("properties", {}).items():
            child = f"{path}.{key}" if path else key
            optional = "" if key in node.get("required", ()) else "?"
            out.add(f"{child}{optional}: {kind(sub)}")
            walk(sub, child)

    definition = defs[FORMATS[fmt]]
    for key, sub in definition["properties"].items():   # the format's own top level, then down
        out.add(f"{key}: {kind(sub)}")
        walk(sub, key)
    return sorted(out)
