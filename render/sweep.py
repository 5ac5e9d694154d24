"""A sweep as one table: a row per grid point and target, the columns a planner scans down."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..backends import CATALOG_PRICE_BASIS
from ..costmodel.sweep import Sweep
from .units import seconds, si

__all__ = ["sweep_table", "print_sweep"]


def sweep_table(s: Sweep) -> Table:
    swept = [n for n, values in s.grid.items() if len(values) > 1]
    fixed = ", ".join(f"{n}={v[0]}" for n, v in s.grid.items() if len(v) == 1)
    unit = s.points[0].reports[0].timing.item_unit if s.points and s.points[0].reports[0].timing else "items"
    timings = [r.timing for p in s.points for r in p.reports if r.timing is not None]
    other = any(t.cost_usd is not None and t.price_basis != CATALOG_PRICE_BASIS for t in timings)
    tab = Table(title=f"{s.graph}: sweep over {', '.join(swept)}" + (f" ({fixed})" if fixed else ""),
                title_justify="left", caption="* price not a hyperscaler on-demand list rate" if other else None)
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
            cost = t.cost_per_million_items
            tab.add_row(*(str(point.dims[n]) for n in swept), t.target, seconds(t.time_s),
                        si(t.throughput), f"{t.mfu:.1%}", t.narrowest,
                        Text("yes", style="green") if t.fits else Text(f">={t.devices_needed}", style="red"),
                        "-" if cost is None else f"{cost:.3g}" + ("" if t.price_basis == CATALOG_PRICE_BASIS else "*"))
    return tab


def print_sweep(s: Sweep, console: Console | None = None) -> None:
    (console or Console()).print(sweep_table(s))
