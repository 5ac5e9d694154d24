"""A sweep as one table: a row per grid point and target, the columns a planner scans down."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..backends import CATALOG_PRICE_BASIS
from ..costmodel.summary import Timing
from ..costmodel.sweep import Sweep
from .comparison import verdict_text
from .units import seconds, si

__all__ = ["sweep_table", "print_sweep"]


def sweep_table(s: Sweep) -> Table:
    swept = [n for n, values in s.grid.items() if len(values) > 1]
    fixed = ", ".join(f"{n}={v[0]}" for n, v in s.grid.items() if len(v) == 1)
    unit = s.points[0].reports[0].timing.item_unit if s.points and s.points[0].reports[0].timing else "items"
    timings = [r.timing for p in s.points for r in p.reports if r.timing is not None]
    other = any(t.cost_usd is not None and t.price_basis != CATALOG_PRICE_BASIS for t in timings)
    unfit = any(t.cost_per_million_items is not None and not t.fits for t in timings)
    caption = "; ".join(x for x in (
        "* price not a hyperscaler on-demand list rate" if other else "",
        "(cost) one device's, of a run that needs more devices: left out of the verdict" if unfit else "") if x)
    tab = Table(title=f"{s.graph}: sweep over {', '.join(swept)}" + (f" ({fixed})" if fixed else ""),
                title_justify="left", caption=caption or None)
    for name in swept:
        tab.add_column(name, justify="right")
    heads = ("target", "time", f"{unit}/s", "MFU", "narrowest", "fits", f"$/M {unit}")
    for head in heads:
        tab.add_column(head, justify="left" if head in ("target", "narrowest", "fits") else "right",
                       no_wrap=head == "target")
    for point in s.points:
        for r in point.reports:
            t = r.timing
            assert t is not None
            tab.add_row(*(str(point.dims[n]) for n in swept), t.target, seconds(t.time_s),
                        si(t.throughput), f"{t.mfu:.1%}", t.narrowest,
                        Text("yes", style="green") if t.fits else Text(f">={t.devices_needed}", style="red"),
                        _cost(t))
    return tab


def _cost(t: Timing) -> Text | str:
    """The $/M cell: a run that does not fit prices one device of the several it needs, so its cost
    is shown apart (QA: a 20 GB decode step on a 16 GB chip read as the cheapest in its column)."""
    cost = t.cost_per_million_items
    if cost is None:
        return "-"
    text = f"{cost:.3g}" + ("" if t.price_basis == CATALOG_PRICE_BASIS else "*")
    return text if t.fits else Text(f"({text})", style="dim")


def print_sweep(s: Sweep, console: Console | None = None) -> None:
    """The table, then each point's verdict (fastest, cheapest, what does not fit), as ``compare``
    prints for one point: the table alone left the planner to rank the column by eye."""
    console = console or Console()
    console.print(sweep_table(s))
    swept = [n for n, values in s.grid.items() if len(values) > 1]
    for point in s.points:
        where = ", ".join(f"{n}={point.dims[n]}" for n in swept)
        console.print(Text(f"{where}: ", style="bold") + verdict_text(point) if where else verdict_text(point))
