"""The roofline of a timed report: the chip's ceilings, and every kernel where the model puts it.

x is a kernel's arithmetic intensity (the FLOPs it executes over its external bytes, fused
intermediates excluded), y the FLOP/s it executes in its predicted time, both per device. Executed
FLOPs leave out the blocks a causal attention skips and count tile padding: the model's count
(FlopCounterMode's, which FLOP totals and MFU keep) over a causal attention's time put it above the
roof (llama-3-8b at seq 8192 on an H100: 1.2 PFLOP/s against 989 TFLOP/s). Per device: a kernel split over
``shards`` devices (tensor parallel) is one shard's FLOPs and bytes over one device's time, against
the one-device roofs; a pipelined kernel's time is every microbatch's pass, weight re-reads
included (its ``utilization`` is one pass's, without them: a Groq matmul's point sits ~4% below
it). The roofs are the target's datasheet peaks, one per precision it lists (matrix units
solid, vector units dashed), and one bandwidth slope per memory level (on-chip, main memory, a
dataflow chip's external tier, the host link). The run's own precision gets a dash-dotted roof
where the chip emulates it (fp32 as bf16 passes: one, a TPU's framework default; six at
``--fp32-matmul highest``), and the dotted line is what the model times
against (that peak at the matmul efficiency, main memory at the memory efficiency). A point's area
is its kernel's time; its colour the kernel's op group; the report's top bottlenecks are labelled.

A kernel without FLOPs (a copy, a gather: it moves bytes) has no place on a FLOP/s axis and a
kernel without bytes no intensity: they are counted in the footnote, each kind by name, with their
share of the time, never dropped silently; the footnote wraps under the x label. Text is placed
clear of other text (roof labels of close roofs above, below or left of each other; bottleneck
callouts clear of the roofs' labels; bandwidth labels along their slope clear of the callouts).
Drawn with matplotlib's object API on the Agg canvas: no display, no pyplot state.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import NarrowpipeError
from .units import seconds, si

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..costmodel.ceilings import Ceiling
    from ..costmodel.report import Report
    from ..costmodel.timeline import ScheduledKernel

__all__ = ["plot_roofline", "roofline_figure", "figure_bytes", "plotted_kernels", "FORMATS"]

FORMATS = (".png", ".svg")
#: One colour per op group, fixed so that every plot and page reads the same (matplotlib's tab10).
GROUP_COLORS = {"contraction": "#1f77b4", "attention": "#d62728", "convolution": "#9467bd",
                "elementwise": "#2ca02c", "normalization": "#ff7f0e", "reduction": "#8c564b",
                "data_movement": "#7f7f7f", "gather_scatter": "#bcbd22", "collective": "#17becf",
                "other": "#e377c2"}


def plotted_kernels(report: Report) -> tuple[list[ScheduledKernel], list[ScheduledKernel]]:
    """(the kernels drawn as points, the timed kernels that cannot be: no FLOPs or no bytes).
    Kernels that take no time (not modeled) are in neither: they have no achieved rate."""
    shown: list[ScheduledKernel] = []
    off: list[ScheduledKernel] = []
    for k in report.timeline:
        if k.kernel_s <= 0:
            continue
        (shown if k.device_executed_flops > 0 and k.bytes > 0 else off).append(k)
    return shown, off


def _merged(ceilings: Sequence[Ceiling]) -> list[tuple[str, float, bool]]:
    """Roofs with the same value drawn once with a joint label ("fp8_e4m3/int8 matrix = fp32
    vector"). The bool says whether a matrix roof is among them (solid line) or only vector ones."""
    out: dict[float, dict[str, list[str]]] = {}
    for c in ceilings:
        dtype, _, unit = c.label.rpartition(" ")
        out.setdefault(c.value, {}).setdefault(unit, []).append(dtype)
    return [(" = ".join(f"{'/'.join(names)} {unit}" for unit, names in units.items()), value, "matrix" in units)
            for value, units in out.items()]


def _footnote(shown: list[ScheduledKernel], off: list[ScheduledKernel], total: float) -> str:
    """What the points are, and what is not drawn, by kind (bytes but no FLOPs: copies, gathers;
    FLOPs but no bytes), by op, with its time: ``total`` is the busy time. It said "without FLOPs or
    bytes" of kernels that had bytes."""
    text = (f"{len(shown)} kernels as points (area: time; useful FLOPs: causal attention's skipped blocks "
            "and tile padding out)")
    if not off:
        return text + "; every timed kernel drawn"
    kinds = (("moving bytes, no FLOPs", [k for k in off if k.device_executed_flops <= 0 and k.bytes > 0]),
             ("FLOPs, no bytes", [k for k in off if k.device_executed_flops > 0 and k.bytes <= 0]),
             ("no FLOPs, no bytes", [k for k in off if k.device_executed_flops <= 0 and k.bytes <= 0]))
    parts = []
    for what, ks in kinds:
        if not ks:
            continue
        ops: dict[str, int] = {}
        for k in ks:
            ops[k.op] = ops.get(k.op, 0) + 1
        listed = ", ".join(f"{op} {n}" for op, n in sorted(ops.items(), key=lambda kv: -kv[1])[:4])
        more = ", ..." if len(ops) > 4 else ""
        parts.append(f"{len(ks)} {what} ({listed}{more})")
    off_s = sum(k.time_s for k in off)
    share = f" = {off_s / total:.0%} of the busy time" if total else ""
    return f"{text}; not drawn: {'; '.join(parts)}: {seconds(off_s)}{share}"


def roofline_figure(report: Report, *, top: int | None = None) -> Figure:
    """The figure (not written anywhere). ``top`` labels that many of the report's bottlenecks
    (default: all it lists)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from ..costmodel.report import Report
    if not isinstance(report, Report):
        raise NarrowpipeError(f"a roofline draws a Report (narrowpipe.analyze(graph, target)), got a "
                              f"{type(report).__name__}")
    if report.timing is None or report.ceilings is None:
        raise NarrowpipeError("a roofline needs a timed report: analyze the model with a target "
                              "(--target h100, or analyze(graph, 'h100'))")
    t, ceil = report.timing, report.ceilings
    shown, off = plotted_kernels(report)
    compute = _merged(ceil.compute)
    memory: dict[float, list[str]] = {}
    for c in ceil.memory:
        memory.setdefault(c.value, []).append(c.label)
    peak = max(v for _, v, _ in compute)
    xs = [k.device_useful_flops / k.device_bytes for k in shown]   # a sharded kernel: one device's shard
    ys = [k.device_useful_flops / k.kernel_s for k in shown]
    ridges = [peak / bw for bw in memory]
    x_lo, x_hi = min(xs + ridges + [1.0]) / 4, max(xs + ridges + [1.0]) * 8

    fig = Figure(figsize=(10, 6.5))
    FigureCanvasAgg(fig)   # a canvas that measures text: the labels are placed clear of each other
    busy = sum(k.time_s for k in report.timeline)     # device busy time (a pipeline's chips overlap)
    footnote = _wrapped(fig, _footnote(shown, off, busy), _FOOTNOTE_SIZE, 0.985 - 0.08)
    lines = footnote.count("\n") + 1
    # fixed before anything is placed (slope labels need the angle); the footnote's lines sit under
    # the x label, as many as it wraps to (one long line ran off the right edge)
    fig.subplots_adjust(left=0.08, right=0.985, bottom=0.085 + lines * _FOOTNOTE_LINE, top=0.94)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(min(ys + [peak * 1e-4]) / 4, peak * 3)
    ax.set_xlabel("arithmetic intensity (useful FLOP per byte of kernel traffic)")
    ax.set_ylabel("useful FLOP/s (per device)")
    top_bw = max(memory, default=0.0)
    for label, value, matrix in compute:
        ax.plot([value / top_bw if top_bw else x_lo, x_hi], [value, value], color="black",
                lw=1.2 if matrix else 0.9, ls="-" if matrix else "--", gid="ceiling")
        ax.annotate(f"{label} {si(value, 'FLOP/s')}", (x_hi, value), xytext=(-4, 2), textcoords="offset points",
                    ha="right", va="bottom", fontsize=7, gid="roof-label", zorder=4)
    slopes = sorted(memory.items(), key=lambda kv: -kv[0])
    for bw, _ in slopes:
        ax.plot([x_lo, peak / bw], [bw * x_lo, peak], color="dimgray", lw=1.0, gid="ceiling")
    _run_ceilings(ax, report, {v for _, v, _ in compute}, x_lo, x_hi)
    _unclutter_roof_labels(ax)
    _points(ax, shown, xs, ys)
    _labels(ax, report, shown, xs, ys, top)
    for bw, labels in slopes:   # after the callouts: a slope's label moves along its line clear of them
        _slope_label(ax, x_lo, peak / bw, bw, f"{' = '.join(labels)} {si(bw, 'B/s')}")
    ax.text(0.08, 0.008, footnote, transform=fig.transFigure, fontsize=_FOOTNOTE_SIZE, color="dimgray",
            va="bottom", gid="footnote")
    devices = f" x {t.devices} devices" if t.devices > 1 else ""
    ax.set_title(f"{report.graph} on {t.target}{devices}: {seconds(t.time_s)}, MFU {t.mfu:.1%}, "
                 f"{t.kernels} kernels", fontsize=10)
    ax.grid(True, which="major", lw=0.3, alpha=0.5)
    _place_legend(ax)
    return fig


#: Where the legend may sit inside the axes, the usual empty corners of a roofline first (ties go to
#: the earlier).
_LEGEND_PLACES = ("upper left", "lower right", "upper center", "center left", "center right", "lower center",
                  "lower left", "center", "upper right")


def _place_legend(ax: Any) -> None:
    """The op-group legend, last, where it covers the least: no text first (roof and slope labels,
    bottleneck callouts and their arrows), then as few kernels and as little roof as may be.
    matplotlib's ``loc="best"`` weighs lines and points but not text, and the fixed upper left
    covered Groq's and Cerebras' on-chip slope labels (80 TB/s, 21 PB/s: steep slopes through that
    corner) and Cerebras' #1-#3 callouts."""
    renderer = ax.figure.canvas.get_renderer()
    texts = [_box(t, renderer) for t in ax.texts]
    texts += [t.get_window_extent(renderer) for t in ax.texts if t.get_gid() == "bottleneck"]   # arrows too
    kernels = [xy for c in ax.collections for xy in ax.transData.transform(c.get_offsets())]
    roofs: list[tuple[float, float]] = []
    for line in ax.lines:     # straight on the log axes' screen: sampled every 4 pixels of their length
        xy = ax.transData.transform(line.get_xydata())
        for (x0, y0), (x1, y1) in zip(xy[:-1], xy[1:]):
            n = max(2, int(math.hypot(x1 - x0, y1 - y0) / 4))
            roofs += [(x0 + (x1 - x0) * i / n, y0 + (y1 - y0) * i / n) for i in range(n + 1)]
    best: tuple[tuple[float, int], str] | None = None
    for loc in _LEGEND_PLACES:
        box = _legend(ax, loc).get_window_extent(renderer)
        covered = sum(max(0.0, min(box.x1, t.x1) - max(box.x0, t.x0)) * max(0.0, min(box.y1, t.y1) - max(box.y0, t.y0))
                      for t in texts)
        hidden = 10 * sum(box.contains(x, y) for x, y in kernels) + sum(box.contains(x, y) for x, y in roofs)
        if best is None or (covered, hidden) < best[0]:
            best = ((covered, hidden), loc)
        if (covered, hidden) == (0.0, 0):
            break
    assert best is not None
    _legend(ax, best[1])


def _legend(ax: Any, loc: str) -> Any:
    return ax.legend(loc=loc, fontsize=7, title="op group", title_fontsize=7, markerscale=0.6)


def _box(text: Any, renderer: Any) -> Any:
    """A text's own box where it is now: an annotation's position is only worked out when it is drawn
    or asked for its whole extent (which takes in its arrow), so a box asked for right after a move
    was where it used to be, and every move tried looked clear or blocked alike."""
    from matplotlib.text import Annotation, Text
    if isinstance(text, Annotation):
        text.update_positions(renderer)
    return Text.get_window_extent(text, renderer)


#: The footnote's font size (points) and the height of one of its lines as a fraction of the figure's.
_FOOTNOTE_SIZE = 7
_FOOTNOTE_LINE = 0.021


def _wrapped(fig: Any, text: str, size: float, width: float) -> str:
    """``text`` wrapped to ``width`` of the figure's width at ``size`` points, measured on its canvas."""
    import textwrap
    renderer = fig.canvas.get_renderer()
    room = width * fig.bbox.width * 0.92   # text at 7 pt widens a little more than the dpi a PNG is saved at
    probe = fig.text(0, 0, text, fontsize=size)
    try:
        chars = len(text)
        while chars > 20 and probe.get_window_extent(renderer).width > room:
            chars = int(chars * min(room / probe.get_window_extent(renderer).width, 0.95))
            probe.set_text(textwrap.fill(text, chars, break_on_hyphens=False))
        return str(probe.get_text())
    finally:
        probe.remove()


def _unclutter_roof_labels(ax: Any) -> None:
    """Roof labels clear of each other, highest roof first: above its line at the right, else below
    it, else left of the labels it would cover (an 8% gap between a CPU's fp32 matrix and vector
    roofs printed their labels over each other)."""
    renderer = ax.figure.canvas.get_renderer()
    labels = sorted((t for t in ax.texts if t.get_gid() == "roof-label"), key=lambda t: -t.xy[1])
    placed: list[Any] = []
    for label in labels:
        for dy, va in ((2, "bottom"), (-2, "top")):
            label.xyann = (-4, dy)
            label.set_va(va)
            if not any(_box(label, renderer).padded(1).overlaps(b) for b in placed):
                break
        else:
            label.xyann = (-4, 2)
            label.set_va("bottom")
            while hits := [b for b in placed if _box(label, renderer).padded(1).overlaps(b)]:
                shift = _box(label, renderer).x1 - min(b.x0 for b in hits) + 6
                label.xyann = (label.xyann[0] - shift * 72 / ax.figure.dpi, 2)
        placed.append(_box(label, renderer).padded(1))


def _slope_label(ax: Any, x_lo: float, ridge: float, bw: float, text: str) -> None:
    """A bandwidth slope's label along its line, the angle the slope's on screen (the axes' position
    is fixed before this runs): a decade left of the ridge, or the nearest place further down the
    line where it covers no other label or callout arrow (H100's bottleneck callouts hid 'memory
    3.35 TB/s'); where none is clear, the first place."""
    renderer = ax.figure.canvas.get_renderer()
    others = list(ax.texts)
    callouts = [t.get_window_extent(renderer) for t in others if t.get_gid() == "bottleneck"]   # arrows too
    boxes = [_box(t, renderer) for t in others] + callouts
    start = max(x_lo * 1.5, ridge / 10)
    (x0, y0), (x1, y1) = ax.transData.transform([(start, bw * start), (start * 10, bw * start * 10)])
    label = ax.annotate(text, (start, bw * start), xytext=(0, 3), textcoords="offset points", fontsize=7,
                        color="dimgray", rotation=math.degrees(math.atan2(y1 - y0, x1 - x0)),
                        rotation_mode="anchor", gid="slope-label")
    x = start
    while x >= x_lo * 1.5:
        label.xy = (x, bw * x)
        if not any(_box(label, renderer).overlaps(b) for b in boxes):
            return
        x /= 1.5
    label.xy = (start, bw * start)


def _run_ceilings(ax: Any, report: Report, roofs: set[float], x_lo: float, x_hi: float) -> None:
    """What the model times this run against: the matrix peak of its dominant precision (a roof of
    its own where the chip emulates it, e.g. fp32 as 6x bf16 at ``--fp32-matmul highest``), and dotted, that peak at the
    matmul efficiency with main memory at the memory efficiency (the fractions calibration measures)."""
    assert report.timing is not None and report.ceilings is not None
    t, ceil = report.timing, report.ceilings
    bw = next((c.value for c in ceil.memory if c.field == "memory_bandwidth"), None)
    if t.peak_flops <= 0 or bw is None:
        return
    runs_as = t.precision or t.dtype
    if t.peak_flops not in roofs:
        ax.plot([t.peak_flops / bw, x_hi], [t.peak_flops, t.peak_flops], color="black", lw=0.9, ls="-.",
                gid="run-ceiling")
        ax.annotate(f"{runs_as} {si(t.peak_flops, 'FLOP/s')}", (x_hi, t.peak_flops), xytext=(-4, 2),
                    textcoords="offset points", ha="right", va="bottom", fontsize=7, gid="roof-label", zorder=4)
    flops_s, bytes_s = t.peak_flops * ceil.matmul_efficiency, bw * ceil.memory_efficiency
    ax.plot([x_lo, flops_s / bytes_s, x_hi], [bytes_s * x_lo, flops_s, flops_s], color="gray", lw=0.9, ls=":",
            gid="achievable", label=f"achievable: {runs_as} x {ceil.matmul_efficiency:.2g}, "
                                    f"memory x {ceil.memory_efficiency:.2g}")


def _points(ax: Any, shown: list[ScheduledKernel], xs: list[float], ys: list[float]) -> None:
    """One scatter per op group (one legend entry each); every collection's gid starts with
    ``kernels`` so a reader of the figure finds them."""
    longest = max((k.kernel_s for k in shown), default=0.0) or 1.0
    by_group: dict[str, list[int]] = {}
    for i, k in enumerate(shown):
        by_group.setdefault(k.group, []).append(i)
    for group, idx in sorted(by_group.items(), key=lambda kv: -sum(shown[i].kernel_s for i in kv[1])):
        ax.scatter([xs[i] for i in idx], [ys[i] for i in idx], s=[8 + 400 * shown[i].kernel_s / longest for i in idx],
                   color=GROUP_COLORS.get(group, GROUP_COLORS["other"]), alpha=0.65, edgecolors="black",
                   linewidths=0.3, label=f"{group} ({len(idx)})", gid=f"kernels:{group}", zorder=3)


def _labels(ax: Any, report: Report, shown: list[ScheduledKernel], xs: list[float], ys: list[float],
            top: int | None) -> None:
    from .comparison import bottleneck_label
    assert report.timing is not None
    where = {k.name: i for i, k in enumerate(shown)}
    lo, hi = (math.log(v) for v in ax.get_xlim())
    renderer = ax.figure.canvas.get_renderer()
    taken = [_box(t, renderer) for t in ax.texts]   # the roofs' labels
    for rank, b in enumerate(report.timing.top[:top], start=1):
        i = where.get(b.kernel)
        if i is None:
            continue
        right_half = (math.log(xs[i]) - lo) / (hi - lo) > 0.5   # labels there run leftwards, inside the axes
        name = bottleneck_label(b, report.timing.top, with_op=False)
        label = ax.annotate(f"#{rank} {name} ({b.bound}, {b.share:.0%})", (xs[i], ys[i]),
                            xytext=(-10 if right_half else 10, -14 * rank), ha="right" if right_half else "left",
                            textcoords="offset points", fontsize=8, gid="bottleneck",
                            arrowprops={"arrowstyle": "-", "lw": 0.6, "color": "black"},
                            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "gray", "lw": 0.5, "alpha": 0.9})
        taken.append(_clear_of(label, taken, renderer))


def _clear_of(label: Any, taken: list[Any], renderer: Any, step_pt: float = 4.0, tries: int = 30) -> Any:
    """Shift ``label`` up or down, nearest first, until its box overlaps none of ``taken`` (labels of
    kernels a few points apart in height were drawn over each other, or over a bandwidth's label);
    where no shift within ``tries`` steps clears it, it stays put. Returns its final box."""
    def box() -> Any:   # the text's own box: an annotation's extent takes in its arrow too
        return _box(label, renderer).padded(2)

    x, y = label.xyann
    for k in range(2 * tries + 1):
        shift = step_pt * ((k + 1) // 2) * (-1 if k % 2 else 1)
        label.xyann = (x, y + shift)
        if not any(box().overlaps(t) for t in taken):
            return box()
    label.xyann = (x, y)
    return box()


def figure_bytes(fig: Figure, fmt: str = "png", dpi: int = 110) -> bytes:
    """The figure encoded as ``fmt`` (png or svg), for pages that inline it."""
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi)
    return buf.getvalue()


def plot_roofline(report: Report, path: str | Path | None = None, *, top: int | None = None) -> Figure:
    """Draw ``report``'s roofline and write it to ``path`` (.png or .svg) when given."""
    fig = roofline_figure(report, top=top)
    if path is not None:
        out = Path(path)
        if out.suffix.lower() not in FORMATS:
            raise NarrowpipeError(f"roofline {out}: write a .png or .svg file (got {out.suffix or 'no suffix'!r})")
        from .output_file import make_parent
        make_parent(out, "roofline")
        try:
            fig.savefig(out, dpi=150)
        except OSError as exc:
            raise NarrowpipeError(f"cannot write roofline {out}: {exc.strerror or exc}") from None
    return fig
