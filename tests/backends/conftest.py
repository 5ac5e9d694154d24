"""Fixtures for the backends tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def write_spec(tmp_path: Path):
    """Write TOML text (or bytes) to a file under tmp_path and return its path."""

    def write(content: str | bytes, name: str = "my.toml") -> Path:
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    return write

