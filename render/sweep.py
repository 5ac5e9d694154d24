"""A sweep as one table: a row per grid point and target, the columns a planner scans down."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..backends import CATALOG_PRICE_BASIS
from ..costmodel.summary import Timing
from ..costmodel.sweep import Sweep
from .comparison import verdict_text
from .fit import fits
from .units import seconds, si

__all__ = ["sweep_table", "print_sweep"]


def _uses_chips(timings: list[Timing]) -> bool:
    """Whether the table needs a chips column: some run takes more than one chip, and the count may
    change from row to row (QA: Groq decode at batch 1, 16, 128 took 71, 89, 220 chips and Cerebras
    one wafer then two, every row reading "fits yes")."""
    return any(t.devices > 1 for t in timings)


def sweep_table(s: Sweep, compact: bool = False) -> Table:
    """The table; ``compact`` is the layout for a narrow terminal: no outer edge or column rules and
    two-line headers, so no header is cut to "narrow..." and no value folds."""
    swept = [n for n, values in s.grid.items() if len(values) > 1]
    fixed = ", ".join(f"{n}={v[0]}" for n, v in s.grid.items() if len(v) == 1)
    unit = s.points[0].reports[0].timing.item_unit if s.points and s.points[0].reports[0].timing else "items"
    timings = [r.timing for p in s.points for r in p.reports if r.timing is not None]
    other = any(t.cost_usd is not None and t.price_basis != CATALOG_PRICE_BASIS for t in timings)
    unfit = any(t.cost_per_million_items is not None and not t.fits for t in timings)
    chips = _uses_chips(timings)
    caption = "\n".join(x for x in (   # one line each: joined, a table's width wrapped them mid-phrase
        "chips: the devices a run takes (a dataflow layout grows with the batch)" if chips else "",
        "* price not a hyperscaler on-demand list rate" if other else "",
        "(cost) one device's, of a run that needs more devices: left out of the verdict" if unfit else "") if x)
    layout = {"box": box.SIMPLE_HEAD, "show_edge": False, "padding": (0, 0, 0, 1)} if compact else {}
    tab = Table(title=f"{s.graph}: sweep over {', '.join(swept)}" + (f" ({fixed})" if fixed else ""),
                title_justify="left", caption=caption or None, caption_justify="left", **layout)  # type: ignore[arg-type]
    for name in swept:   # no_wrap: never squeezed away (the row's point is what the row means)
        tab.add_column(name, justify="right", no_wrap=True)
    sep = "\n" if compact else " "
    heads = ("target", "time", f"{unit}/s", "MFU", "narrowest", *(("chips",) if chips else ()), "fits",
             f"$/M{sep}{unit}")
    for head in heads:
        tab.add_column(head, justify="left" if head in ("target", "narrowest", "fits") else "right",
                       no_wrap=compact or head == "target")
    for point in s.points:
        for r in point.reports:
            t = r.timing
            assert t is not None
            tab.add_row(*(str(point.dims[n]) for n in swept), t.target, seconds(t.time_s),
                        si(t.throughput), f"{t.mfu:.1%}", t.narrowest, *((str(t.devices),) if chips else ()),
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
    table = sweep_table(s)
    console.print(table if fits(console, table) else sweep_table(s, compact=True))
    swept = [n for n, values in s.grid.items() if len(values) > 1]
    for point in s.points:
        where = ", ".join(f"{n}={point.dims[n]}" for n in swept)
        console.print(Text(f"{where}: ", style="bold") + verdict_text(point) if where else verdict_text(point))
