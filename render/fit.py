"""Whether a table fits the terminal unfolded: rich folds every cell of a table wider than the
console, which turns a per-op table in an 80-column log into unreadable slivers; callers choose a
narrower layout instead."""

from __future__ import annotations

from rich.console import Console, RenderableType
from rich.measure import Measurement

__all__ = ["fits"]


def fits(console: Console, renderable: RenderableType) -> bool:
    natural = Measurement.get(console, console.options.update_width(10_000), renderable).maximum
    return natural <= console.width
