"""Reading and writing the small TOML subset spec files use.

Reading is the standard library's ``tomllib`` with its errors turned into ``TargetSpecError`` that
name the file. Writing is a few lines here instead of a dependency: spec files hold only strings,
numbers, booleans, arrays and one level of tables, and the writer must emit floats with ``repr`` so
that dump -> load is exact.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import TargetSpecError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["read_toml", "dumps"]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a TOML file; any failure is a ``TargetSpecError`` naming the file."""
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise TargetSpecError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise TargetSpecError(f"{p}: is a directory, not a spec file") from None
    except UnicodeDecodeError as e:
        raise TargetSpecError(f"{p}: not a TOML file (not UTF-8 text: {e.reason} at byte "
                              f"{e.start})") from None
    except OSError as e:
        raise TargetSpecError(f"{p}: cannot read: {e.strerror}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TargetSpecError(f"{p}: not valid TOML: {e}") from None


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _string(text: str) -> str:
    # JSON string escapes are a subset of TOML basic-string escapes; DEL must be escaped in TOML.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot write non-finite number {value!r}")
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def dumps(doc: Mapping[str, Any], header: str = "") -> str:
    """TOML text for ``doc``: plain keys first, then each table (tables may nest)."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    _emit(doc, (), lines)
    return "\n".join(lines).strip("\n") + "\n"


def _emit(table: Mapping[str, Any], path: tuple[str, ...], lines: list[str]) -> None:
    plain = {k: v for k, v in table.items() if not isinstance(v, Mapping)}
    nested = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    if path:
        lines.append("")
        lines.append("[" + ".".join(_key(p) for p in path) + "]")
    for key, value in plain.items():
        lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in nested.items():
        _emit(value, path + (key,), lines)
