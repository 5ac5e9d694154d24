"""``narrowpipe targets --show NAME``: one chip's spec as its file spells it, each number beside its
source, and the source keys resolved to titles and links.

Fields are shown with the keys and values the spec file writes (``clock_mhz = 1830``, ``l2_mb = 50``,
``matrix_tflops.bf16 = 2250``) with the source under the same key, so what the reader sees, what they
would grep for in the file, what they would type in their own and what the ``[sources]`` table says
line up. The card was rebuilt from the loaded chip, whose dumper picks the shortest exact unit: the
B200's ``matrix_tflops.bf16 = 2250`` read ``matrix_pflops.bf16 2.25`` and a user's ``clock_mhz = 1500``
``clock_ghz 1.5``, keys found in no file. What the file does not write and the loader fills in
(documented defaults) follows in a table of its own, marked as such. A chip with no file (a Target
built in Python) is shown as the dumper would write it. A source string names short keys
(``NV-H100; SB-GPU``); the legend below the table turns each into the document it stands for
(``backends/catalog/SOURCES.toml``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rich import box
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..backends import Target, source_refs, target_to_dict
from ..backends.kernel_checks import copied_from, kernel_check
from ..backends.spelling import spelled, written_keys

__all__ = ["target_card", "cited_keys", "check_lines", "source_legend", "field_table"]


def _rows(table: Mapping[str, Any], sources: Mapping[str, str], prefix: str = "") -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    for key, value in table.items():
        if key in ("sources", "notes") or value in (None, (), [], {}, ""):
            continue
        label = prefix + key
        if isinstance(value, Mapping):
            whole = sources.get(label, "")
            for sub, v in value.items():
                rows.append((f"{label}.{sub}", _shown(v), sources.get(f"{label}.{sub}", whole)))
        else:
            rows.append((label, _shown(value), sources.get(label, "")))
    return rows


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join("x".join(map(str, v)) if isinstance(v, list) else str(v) for v in value)
    return str(value)


def cited_keys(texts: list[str], known: Mapping[str, Any]) -> list[str]:
    """The source keys (``NV-H100``) the texts cite, in order of first citation."""
    seen: dict[str, None] = {}
    for text in texts:
        for token in re.findall(r"[A-Z0-9][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*", text):
            if token in known:
                seen.setdefault(token)
    return list(seen)


def target_card(target: Target, written: Mapping[str, Any] | None = None) -> Group:
    """The table of fields and the legend of sources. ``written``: the table of the file ``target``
    was loaded from, whose keys and values the card shows as they are; without it, the chip as
    :func:`~narrowpipe.backends.target_to_dict` writes it."""
    doc = target_to_dict(target)
    filled: list[tuple[str, str, str]] = []
    if written is None:
        rows = _rows(doc, doc.get("sources", {}))
    else:
        rows, filled = _file_rows(target, written, doc)
    tab = field_table(f"{target.display_name} ({target.name}, {target.family})", rows)
    legend = source_legend(rows + filled)
    parts: list[Any] = [tab]
    if filled:
        parts.append(field_table("not in the file: filled in by narrowpipe (documented defaults)", filled))
    if target.notes:
        parts.append(Text(f"notes: {target.notes}\n"))
    parts.append(check_lines(target))
    if legend:
        parts += [Text("sources:", style="bold"), legend]
    return Group(*parts)


def _file_rows(target: Target, written: Mapping[str, Any], doc: Mapping[str, Any]
               ) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """(the rows of the file's own keys and values, the rows of the fields the loader filled in),
    each with its source spelled as the row's key (a user's file may key a source by the field's
    name, ``l2_bytes``, for its value's ``l2_mb``)."""
    cls = type(target)
    keys = written_keys(cls, written)
    file_rows = _rows(written, {spelled(keys, k): text for k, text in target.sources.items()})
    dumped = written_keys(cls, doc)
    extra = {dumped[name]: doc[dumped[name]] for name in dumped if name not in keys}
    return file_rows, _rows(extra, {spelled(dumped, k): text for k, text in target.sources.items()})


def field_table(title: str, rows: list[tuple[str, str, str]]) -> Table:
    """The card's table: each field as the file spells it, its value and its source."""
    tab = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    tab.add_column("field", no_wrap=True)
    tab.add_column("value", overflow="fold")
    tab.add_column("source", overflow="fold")
    for label, value, source in rows:
        tab.add_row(label, escape(value), escape(source))
    return tab


def source_legend(rows: list[tuple[str, str, str]]) -> Text:
    """The source keys the rows' sources cite, each resolved to its document and date."""
    refs = source_refs()
    legend = Text()
    for key in cited_keys([s for _, _, s in rows], refs):
        ref = refs[key]
        legend.append(key, style="bold")
        legend.append(f": {ref.get('source', '')}" + (f" ({ref['date']})" if ref.get("date") else "") + "\n")
    return legend


def check_lines(target: Target) -> Text:
    """How far the chip's kernel model is checked (``backends/kernel_checks.toml``): the held-out
    error on public kernel timings, overall and per kernel class, or why there is none."""
    c = kernel_check(target)
    out = Text("kernel model check: ", style="bold")
    if c is None:
        src = copied_from(target)
        out.append("no public kernel timings of this chip in the benchmark"
                   + (f"; its fitted kernel terms are {src}'s (see targets --show {src})" if src else "") + "\n")
        return out
    out.append(f"median {c.median_abs:.1%}, p90 {c.p90_abs:.1%} |predicted / measured - 1| over {c.rows} "
               f"held-out timings ({', '.join(c.sources)}; benchmarks/kernel_accuracy.py, run {c.run})\n")
    for name, k in c.classes.items():
        out.append(f"  {name}: median {k.median_abs:.1%}, p90 {k.p90_abs:.1%} ({k.rows} rows)\n")
    return out
