"""Tables for timed reports: one target's timing summary, side-by-side comparisons, what-ifs."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..costmodel.compare import Comparison, WhatIf
from ..costmodel.report import Report, Timing
from .units import nbytes, seconds, si

__all__ = ["timing_summary", "comparison_table", "print_comparison", "print_whatif", "bound_mix_text",
           "speedups_text"]

_SHORT = {"compute": "C", "memory": "M", "interconnect": "I", "overhead": "O"}


def bound_mix_text(t: Timing) -> str:
    parts = [f"{_SHORT[b]} {v:.0%}" for b, v in sorted(t.bound_mix.items(), key=lambda kv: -kv[1]) if v >= 0.005]
    return " ".join(parts) or "-"


def speedups_text(t: Timing) -> Text:
    if not t.speedup_if_doubled:
        return Text("-")
    narrow = t.narrowest
    text = Text()
    for i, (k, v) in enumerate(sorted(t.speedup_if_doubled.items(), key=lambda kv: -kv[1])):
        if i:
            text.append(" ")
        text.append(f"{k} {v:.2f}x", style="bold" if k == narrow else "")
    return text


def _fit(t: Timing) -> Text:
    if t.fits:
        extra = f" on {t.devices}" if t.devices > 1 else ""
        return Text(f"yes{extra} ({nbytes(t.memory_required)})", style="green")
    return Text(f"no: needs {t.devices_needed} ({nbytes(t.memory_required)})", style="red")


def _money(t: Timing) -> str:
    if t.cost_usd is None:
        return "-"
    per_m = t.cost_per_million_items
    return f"${t.cost_usd:.3g}/run, ${per_m:.3g}/M {t.item_unit}" if per_m is not None else f"${t.cost_usd:.3g}"


def _energy(t: Timing) -> str:
    if t.energy_j is None:
        return "-"
    per = t.items_per_joule
    return f"{si(t.energy_j, 'J')}, {per:.3g} {t.item_unit}/J" if per else si(t.energy_j, "J")


def timing_summary(r: Report) -> Table:
    t = r.timing
    assert t is not None
    tab = Table(title=f"on {t.target} ({t.family}, fusion {t.fusion}, {t.kernels} kernels)", show_header=False,
                box=None, title_justify="left")
    tab.add_column(style="bold")
    tab.add_column()
    tab.add_row("time", f"{seconds(t.time_s)}  ({si(t.throughput)} {t.item_unit}/s)")
    tab.add_row("MFU", f"{t.mfu:.1%} of {si(t.peak_flops, 'FLOP/s')} {t.dtype}" + (f" x {t.devices}" if t.devices > 1 else ""))
    tab.add_row("bound mix", bound_mix_text(t))
    tab.add_row("if doubled", speedups_text(t))
    tab.add_row("memory", _fit(t))
    tab.add_row("energy", _energy(t))
    tab.add_row("cost", _money(t))
    for b in t.top:
        tab.add_row("bottleneck", f"{b.kernel} ({b.op}, {b.bound}-bound) {seconds(b.time_s)} = {b.share:.1%}"
                    + (f"  [{b.scope}]" if b.scope else ""))
    for note in t.notes:
        tab.add_row("note", Text(note, style="yellow"))
    return tab


def comparison_table(c: Comparison) -> Table:
    dims = ", ".join(f"{k}={v}" for k, v in c.dims.items()) or "static"
    tab = Table(title=f"{c.graph} ({dims})", title_justify="left")
    for col, just in (("target", "left"), ("time", "right"), ("throughput", "right"), ("MFU", "right"),
                      ("bound mix", "left"), ("speed-up if doubled", "left"), ("top bottlenecks", "left"),
                      ("fits", "left"), ("energy", "right"), ("cost", "right")):
        tab.add_column(col, justify=just, overflow="fold")  # type: ignore[arg-type]
    fastest = c.fastest.time_s
    for r in c.reports:
        t = r.timing
        assert t is not None
        name = Text(f"{t.target}\n({t.family})", style="bold" if r.time_s == fastest else "")
        tops = "\n".join(f"{b.kernel} {b.bound[0].upper()} {b.share:.0%}" for b in t.top)
        tab.add_row(name, seconds(t.time_s), f"{si(t.throughput)} {t.item_unit}/s", f"{t.mfu:.1%}",
                    bound_mix_text(t), speedups_text(t), tops, _fit(t), _energy(t), _money(t))
    return tab


def print_comparison(c: Comparison, console: Console | None = None) -> None:
    console = console or Console()
    parts: list[object] = [comparison_table(c)]
    for r in c.reports:
        if r.timing and r.timing.notes:
            for note in r.timing.notes:
                parts.append(Text(f"{r.timing.target}: {note}", style="yellow"))
    parts.append(Text("bound mix: share of time in kernels bound by Compute, Memory, Interconnect, Overhead; "
                      "speed-up if doubled: the run's speed-up if that resource alone doubled.", style="dim"))
    console.print(Group(*parts))  # type: ignore[arg-type]


def print_whatif(w: WhatIf, console: Console | None = None) -> None:
    console = console or Console()
    a, b = w.base.timing, w.scaled.timing
    assert a is not None and b is not None
    tab = Table(title=f"what if {w.base.target} had " + ", ".join(f"{k} x{v:g}" for k, v in w.factors.items()),
                title_justify="left")
    tab.add_column("")
    tab.add_column("base", justify="right")
    tab.add_column("modified", justify="right")
    tab.add_row("time", seconds(a.time_s), seconds(b.time_s))
    tab.add_row("throughput", f"{si(a.throughput)} {a.item_unit}/s", f"{si(b.throughput)} {b.item_unit}/s")
    tab.add_row("MFU", f"{a.mfu:.1%}", f"{b.mfu:.1%}")
    tab.add_row("bound mix", bound_mix_text(a), bound_mix_text(b))
    tab.add_row("if doubled", speedups_text(a), speedups_text(b))
    console.print(tab)
    console.print(Text(f"speed-up: {w.speedup:.3f}x", style="bold"))
