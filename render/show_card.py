"""``targets --show NAME``: a chip's card, or a system's where the name (or alias) is a system's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..backends import get_target
from ..backends.registry import CATALOG_DIR, _is_path, _systems
from ..backends.tomlio import read_toml
from ..errors import UnknownTargetError

__all__ = ["show_card"]


def show_card(name: str) -> Any:
    """The card of the chip ``name`` names (catalog name, alias or spec file), shown as its file writes
    it, or of the catalog system it names."""
    from .target_card import target_card
    try:
        chip = get_target(name)
        path = Path(name) if _is_path(name) else CATALOG_DIR / f"{chip.name}.toml"
        return target_card(chip, read_toml(path))
    except UnknownTargetError:
        if name.strip().lower() not in _systems().alias:
            raise
    from .system_card import system_card
    return system_card(name)
