"""Tables for timed reports: one target's timing summary, side-by-side comparisons, what-ifs."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..costmodel.compare import Comparison, WhatIf
from ..costmodel.report import Bottleneck, Report, Timing
from ..costmodel.verdict import fastest_target, verdict
from .fit import fits as _fits
from .units import dollars, nbytes, seconds, si

__all__ = ["timing_summary", "comparison_table", "comparison_cards", "print_comparison", "print_whatif",
           "bound_mix_text", "speedups_text"]

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


def _money(t: Timing, sep: str = ", ") -> str:
    if t.cost_usd is None:
        return "-"
    per_m = t.cost_per_million_items
    if per_m is None:
        return dollars(t.cost_usd)
    return f"{dollars(t.cost_usd)}/run{sep}{dollars(per_m)}/M {t.item_unit}"


def _energy(t: Timing, sep: str = ", ") -> str:
    if t.energy_j is None:
        return "-"
    per = t.items_per_joule
    return f"{si(t.energy_j, 'J')}{sep}{si(per)} {t.item_unit}/J" if per else si(t.energy_j, "J")


def _mfu_precision(t: Timing) -> str:
    """What the MFU's peak is the rate of: the model's dtype, or the fallback the rate took where the
    target has none for it ("fp16 as bf16": a CPU without an fp16 rate printed its bf16 peak under
    an fp16 label)."""
    return t.precision if " as " in t.precision else t.dtype


def _hfu(t: Timing) -> str:
    """The hardware-FLOPs utilization beside MFU where the two differ (a training step that
    recomputes: MFU counts the model's FLOPs only, as ``plan`` prints them)."""
    if t.hfu is None or abs(t.hfu - t.mfu) <= 1e-12:
        return ""
    return f"; {t.hfu:.1%} with recomputation (hardware FLOPs)"


def timing_summary(r: Report) -> Table:
    t = r.timing
    assert t is not None
    kernels = f"{t.kernels} kernel" + ("" if t.kernels == 1 else "s")
    tab = Table(title=f"on {t.target} ({t.family}, fusion {t.fusion}, {kernels})", show_header=False,
                box=None, title_justify="left")
    tab.add_column(style="bold")
    tab.add_column()
    tab.add_row("time", f"{seconds(t.time_s)}  ({si(t.throughput)} {t.item_unit}/s)")
    tab.add_row("MFU", f"{t.mfu:.1%} of {si(t.peak_flops, 'FLOP/s')} {_mfu_precision(t)}"
                + (f" x {t.devices}" if t.devices > 1 else "") + _hfu(t))
    tab.add_row("bound mix", bound_mix_text(t))
    tab.add_row("if doubled", speedups_text(t))
    tab.add_row("memory", _fit(t))
    tab.add_row("energy", _energy(t))
    tab.add_row("cost", _money(t))
    for b in t.top:
        tab.add_row("bottleneck", f"{b.label} ({b.op}, {b.bound}-bound) {seconds(b.time_s)} = {b.share:.1%}"
                    + (f"  [e.g. {b.kernel}]" if b.count > 1 else ""))
    for note in t.notes:
        tab.add_row("note", Text(note, style="yellow"))
    return tab


def bottleneck_label(b: Bottleneck, top: Sequence[Bottleneck], *, with_op: bool = True) -> str:
    """``b``'s label, told apart from the others in ``top``: the op (with ``with_op``) where its
    module path alone repeats, and the heaviest kernel's name where path and op both do (a dataflow
    decode's K and V cache copies were "#1 ... self_attn x64 (copy ...)" and "#2", the same text)."""
    if sum(o.label == b.label for o in top) == 1:
        return b.label
    twin = sum((o.label, o.op) == (b.label, b.op) for o in top) > 1
    if not with_op:
        return f"{b.label} [{b.kernel}]" if twin else b.label
    return f"{b.label} ({b.op} {b.kernel})" if twin else f"{b.label} ({b.op})"


def _tops(t: Timing) -> str:
    """One line per bottleneck group; the op (and the heaviest kernel's name) where a module path
    alone repeats: three ``self_attn x160`` lines on a dataflow target read as one kernel thrice."""
    return "\n".join(f"{bottleneck_label(b, t.top)} {b.bound[0].upper()} {b.share:.0%}" for b in t.top) or "-"


def _narrowest(t: Timing, n: int = 2) -> Text:
    """The pipes whose doubling helps most, narrowest first (the rest are within 1% of 1.00x)."""
    if not t.speedup_if_doubled:
        return Text("-")
    ranked = sorted(t.speedup_if_doubled.items(), key=lambda kv: -kv[1])
    shown = [kv for i, kv in enumerate(ranked) if i < n and (i == 0 or kv[1] >= 1.01)]
    text = Text()
    for i, (k, v) in enumerate(shown):
        text.append(("\n" if i else "") + f"{k} {v:.2f}x", style="bold" if i == 0 else "")
    return text


#: (heading, cell) per row of a comparison; one place, so the wide table and the cards agree
_ROWS = (
    ("time", lambda t: seconds(t.time_s)),
    ("throughput", lambda t: f"{si(t.throughput)} {t.item_unit}/s"),
    ("MFU", lambda t: f"{t.mfu:.1%}"),
    ("bound mix", bound_mix_text),
    ("if doubled", _narrowest),
    ("top kernels", _tops),
    ("fits", _fit),
    ("energy", lambda t: _energy(t, "\n")),
    ("cost", lambda t: _money(t, "\n")),
)
_RIGHT = frozenset({"time", "throughput", "MFU"})


def _kind(t: Timing) -> str:
    """The family and what the model's contractions run as: ``(tpu, fp32 as 6x bf16)``."""
    return f"({t.family}, {t.precision})" if t.precision else f"({t.family})"


def _title(c: Comparison) -> str:
    dims = ", ".join(f"{k}={v}" for k, v in c.dims.items()) or "static"
    return f"{c.graph} ({dims})"


def _timings(c: Comparison) -> list[Timing]:
    out = []
    for r in c.reports:
        assert r.timing is not None
        out.append(r.timing)
    return out


def comparison_table(c: Comparison) -> Table:
    """One row per target: the layout for a wide terminal."""
    tab = Table(title=_title(c), title_justify="left")
    tab.add_column("target", justify="left")
    for head, _ in _ROWS:
        tab.add_column(head, justify="right" if head in _RIGHT else "left")
    fastest = fastest_target(c.reports)
    for t in _timings(c):
        name = Text(f"{t.target}\n{_kind(t)}", style="bold" if t.target == fastest else "")
        tab.add_row(name, *(cell(t) for _, cell in _ROWS))
    return tab


def comparison_cards(c: Comparison, width: int) -> list[Table]:
    """One column per target, as many targets per table as ``width`` holds: the layout for a
    narrow terminal or a log, where a row per target would fold every cell."""
    timings = _timings(c)
    cells = [[cell(t) for _, cell in _ROWS] for t in timings]
    col = [max([len(t.target), len(_kind(t))] + [max((len(line) for line in str(x).split("\n")), default=0)
                                                      for x in row]) for t, row in zip(timings, cells)]
    label = max(len(h) for h, _ in _ROWS)
    fastest = fastest_target(c.reports)
    tables: list[Table] = []
    i = 0
    while i < len(timings):
        used, j = label + 1, i
        while j < len(timings) and (j == i or used + col[j] + 2 <= width):
            used += col[j] + 2
            j += 1
        tab = Table(title=_title(c) if i == 0 else None, title_justify="left", box=None, padding=(0, 1),
                    show_edge=False)
        tab.add_column("", style="bold", no_wrap=True)
        for k in range(i, j):
            tab.add_column(Text(f"{timings[k].target}\n{_kind(timings[k])}",
                                style="bold underline" if timings[k].target == fastest else "bold"),
                           justify="left", overflow="fold")
        for r, (head, _) in enumerate(_ROWS):
            tab.add_row(head, *(cells[k][r] for k in range(i, j)))
        tables.append(tab)
        i = j
    return tables


def shared_notes(c: Comparison) -> list[str]:
    """The counting notes every target's report carries (the model's, not a chip's: an expert
    routing assumption, a dim range), printed once; compare showed them only in its JSON."""
    if not c.reports:
        return []
    rest = [set(r.notes) for r in c.reports[1:]]
    return [n for n in dict.fromkeys(c.reports[0].notes) if all(n in other for other in rest)]


def print_comparison(c: Comparison, console: Console | None = None) -> None:
    console = console or Console()
    wide = comparison_table(c)
    parts: list[object] = [wide] if _fits(console, wide) else list(_spaced(comparison_cards(c, console.width)))
    for note in shared_notes(c):
        parts.append(Text(f"note: {note}", style="yellow"))
    for t in _timings(c):
        for note in t.notes:
            parts.append(Text(f"{t.target}: {note}", style="yellow"))
    parts.append(verdict_text(c))
    parts.append(Text("bound mix: share of time in kernels bound by Compute, Memory, Interconnect, Overhead; "
                      "if doubled: the run's speed-up if that resource alone doubled (narrowest pipe first); "
                      "top kernels: share of the time and bound.", style="dim"))
    parts.append(checks_text(c))
    console.print(Group(*parts))  # type: ignore[arg-type]


def checks_text(c: Comparison) -> Text:
    """One dim line: how far each compared chip's kernel model is checked against public kernel
    timings (held-out median / p90 |error|; ``targets --checks`` has the table)."""
    from ..backends.kernel_checks import checks_line
    return Text(checks_line([t.target for t in _timings(c)]), style="dim")


#: How the verdict names each price basis (backends/vocab.py PRICE_BASES, and Timing.price_basis).
_BASIS_WORDS = {"hyperscaler-on-demand": "hyperscaler on-demand list", "other-on-demand": "other on-demand list",
                "given": "given (--price)", "unstated": "basis unstated"}


def verdict_text(c: Comparison) -> Text:
    """One line: the fastest (lowest system time), the most per chip where chip counts differ, the
    cheapest and the most frugal target, each with its narrowest pipe."""
    v = verdict(c.reports)
    out = Text("verdict: ", style="bold")
    picks = []
    if v.fastest is not None:   # the system's time: on its chip count where the counts differ
        chips = {t.target: t.devices for t in _timings(c)}[v.fastest.target] if v.per_chip else 1
        picks.append(("fastest", v.fastest, seconds(v.fastest.value) + (f" on {chips} chips" if chips > 1 else "")))
    if v.most_per_chip is not None:
        picks.append(("most per chip", v.most_per_chip, f"{si(v.most_per_chip.value)} {v.most_per_chip.unit}"))
    if v.cheapest is not None:
        picks.append(("cheapest", v.cheapest, f"{dollars(v.cheapest.value)} per M {v.cheapest.unit.split()[-1]}"))
    if v.most_per_joule is not None:
        picks.append(("most per joule", v.most_per_joule, f"{si(v.most_per_joule.value)} {v.most_per_joule.unit}"))
    if not picks:
        if not v.excluded:
            return out.append("no target was timed")
        needs = ", ".join(f"{t.target} needs >= {t.devices_needed}" for t in _timings(c) if not t.fits)
        return out.append(f"the program fits none of these targets as timed ({needs}); "
                          "compare a sharded plan or a larger system")
    for i, (label, p, how) in enumerate(picks):
        out.append(("; " if i else "") + f"{label} {p.target} ({how}, {p.narrowest.replace(' ', '-')}-bound)")
    if v.cheapest is None:
        out.append("; no price for any target that fits (--price NAME=USD_PER_HOUR)", style="dim")
    elif len(v.price_bases) > 1:
        mixed = "; ".join(f"{_BASIS_WORDS.get(b, b)}: {', '.join(names)}" for b, names in v.price_bases.items())
        out.append(f"; prices are not on one basis, so cheapest is not like for like ({mixed})", style="yellow")
    if v.excluded:
        out.append(f"; does not fit: {', '.join(v.excluded)}", style="yellow")
    return out


def _spaced(tables: list[Table]):
    for i, tab in enumerate(tables):
        if i:
            yield Text("")
        yield tab


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
    tab.add_row("memory", _memory_fit(a), _memory_fit(b))
    tab.add_row("narrowest", a.narrowest or "-", b.narrowest or "-")
    tab.add_row("bound mix", bound_mix_text(a), bound_mix_text(b))
    tab.add_row("if doubled", speedups_text(a), speedups_text(b))
    if a.cost_usd is not None or b.cost_usd is not None:     # --price shows here, not only in the JSON
        tab.add_row("cost", _money(a, "\n"), _money(b, "\n"))
    console.print(tab)
    # the question whatif answers: which pipe is narrowest, before and after
    moved = f"{a.narrowest} -> {b.narrowest}" if a.narrowest != b.narrowest else f"still {a.narrowest}"
    console.print(Text(f"speed-up: {w.speedup:.3f}x; narrowest pipe: {moved}", style="bold"))
    if a.fits != b.fits:
        console.print(Text(f"the model {'fits' if b.fits else 'no longer fits'} the modified chip "
                           f"({'it did not fit' if b.fits else 'it fit'} the base)", style="bold"))
    # the model's counting notes (a dim outside the exported range, unmodeled ops), as analyze prints
    for note in w.base.notes:
        console.print(Text(f"note: {note}", style="yellow"))
    # notes both sides share (the model does not fit either) are printed too: a what-if showed
    # only the modified side's new notes, and a model too large for both read as a plain speed-up
    for note in a.notes:
        console.print(Text(note if note in b.notes else f"base: {note}", style="yellow"))
    for note in [n for n in b.notes if n not in a.notes]:
        console.print(Text(note, style="yellow"))


def _memory_fit(t: Timing) -> Text:
    """Memory needed against the capacity of the devices used, and whether it fits."""
    where = f" on {t.devices}" if t.devices > 1 else ""
    if t.fits:
        return Text(f"fits{where}: {nbytes(t.memory_required)} of {nbytes(t.memory_capacity)}", style="green")
    if t.memory_required <= t.memory_capacity:   # under the raw capacity, over what the runtime leaves
        return Text(f"does not fit{where}: {nbytes(t.memory_required)} of {nbytes(t.memory_capacity)} is over "
                    "the runtime reserve", style="red")
    return Text(f"does not fit{where}: {nbytes(t.memory_required)} > {nbytes(t.memory_capacity)}", style="red")
