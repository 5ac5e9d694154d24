"""``narrowpipe diagnose``: the run's label, where the time went, the top offenders and what moves them.

Reads only :class:`~narrowpipe.costmodel.diagnose.Diagnosis`; the subcommand's argparse wiring
(:func:`register_diagnose`) and handler (:func:`run_diagnose`) live here so the CLI adds two calls.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..cli_args import count_arg
from .fit import fits
from .output_file import say_wrote, write_output
from .units import flops, nbytes, seconds, si

if TYPE_CHECKING:
    from ..costmodel.diagnose import Diagnosis

__all__ = ["diagnosis_summary", "offenders_table", "print_diagnosis", "register_diagnose", "run_diagnose"]

_STYLE = {"compute": "green", "memory": "yellow", "overhead": "magenta", "latency": "blue", "interconnect": "cyan",
          "host-copy": "magenta"}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _util(x: float | None) -> Text:
    """A utilization, printed as a number up to the diagnosis's ``TOO_FAST`` (a calibrated rate is a
    median a run may beat by a few percent) and as ">100%" beyond: faster than that means a wrong
    target or count (the diagnosis says which ops in a note)."""
    from ..costmodel.diagnose.run import TOO_FAST
    if x is not None and x > TOO_FAST:
        return Text(">100%", style="bold red")
    return Text(_pct(x))


#: Columns dropped, in this order, until the offenders table fits the terminal unfolded.
_DROPPABLE = ("FLOP/s", "B/s", "model", "shapes", "share", "what would move it")


def diagnosis_summary(d: Diagnosis) -> Table:
    t = Table(title=f"{Path(d.trace).name} on {d.target} ({d.mode} trace)", show_header=False, box=None,
              title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    t.add_row("label", Text(d.label_text.upper(), style="bold red"))
    if d.machine_mismatch:   # beside the label it qualifies, not only in a warning after the tables
        t.add_row("caution", Text(d.machine_mismatch, style="bold yellow"))
    for r in d.reasons:
        t.add_row("why", r)
    t.add_row("window", f"{seconds(d.window_s)} (busy {seconds(d.busy_s)}, idle {seconds(d.idle_s)} = "
                        f"{_pct(d.idle_fraction)})")
    if d.comm_s:
        t.add_row("communication", f"{seconds(d.comm_s)} vs compute {seconds(d.compute_s)} "
                                   f"(overlapped {seconds(d.overlap_s)})")
    t.add_row("work", f"{flops(d.flops)} ({flops(d.matmul_flops)} matmul-like), {nbytes(d.bytes)} compulsory")
    t.add_row("MFU", Text.assemble(_util(d.mfu), f" of {si(d.peak_flops, 'FLOP/s')} {d.dtype}; bandwidth ",
                                   _util(d.bandwidth_utilization)))
    return t


def offenders_table(d: Diagnosis, top: int = 10, drop: frozenset[str] = frozenset()) -> Table:
    rows = d.top(top)
    t = Table(title=f"top {len(rows)} of {len(d.ops)} ops by time", title_justify="left",
              caption="time, share, FLOP/s, B/s: all calls; compute and memory: the typical (median) call, so one "
                      "preempted call does not set the bound; memory: share of the bandwidth the target reaches at "
                      "the op's transfer size (what its bound is judged on)", caption_justify="left")
    columns = (("op", "left"), ("shapes", "left"), ("calls", "right"), ("time", "right"), ("share", "right"),
               ("FLOP/s", "right"), ("B/s", "right"), ("compute (typical call)", "right"),
               ("memory/link (typical call)", "right"),
               ("model", "right"), ("bound", "left"), ("what would move it", "left"))
    keep = [i for i, (col, _) in enumerate(columns) if col not in drop]
    for i in keep:
        col, just = columns[i]
        t.add_column(col, justify=just, overflow="fold")  # type: ignore[arg-type]
    names = [o.name for o in rows]
    for o in rows:
        model = f"{seconds(o.predicted_s)}" if o.predicted_s is not None else "-"
        util = o.link_utilization if o.bound in ("interconnect", "host-copy") else \
            (o.memory_reach_utilization or o.memory_utilization)
        # without the shapes column, one name at several shapes (five aten::linear) needs them beside it
        name = o.name if "shapes" not in drop or names.count(o.name) == 1 or not o.shapes else \
            Text(o.name).append(f"\n{_short_shapes(o.shapes)}", style="dim")
        cells = (name, o.shapes or o.kernel, str(o.calls), seconds(o.time_s), _pct(o.share),
                 si(o.achieved_flops_per_s), si(o.achieved_bytes_per_s), _util(o.compute_utilization), _util(util),
                 model, Text(o.bound, style=_STYLE.get(o.bound, "")), o.advice[0] if o.advice else "")
        t.add_row(*(cells[i] for i in keep))
    return t


def _short_shapes(shapes: str) -> str:
    """``fp32[2, 128, 256], fp32[8000, 256]`` as ``(2x128x256, 8000x256)``: the dims that tell rows
    apart, in the width a narrow table has."""
    import re
    return "(" + ", ".join(re.sub(r"^\w*\[|\]$", "", s.strip()).replace(", ", "x") or "scalar"
                           for s in shapes.split("], ")) + ")"


def fitting_offenders_table(d: Diagnosis, console: Console, top: int = 10) -> Table:
    """The offenders table with the least useful columns dropped until it fits ``console``."""
    drop: set[str] = set()
    table = offenders_table(d, top)
    for col in _DROPPABLE:
        if fits(console, table):
            break
        drop.add(col)
        table = offenders_table(d, top, frozenset(drop))
    return table


def unmodeled_table(d: Diagnosis) -> Table:
    t = Table(title="UNMODELED (no cost rule or no launching op: time counted, work unknown)",
              title_style="bold red", title_justify="left")
    for col in ("op / kernel", "calls", "time", "share"):
        t.add_column(col)
    for u in d.unmodeled:
        t.add_row(Text(u.name, style="red"), str(u.calls), seconds(u.time_s), _pct(u.share))
    return t


def print_diagnosis(d: Diagnosis, console: Console | None = None, *, top: int = 10) -> None:
    console = console or Console()
    table = fitting_offenders_table(d, console, top)
    parts: list[Table | Text] = [diagnosis_summary(d), table]
    if not any(c.header == "what would move it" for c in table.columns):   # too narrow: advice below
        by_advice: dict[str, list[str]] = {}
        for o in d.top(top):
            if o.advice:
                by_advice.setdefault(o.advice[0], [])
                if o.name not in by_advice[o.advice[0]]:
                    by_advice[o.advice[0]].append(o.name)
        parts += [Text(f"  {', '.join(names)}: {advice}") for advice, names in by_advice.items()]
    if d.unmodeled:
        parts.append(unmodeled_table(d))
    parts.append(Text("what would move the run:", style="bold"))
    parts += [Text(f"  - {a}") for a in d.advice]
    parts += [Text(f"note: {n}", style="yellow") for n in d.notes]
    console.print(Group(*parts))


def register_diagnose(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("diagnose", help="label a measured run from a torch.profiler trace: compute, memory, "
                                        "interconnect or launch bound, with the top offenders")
    p.add_argument("trace", help="Chrome trace JSON (.json or .json.gz) from torch.profiler with record_shapes=True")
    p.add_argument("--target", required=True, help="the chip the trace ran on (name, alias or .toml file)")
    p.add_argument("--json", metavar="FILE", help="write the full diagnosis as JSON (- for stdout)")
    p.add_argument("--top", type=count_arg, default=10, help="offenders to list (default 10)")
    p.add_argument("--tf32", action="store_true", help="fp32 matmuls ran on TF32 tensor cores")
    p.add_argument("--fp32-conv", choices=("default", "high", "highest"), default="default",
                   help="fp32 convolutions' precision: default the library's (cuDNN on Ampere+: TF32, torch's "
                   "default), highest if torch.backends.cudnn.allow_tf32 was False")
    return p


def run_diagnose(args: argparse.Namespace, console: Console) -> int:
    from ..costmodel.diagnose import diagnose
    d = diagnose(args.trace, args.target, allow_tf32=getattr(args, "tf32", False),
                 fp32_conv=getattr(args, "fp32_conv", "default"))
    print_diagnosis(d, console, top=args.top)
    if args.json:
        write_output(args.json, d.to_json(), "--json")
        say_wrote(console, args.json)
    return 0
