"""Tables of a training step: FLOPs and time by phase, and memory per device by term."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from ..costmodel.report import Report, Timing
from ..costmodel.training.memory import TrainingMemory
from .units import flops, nbytes, percent, seconds

__all__ = ["phase_table", "memory_table"]

_MATMUL = ("contraction", "convolution", "attention")


def phase_table(r: Report) -> Table:
    """One row per phase (forward, recompute, backward, optimizer): FLOPs, matmul FLOPs, time."""
    by_phase = r.flops_by_phase
    matmul: dict[str, int] = {}
    for row in r.ops:
        if row.phase is not None and row.group in _MATMUL:
            matmul[row.phase] = matmul.get(row.phase, 0) + row.flops
    times = r.time_by_phase
    t = Table(title="training step by phase", title_justify="left")
    for col in ("phase", "FLOPs", "% FLOPs", "matmul FLOPs", *(("time", "% time") if times else ())):
        t.add_column(col, justify="left" if col == "phase" else "right")
    total_time = sum(times.values())
    for phase, f in by_phase.items():
        cells = [phase, flops(f), percent(f, r.flops), flops(matmul.get(phase, 0))]
        if times:
            cells += [seconds(times.get(phase, 0.0)), percent(times.get(phase, 0.0), total_time)]
        t.add_row(*cells)
    return t


def _spread(t: Timing, capacity: float) -> str:
    """Where the timed run's layout spreads the step over several chips (a dataflow layout): what its
    fullest chip holds, so the caption says what the run's "memory" line says, not only one device."""
    held = t.plan.get("chip_bytes") or []
    fullest = max(held, default=0.0)
    verdict = "fits" if t.fits else "does not fit"
    return (f"{verdict} on {t.devices} chips laid out by layer, each holding its layers' weights, gradients and "
            f"optimizer states (the fullest {nbytes(fullest)} of {nbytes(capacity)}); on one device: ")


def memory_table(m: TrainingMemory, capacity: float | None = None, timing: Timing | None = None) -> Table:
    """Bytes per device by term, with the verdict against ``capacity`` as the caption; ``timing``,
    where its layout spans several chips, says first how they hold it."""
    c = m.config
    title = (f"training memory per device ({c['optimizer']}, {c['param_dtype']} weights, "
             f"recompute={c['recompute']}, zero={c['zero']}, dp={c['dp']} tp={c['tp']} pp={c['pp']})")
    t = Table(title=title, title_justify="left")
    t.add_column("term")
    t.add_column("bytes", justify="right")
    t.add_column("share", justify="right")
    over = dict(m.overflow(capacity)) if capacity is not None else {}
    for term, size in m.terms().items():
        label = Text(term.replace("_", " "), style="bold red" if term in over else "")
        t.add_row(label, nbytes(size), percent(size, m.total))
    t.add_row(Text("total", style="bold"), nbytes(m.total), "")
    if capacity is not None:
        spread = timing is not None and timing.devices > 1 and bool(timing.plan.get("chip_bytes"))
        t.caption = (_spread(timing, capacity) if spread and timing is not None else "") + m.explain(capacity)
        t.caption_justify = "left"
    return t
