"""One self-contained HTML page per report or comparison: what to mail a colleague or attach to a ticket.

The page holds the counts, the comparison table (a row per target), each target's roofline as an
inlined PNG, the per-op table (sortable, filterable, per target), the notes and every op without a
cost rule. Style and script are inline (:mod:`.html_assets`): it opens from a file with no network.
Reads only result types. Free views (no FLOPs, no bytes, no time) are counted, not listed; beyond
:data:`MAX_OP_ROWS` ops per target the slowest are listed and the page says how many are not.
"""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from ..backends.kernel_checks import check_text
from ..costmodel.verdict import fastest_target
from .comparison import bound_mix_text, verdict_text
from .html_assets import SCRIPT, STYLE
from .output_file import reports_of, write_output
from .units import count, dollars, flops, nbytes, seconds, si

if TYPE_CHECKING:
    from ..costmodel.compare import Comparison
    from ..costmodel.report import OpRow, Report, Timing

__all__ = ["html_page", "write_html", "MAX_OP_ROWS"]

#: Op rows listed per target; a page for a 100,000-node graph stays one a browser opens.
MAX_OP_ROWS = 5000

_OP_COLUMNS = (("name", "name", False), ("op", "op", False), ("group", "group", False), ("scope", "scope", False),
               ("shape", "shape", False), ("flops", "FLOPs", True), ("bytes", "bytes", True),
               ("intensity", "FLOP/B", True), ("time", "time", True), ("share", "share", True),
               ("bound", "bound", False), ("util", "util.", True), ("kernel", "kernel", False))


def _td(text: str, value: float | None = None, numeric: bool = False, cls: str = "") -> str:
    classes = " ".join(c for c in ("n" if numeric else "", cls) if c)
    attrs = (f' class="{classes}"' if classes else "") + (f' data-v="{value!r}"' if value is not None else "")
    return f"<td{attrs}>{escape(text)}</td>"


def _th(key: str, label: str, numeric: bool) -> str:
    return f'<th data-key="{key}"{" class=n" if numeric else ""}>{escape(label)}</th>'


def _totals(r: Report) -> str:
    dims = ", ".join(f"{k}={v}" for k, v in r.dims.items()) or "static"
    rows = (("dims", dims), ("parameters", count(r.params)), ("weights", nbytes(r.weight_bytes)),
            ("FLOPs", f"{flops(r.flops)} ({flops(r.modeled_flops)} matmul-like)"),
            ("bytes (unfused)", nbytes(r.bytes)), ("peak activations", nbytes(r.peak_activation_bytes)))
    return '<dl class="totals">' + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in rows) + "</dl>"


def _fits(t: Timing) -> tuple[str, str]:
    if t.fits:
        return (f"yes on {t.devices} ({nbytes(t.memory_required)})" if t.devices > 1
                else f"yes ({nbytes(t.memory_required)})"), "good"
    return f"no: needs {t.devices_needed} ({nbytes(t.memory_required)})", "bad"


def _targets_table(reports: list[Report]) -> str:
    heads = (("target", "target", False), ("family", "family", False), ("precision", "runs as", False),
             ("time", "time", True), ("throughput", "throughput", True), ("mfu", "MFU", True),
             ("mix", "bound mix", False), ("narrowest", "narrowest pipe", False), ("top", "top kernel", False),
             ("fits", "fits", False), ("devices", "devices", True), ("energy", "energy", True),
             ("cost", "cost per M items", True), ("checked", "kernel model checked", False))
    fastest = fastest_target(reports)
    rows = []
    for r in reports:
        t = r.timing
        assert t is not None
        fit, fit_cls = _fits(t)
        top = t.top[0] if t.top else None
        gain = t.speedup_if_doubled.get(t.narrowest)
        cells = [_td(t.target), _td(t.family), _td(t.precision or t.dtype),
                 _td(seconds(t.time_s), t.time_s, True),
                 _td(f"{si(t.throughput)} {t.item_unit}/s", t.throughput, True), _td(f"{t.mfu:.1%}", t.mfu, True),
                 _td(bound_mix_text(t)),
                 _td(f"{t.narrowest} ({gain:.2f}x if doubled)" if gain else t.narrowest or "-"),
                 _td(f"{top.label}: {top.bound}, {top.share:.0%}" if top else "-"),
                 _td(fit, cls=fit_cls), _td(str(t.devices), t.devices, True),
                 _td(si(t.energy_j, "J") if t.energy_j is not None else "-", t.energy_j, True),
                 _td(f"{dollars(per_m)}/M {t.item_unit}" if (per_m := t.cost_per_million_items) is not None else "-",
                     per_m, True),
                 _td(check_text(t.target))]
        cls = ' class="fastest"' if t.target == fastest else ""
        rows.append(f'<tr data-target="{escape(t.target)}"{cls}>' + "".join(cells) + "</tr>")
    head = "".join(_th(*h) for h in heads)
    return (f'<table id="targets" class="sortable"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def _listed(r: Report) -> tuple[list[OpRow], int, int]:
    """(rows to list, free views left out, rows over the cap left out)."""
    rows = [o for o in r.ops if o.flops or o.bytes or o.comm_bytes or o.time_s or not o.modeled]
    views = len(r.ops) - len(rows)
    if len(rows) > MAX_OP_ROWS:
        rows = sorted(rows, key=lambda o: -(o.time_s or 0.0) if r.timing else -o.flops)[:MAX_OP_ROWS]
        return rows, views, len(r.ops) - views - MAX_OP_ROWS
    return rows, views, 0


def _op_body(r: Report, key: str) -> str:
    rows, _, _ = _listed(r)
    total = r.time_s or 0.0
    out = []
    for o in rows:
        share = (o.time_s or 0.0) / total if total else None
        intensity = o.flops / o.bytes if o.bytes else None
        cells = [_td(o.name), _td(o.op + ("" if o.modeled else " (unmodeled)"), cls="" if o.modeled else "bad"),
                 _td(o.group), _td(o.scope), _td(o.shape), _td(si(o.flops), o.flops, True),
                 _td(nbytes(o.bytes), o.bytes, True), _td(f"{intensity:.3g}" if intensity is not None else "-",
                                                          intensity, True),
                 _td(seconds(o.time_s), o.time_s, True), _td(f"{share:.1%}" if share is not None else "-", share, True),
                 _td(o.bound or "-"), _td(f"{o.utilization:.0%}" if o.utilization is not None else "-",
                                          o.utilization, True), _td(o.kernel or "")]
        out.append("<tr>" + "".join(cells) + "</tr>")
    return f'<tbody data-target-view="{escape(key)}">' + "".join(out) + "</tbody>"


def _roofline(r: Report) -> str:
    from .roofline import figure_bytes, roofline_figure
    png = base64.b64encode(figure_bytes(roofline_figure(r), "png", dpi=90)).decode("ascii")
    alt = f"roofline of {r.graph} on {r.target}"
    return (f'<figure data-target-view="{escape(r.target or "")}"><img alt="{escape(alt)}" '
            f'src="data:image/png;base64,{png}"><figcaption class="muted">{escape(alt)}: every kernel at its '
            f"arithmetic intensity and FLOP/s, on the FLOPs it executes (a causal attention's skipped blocks "
            f"out); area is time; top bottlenecks labelled</figcaption></figure>")


def _notes(reports: list[Report]) -> str:
    items = []
    first = reports[0]
    for u in first.unmodeled:
        items.append(f'<li class="bad">no cost rule: {escape(u.op)} x{u.count} (listed, not timed)</li>')
    for n in first.notes:
        items.append(f"<li>{escape(n)}</li>")
    for r in reports:
        for n in r.timing.notes if r.timing else []:
            items.append(f'<li class="warn">{escape(str(r.target))}: {escape(n)}</li>')
    return f'<ul class="notes">{"".join(items)}</ul>' if items else '<p class="muted">none</p>'


def html_page(result: Report | Comparison) -> str:
    """The page for a report (timed or not) or a comparison."""
    from ..costmodel.compare import Comparison
    reports = reports_of(result, "write_html")
    timed = [r for r in reports if r.timing is not None]
    first = reports[0]
    title = f"narrowpipe: {first.graph}"
    parts = [f"<header><h1>{escape(first.graph)}</h1>", _totals(first), "</header>"]
    if timed:
        parts.append("<section id=comparison><h2>Targets</h2>" + _targets_table(timed))
        if isinstance(result, Comparison):
            parts.append(f'<p id="verdict">{escape(verdict_text(result).plain)}</p>')
        parts.append("</section>")
    keys = [r.target or "" for r in reports]
    select = ""
    if len(reports) > 1:
        options = "".join(f'<option value="{escape(k)}">{escape(k)}</option>' for k in keys)
        select = f'<label>target <select id="target-select">{options}</select></label>'
    if timed:
        parts.append("<section id=roofline><h2>Roofline</h2>" + "".join(_roofline(r) for r in timed) + "</section>")
    else:
        parts.append('<p class="muted">No target: counts only (give --target for times, bounds and a roofline).</p>')
    heads = "".join(_th(*c) for c in _OP_COLUMNS)
    bodies = "".join(_op_body(r, k) for r, k in zip(reports, keys))
    parts.append(f'<section id=ops><h2>Per-op table</h2><div class="controls">{select}'
                 f'<input type="search" id="op-filter" placeholder="filter: words all rows must contain">'
                 f'<span id="op-count" class="muted"></span></div>'
                 f'<div class="scroll"><table id="ops-table" class="sortable"><thead><tr>{heads}</tr></thead>'
                 f"{bodies}</table></div>"
                 f'<p class="muted" id="op-notes">{escape("; ".join(_notes_line(r) for r in reports))}</p></section>')
    parts.append("<section id=notes><h2>Notes</h2>" + _notes(reports) + "</section>")
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
            + "".join(parts) + f"<script>{SCRIPT}</script></body></html>")


def _notes_line(r: Report) -> str:
    _, views, capped = _listed(r)
    where = f"{r.target}: " if r.target else ""
    more = f", {capped} beyond the {MAX_OP_ROWS} slowest" if capped else ""
    return f"{where}{views} free views not listed{more}"


def write_html(path: str | Path, result: Report | Comparison) -> Path:
    return write_output(path, html_page(result), "--html")
