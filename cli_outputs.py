"""The command line's outputs people act on: ``roofline``, ``--trace`` and ``--html`` on ``analyze`` and
``compare``, and ``completion`` for the shells. Kept out of :mod:`narrowpipe.cli`, which registers
them in a few lines; the drawing itself lives in :mod:`narrowpipe.render`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape

from .cli_args import count_arg
from .errors import NarrowpipeError
from .render.output_file import say_wrote

__all__ = ["add_output_args", "write_outputs", "check_outputs", "register_output_commands", "SHELLS"]

SHELLS = ("bash", "zsh", "tcsh")
Handler = Callable[[argparse.Namespace, Console], int]


def add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", metavar="FILE.json",
                   help="write the predicted schedule as a Chrome trace (open it in ui.perfetto.dev or "
                        "chrome://tracing): a track per device and stream, a slice per kernel")
    p.add_argument("--html", metavar="FILE",
                   help="write one self-contained HTML page: targets, rooflines, a sortable per-op table")


def check_outputs(args: argparse.Namespace, *, timed: bool, sweep: bool = False) -> None:
    """Refuse, before the run rather than after it, an output this run cannot give: a trace needs a
    schedule (a target); a sweep has many schedules and no one page."""
    trace, html = getattr(args, "trace", None), getattr(args, "html", None)
    if sweep and (trace or html):
        raise NarrowpipeError("--trace and --html take one point: drop the lists from --set "
                              "(a sweep writes its points with --json)")
    if trace and not timed:
        raise NarrowpipeError("--trace needs a predicted schedule: give --target")


def write_outputs(args: argparse.Namespace, console: Console, result: Any) -> None:
    """Write ``--trace`` and ``--html`` for a report or a comparison (:func:`check_outputs` first)."""
    if getattr(args, "trace", None):
        from .render.trace import write_trace
        write_trace(args.trace, result)
        say_wrote(console, args.trace, " (open it in ui.perfetto.dev)")
    if getattr(args, "html", None):
        from .render.html import write_html
        write_html(args.html, result)
        say_wrote(console, args.html)


def _roofline(args: argparse.Namespace, console: Console) -> int:
    from .cli_args import timing_kwargs
    from .cli_serve import load_step
    from .costmodel.analyze import analyze
    from .render.comparison import bottleneck_label
    from .render.roofline import plot_roofline, plotted_kernels
    from .render.units import seconds
    graph, dims, mode_notes = load_step(args, console)
    report = analyze(graph, args.target, dims=dims, **timing_kwargs(args))
    plot_roofline(report, args.out, top=args.top)
    shown, off = plotted_kernels(report)
    timing = report.timing
    assert timing is not None
    say_wrote(console, args.out, f": {report.graph} on {timing.target}, {seconds(timing.time_s)}, "
              f"{len(shown)} kernels as points (executed FLOPs)"
              + (f", {len(off)} not drawn (no FLOPs or no bytes: see the footnote)" if off else ""))
    for note in mode_notes:
        console.print(note, markup=False)
    for rank, b in enumerate(timing.top[:args.top], start=1):
        name = bottleneck_label(b, timing.top, with_op=False)   # two K/V cache copies read as one kernel twice
        console.print(f"  #{rank} {escape(name)} ({b.op}, {b.bound}-bound) {b.share:.0%}")
    if args.top > len(timing.top):
        console.print(f"note: --top {args.top}: the report ranks its {len(timing.top)} heaviest kernels "
                      "(every repeated layer's together); those are labelled")
    return 0


def _completion(args: argparse.Namespace, console: Console) -> int:
    import shtab

    from .cli import build_parser
    parser = build_parser()
    files = {"model", "json", "trace", "html", "out", "target_file", "trace_file", "from_measurements"}
    for action in _actions(parser):
        if action.dest in files:
            action.complete = shtab.FILE  # type: ignore[attr-defined]
    sys.stdout.write(shtab.complete(parser, shell=args.shell))   # raw text: no markup or wrapping
    return 0


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    out = list(parser._actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += _actions(sub)
    return out


def register_output_commands(sub: argparse._SubParsersAction) -> dict[str, Handler]:
    """Add ``roofline`` and ``completion`` to the subcommands; returns their handlers by name."""
    from .cli import _add_model_args, _add_timing_args
    from .cli_serve import add_mode_args
    p = sub.add_parser("roofline", help="plot every kernel on a chip's roofline (PNG or SVG)")
    _add_model_args(p)
    p.add_argument("--target", required=True, help="the chip (name, alias or .toml file)")
    p.add_argument("-o", "--out", default="roofline.png", metavar="FILE",
                   help="a .png or .svg file (default roofline.png)")
    p.add_argument("--top", type=count_arg, default=3,
                   help="bottlenecks to label (default 3, the most a report ranks)")
    _add_timing_args(p, price=False)
    add_mode_args(p)
    p = sub.add_parser("completion", help="print a shell completion script",
                       description='Print a completion script: eval "$(narrowpipe completion bash)" in ~/.bashrc, '
                                   "or save it as a file in your shell's completion folder.")
    p.add_argument("shell", choices=SHELLS)
    return {"roofline": _roofline, "completion": _completion}
