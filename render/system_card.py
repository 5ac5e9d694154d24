"""``narrowpipe targets --show SYSTEM``: a system's file as written (devices, domains, links), each
number beside its source, the source keys resolved as the chip card resolves them.

Why the file rather than the loaded object: the loader converts to SI units (450 GB/s becomes
4.5e11 B/s); the card shows what the reader would type in their own system file.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Text

from ..backends.registry import SYSTEMS_DIR, get_system
from ..backends.tomlio import read_toml
from .target_card import _rows, field_table, source_legend

__all__ = ["system_card"]


def system_card(name: str) -> Group:
    """The system's fields as its catalog file writes them, with sources and their legend."""
    system = get_system(name)
    doc: dict[str, Any] = dict(read_toml(SYSTEMS_DIR / f"{system.name}.toml"))
    sources = doc.get("sources", {})
    rows: list[tuple[str, str, str]] = []
    for key, value in doc.items():
        if isinstance(value, dict) and key != "sources":
            rows += _rows(value, sources, prefix=f"{key}.")
    rows = _rows({k: v for k, v in doc.items() if not isinstance(v, dict)}, sources) + rows
    # a source names the field without its unit suffix ("scale_up.bandwidth" for "_gbps")
    rows = [(label, value, source or sources.get(label.rsplit("_", 1)[0], "")) for label, value, source in rows]
    tab = field_table(f"{system.display_name} ({system.name}, {system.devices} x {system.chip})", rows)
    legend = source_legend(rows)
    parts: list[Any] = [tab]
    if system.notes:
        parts.append(Text(f"notes: {system.notes}\n"))
    if legend:
        parts += [Text("sources:", style="bold"), legend]
    return Group(*parts)
