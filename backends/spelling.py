"""How a spec file spells a field: the key it writes (``clock_mhz``, ``l2_mb``, ``matrix_tflops.bf16``)
against the field it sets (``clock_hz``, ``l2_bytes``, ``matrix_flops.bf16``).

The loader turns keys into fields; everything said back to the user about their file (a missing
source, a field that differs from the catalog's, the card of ``targets --show``) turns fields back
into the keys that file writes, so what is printed can be found in the file with grep. One place,
so the loader, the warnings and the card spell a field the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .fields import keymap

__all__ = ["source_key", "written_keys", "spelled"]


def source_key(cls: type, key: str) -> str:
    """A ``[sources]`` key in field names: a source may be keyed by the value's own spelling
    (``clock_mhz``, ``matrix_tflops.bf16``, ``scale_up.bandwidth_gbps``), as the value is written."""
    head, _, rest = key.partition(".")
    entry = keymap(cls).get(head)
    if entry is None:
        return key
    name, spec, _ = entry
    if spec.kind == "level" and rest:
        return f"{name}.{source_key(spec.schema, rest)}"
    return f"{name}.{rest}" if rest else name


def written_keys(cls: type, raw: Mapping[str, Any]) -> dict[str, Any]:
    """Field name -> the key a file's table ``raw`` writes it under (nested for levels), as
    :func:`spelled` reads it; keys that are no field of ``cls`` are left out."""
    keys = keymap(cls)
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key in keys:
            name, spec, _ = keys[key]
            out[name] = written_keys(spec.schema, value) if spec.kind == "level" and isinstance(value, Mapping) \
                else key
    return out


def spelled(written: Mapping[str, Any], key: str) -> str:
    """A field key (``l2_bytes``, ``matrix_flops.bf16``) as the file spells it (``l2_mb``,
    ``matrix_tflops.bf16``); a field the file does not write keeps its field name."""
    head, _, rest = key.partition(".")
    spelling = written.get(head, head)
    if isinstance(spelling, Mapping):
        return f"{head}.{spelled(spelling, rest)}" if rest else head
    return f"{spelling}.{rest}" if rest else spelling
