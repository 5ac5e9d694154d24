"""Predicted-vs-measured tables and plots, from validation results."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.table import Table
from rich.text import Text

from ..calibration.validate import Case, ModelValidation
from .units import seconds

__all__ = ["validation_table", "cases_table", "plot_predicted_vs_measured"]


def _err(c: Case) -> Text:
    style = "green" if abs(c.error) <= 0.2 else "yellow" if abs(c.error) <= 0.5 else "red"
    return Text(f"{c.error:+.1%}", style=style)


def _cpu_err(c: Case) -> Text:
    e = c.cpu_error
    if e is None:
        return Text("")
    return Text(f"{e:+.1%}", style="green" if abs(e) <= 0.2 else "yellow" if abs(e) <= 0.5 else "red")


def cases_table(cases: Sequence[Case], title: str) -> Table:
    """One row per case; the thread-CPU-clock columns appear when some case was measured on it. A
    case measured faster than the target allows shows the flag in place of a time and an error;
    the caption says how each kind of row was measured and predicted (:attr:`Case.how`)."""
    hows = list(dict.fromkeys(f"{c.group if c.group in ('model', 'probe') else 'per-op'} rows: {c.how}"
                              for c in cases if c.how))
    t = Table(title=title, title_justify="left", caption="\n".join(hows) or None, caption_justify="left")
    cpu = any(c.cpu_s is not None for c in cases)
    cols = [("group", "left"), ("case", "left"), ("measured (wall)", "right"), ("predicted", "right"),
            ("error", "right")] + ([("measured (CPU)", "right"), ("error vs CPU", "right")] if cpu else [])
    for col, just in cols:
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for c in cases:
        if c.impossible:     # never a time: faster than the target's peaks
            t.add_row(c.group, c.name, Text("flagged: faster than the target's peaks",
                                            style="bold red"), seconds(c.predicted_s), "-", *(["", ""] if cpu else []))
            continue
        measured = seconds(c.measured_s) + (f" ±{c.spread / 2:.0%}" if c.spread else "")
        row: list[str | Text] = [c.group, c.name, measured, seconds(c.predicted_s), _err(c)]
        if cpu:
            row += [seconds(c.cpu_s) + (f" ±{c.cpu_spread / 2:.0%}" if c.cpu_spread else "")
                    if c.cpu_s is not None else "", _cpu_err(c)]
        t.add_row(*row)
    return t


def validation_table(results: Sequence[ModelValidation], probes: Sequence[Case] = ()) -> Table:
    cases: list[Case] = []
    for r in results:
        cases.append(r.end_to_end)
        cases.extend(r.by_op)
    return cases_table([*cases, *probes], "predicted vs measured (eager torch on this machine)")


def plot_predicted_vs_measured(cases: Sequence[Case], path: str | Path, title: str) -> Path:
    """Log-log scatter with the y = x line and +-20% band, one colour per group."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 5.6), dpi=120)
    groups = sorted({c.group for c in cases})
    lo = min(min(c.measured_s, c.predicted_s) for c in cases) * 0.7
    hi = max(max(c.measured_s, c.predicted_s) for c in cases) * 1.4
    ax.plot([lo, hi], [lo, hi], color="black", lw=1)
    ax.fill_between([lo, hi], [lo * 0.8, hi * 0.8], [lo * 1.2, hi * 1.2], color="grey", alpha=0.2, label="±20%")
    markers = {"model": "*"}
    for g in groups:
        xs = [c.measured_s for c in cases if c.group == g]
        ys = [c.predicted_s for c in cases if c.group == g]
        ax.scatter(xs, ys, label=g, marker=markers.get(g, "o"), s=90 if g == "model" else 28)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured (s)")
    ax.set_ylabel("predicted (s)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out
