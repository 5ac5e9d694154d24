"""``targets --show NAME``: a chip's card, or a system's where the name (or alias) is a system's."""

from __future__ import annotations

from typing import Any

from ..backends import get_target
from ..backends.registry import _systems
from ..errors import UnknownTargetError

__all__ = ["show_card"]


def show_card(name: str) -> Any:
    from .target_card import target_card
    try:
        return target_card(get_target(name))
    except UnknownTargetError:
        if name.strip().lower() not in _systems().alias:
            raise
    from .system_card import system_card
    return system_card(name)
