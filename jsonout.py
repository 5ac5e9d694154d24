"""JSON text of a narrowpipe document, refusing numbers JSON cannot hold.

Python's ``json`` writes ``NaN`` and ``Infinity`` by default, which are not JSON: deployment tooling
that reads our ``--json`` files without narrowpipe (``jq``, a browser, strict parsers) fails on them,
and a NaN price once sorted a fleet as the cheapest. Every document we write goes through
:func:`dumps`, every document we read or validate through :func:`nonfinite_path`, so a non-finite
number is an error naming its field on both sides instead of a file only Python can read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from .errors import NarrowpipeError

__all__ = ["dumps", "nonfinite_path"]


def nonfinite_path(document: Any, where: str = "") -> str | None:
    """The path (``timing/price_per_hour``, ``ops/3/flops``) of the first NaN or infinite float in
    ``document``, or None when every number is finite."""
    if isinstance(document, float):
        return None if math.isfinite(document) else (where or "(top level)")
    if isinstance(document, Mapping):
        items: Any = document.items()
    elif isinstance(document, (list, tuple)):
        items = enumerate(document)
    else:
        return None
    for key, value in items:
        found = nonfinite_path(value, f"{where}/{key}" if where else str(key))
        if found is not None:
            return found
    return None


def dumps(document: Any, indent: int | None = None, what: str = "document") -> str:
    """``json.dumps`` that refuses NaN and infinities with a :class:`NarrowpipeError` naming the field."""
    try:
        return json.dumps(document, indent=indent, allow_nan=False)
    except ValueError:
        path = nonfinite_path(document)
        if path is None:
            raise
        raise NarrowpipeError(f"{what}: {path} is not a finite number, which JSON cannot hold") from None
