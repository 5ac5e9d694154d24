"""``narrowpipe targets --checks``: how far each chip's kernel model is checked against public timings.

One row per catalog chip: the held-out error of the kernel benchmark (``backends/kernel_checks.toml``,
written by ``benchmarks/kernel_accuracy.py``), per kernel class, and the sources of the timings; a chip
without timings says whose fitted kernel terms it copies, or that nothing checks it. The bars the
benchmark holds every chip to are in the caption, and a row that misses them is marked, so a reader
can weigh a comparison's columns by their evidence.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape

__all__ = ["checks_table"]


def checks_table() -> Any:
    """The table: chip, held-out rows, median and p90 |error|, whether the bars are met, sources (or
    whose fitted terms the chip copies); ``targets --show NAME`` breaks a chip's check down by class."""
    from rich import box
    from rich.table import Table

    from ..backends import get_target, targets
    from ..backends.kernel_checks import check_bars, check_percent, copied_from, kernel_check, kernel_checks

    median_bar, p90_bar = check_bars()
    run = next(iter(kernel_checks().values())).run if kernel_checks() else ""
    caption = (f"median, p90: of |predicted / measured - 1| over the held-out timings (rows); bars: the "
               f"benchmark's, median <= {median_bar:.0%} and p90 <= {p90_bar:.0%} "
               f"(benchmarks/kernel_accuracy.py, run {run}); by kernel class: targets --show NAME")
    tab = Table(title="kernel model checks against public timings", box=box.SIMPLE_HEAD, pad_edge=False,
                collapse_padding=True, caption=caption)
    tab.add_column("chip", no_wrap=True)
    for head in ("rows", "median", "p90", "bars"):
        tab.add_column(head, justify="right", no_wrap=True)
    tab.add_column("timings from")
    for name, _family in targets():
        t = get_target(name)
        c = kernel_check(t)
        if c is None:
            src = copied_from(t)
            tab.add_row(name, "-", "-", "-", "-", escape(f"none (copies {src}'s fitted terms)" if src else "none"))
            continue
        tab.add_row(name, str(c.rows), check_percent(c.median_abs), check_percent(c.p90_abs),
                    "met" if c.meets(median_bar, p90_bar) else "missed", escape(", ".join(c.sources)))
    return tab
