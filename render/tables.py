"""Rich tables of reports: what ``narrowpipe analyze`` prints. Reads only result types."""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..costmodel.report import OpRow, Report
from .fit import fits as _fits
from .units import count, flops, nbytes, percent, seconds, si

__all__ = ["report_summary", "op_type_table", "node_table", "unmodeled_table", "print_report"]


def report_summary(r: Report) -> Table:
    t = Table(title=f"{r.graph}" + (f" on {r.target}" if r.target else ""), show_header=False, box=None)
    t.add_column(style="bold")
    t.add_column()
    dims = ", ".join(f"{k}={v}" for k, v in r.dims.items()) or "(static)"
    t.add_row("dims", dims)
    # 405 B, 1.23 T: si() rounds before it picks the prefix; billions read "B" as model cards write them
    t.add_row("params", f"{count(r.params)} ({si(r.params).replace(' G', ' B')})" if r.params >= 1e9
              else count(r.params))
    t.add_row("weights", nbytes(r.weight_bytes))
    t.add_row("FLOPs", f"{flops(r.flops)}  ({count(r.flops)})")
    t.add_row("  matmul-like", f"{flops(r.modeled_flops)}  (contraction + convolution + attention)")
    t.add_row("transcendentals", si(r.transcendentals))
    t.add_row("bytes (unfused)", nbytes(r.bytes))
    t.add_row("peak activations", nbytes(r.peak_activation_bytes))
    if r.comm_bytes:
        t.add_row("communication", nbytes(r.comm_bytes))
    groups = ", ".join(f"{g} {percent(v, r.flops)}"
                       for g, v in sorted(r.flops_by_group.items(), key=lambda kv: -kv[1]) if v)
    t.add_row("FLOPs by group", groups or "-")
    return t


def op_type_table(r: Report) -> Table:
    """One row per op type: how many nodes, their FLOPs and bytes, and shares of the totals."""
    agg: dict[tuple[str, str], list[int]] = {}
    for row in r.ops:
        key = (row.op, row.group)
        a = agg.setdefault(key, [0, 0, 0, 0])
        a[0] += 1
        a[1] += row.flops
        a[2] += row.bytes
        a[3] += row.transcendentals
    t = Table(title="by op type", title_justify="left")
    for col, just in (("op", "left"), ("group", "left"), ("nodes", "right"), ("FLOPs", "right"),
                      ("% FLOPs", "right"), ("bytes", "right"), ("% bytes", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for (op, group), (n, f, b, _) in sorted(agg.items(), key=lambda kv: (-kv[1][1], -kv[1][2])):
        t.add_row(op, group, count(n), flops(f), percent(f, r.flops), nbytes(b), percent(b, r.bytes))
    return t


#: the per-node columns a narrow console drops, first to last (the numbers always stay)
_DROPPABLE = ("source", "shape", "FLOP/B")


def node_table(r: Report, top: int | None = 20, console: Console | None = None) -> Table:
    """The heaviest nodes; with ``console``, the columns that would make the table wider than it
    (source, then shape, then intensity) are left out rather than folded."""
    drop: set[str] = set()
    table = _node_table(r, top, drop)
    if console is None:
        return table
    for col in _DROPPABLE:
        if _fits(console, table):
            break
        drop.add(col)
        table = _node_table(r, top, drop)
    return table


def _node_table(r: Report, top: int | None, drop: set[str]) -> Table:
    rows = [row for row in r.ops if row.flops or row.bytes or not row.modeled]
    timed = r.timing is not None
    if timed:
        rows.sort(key=lambda row: (-(row.time_s or 0.0), -row.flops))
    else:
        rows.sort(key=lambda row: (-row.flops, -row.bytes))
    shown = rows if top is None else rows[:top]
    key = "time" if timed else "FLOPs"
    title = "every node" if top is None or top >= len(rows) else f"top {len(shown)} of {len(rows)} nodes by {key}"
    if drop:
        title += f" (narrow terminal: no {', '.join(c for c in _DROPPABLE if c in drop)} column)"
    t = Table(title=title, title_justify="left")
    columns = [("node", "left"), ("op", "left"), ("source", "left"), ("shape", "left"), ("FLOPs", "right"),
               ("bytes", "right"), ("FLOP/B", "right")] + ([("time", "right"), ("bound", "left")] if timed else [])
    keep = [i for i, (col, _) in enumerate(columns) if col not in drop]
    for i in keep:
        t.add_column(columns[i][0], justify=columns[i][1], overflow="fold")  # type: ignore[arg-type]
    for row in shown:
        cells: list[RenderableType] = [row.name, _op_text(row), row.scope or row.source_op, f"{row.dtype}{row.shape}",
                               flops(row.flops), nbytes(row.bytes), f"{row.intensity:.3g}" if row.bytes else "-"]
        if timed:
            fused = row.kernel and row.kernel != row.name
            cells += [seconds(row.time_s) if not fused else f"in {row.kernel}", row.bound or "-"]
        t.add_row(*(cells[i] for i in keep))
    return t


def _op_text(row: OpRow) -> Text:
    return Text(row.op, style="bold red") if not row.modeled else Text(row.op)


def unmodeled_table(r: Report) -> Table:
    t = Table(title="UNMODELED ops (no cost rule: their work is NOT in the totals)", title_style="bold red",
              title_justify="left")
    t.add_column("op", style="red")
    t.add_column("nodes", justify="right")
    for u in r.unmodeled:
        t.add_row(u.op, count(u.count))
    return t


def print_report(r: Report, console: Console | None = None, *, top: int | None = 20) -> None:
    console = console or Console()
    parts: list[RenderableType] = [report_summary(r)]
    if r.timing is not None:
        from .comparison import timing_summary
        parts.append(timing_summary(r))
    if r.flops_by_phase:
        from .training import phase_table
        parts.append(phase_table(r))
    parts += [op_type_table(r), node_table(r, top, console)]
    if r.unmodeled:
        parts.append(unmodeled_table(r))
    for note in r.notes:
        parts.append(Text(f"note: {note}", style="yellow"))
    console.print(Group(*parts))
