"""``narrowpipe whatif``: the same model on a chip and on a modified copy of it, to see which pipe
is narrowest. Kept out of :mod:`narrowpipe.cli`, which registers it in a line.

It takes ``--mode decode --context N`` as analyze and compare do: the question "would more HBM
bandwidth help?" is mostly asked of a decode step, which a plain forward of the export is not.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from rich.console import Console

from .cli_args import parse_factors, parse_prices
from .cli_serve import add_mode_args, load_step
from .jsonout import dumps as dump_json

__all__ = ["register_whatif"]

Handler = Callable[[argparse.Namespace, Console], int]


def register_whatif(sub: argparse._SubParsersAction) -> dict[str, Handler]:
    """Add ``whatif`` to the subcommands; returns its handler by name."""
    from .cli import _add_model_args, _add_timing_args
    p = sub.add_parser("whatif", help="re-run a model on a modified chip: which pipe is narrowest?")
    _add_model_args(p)
    p.add_argument("--target", required=True, help="the chip to modify")
    p.add_argument("--scale", required=True, metavar="RES=F,...",
                   help="resource factors, e.g. hbm_bandwidth=2,peak_bf16=1.5 (see `narrowpipe targets --resources`)")
    p.add_argument("--json", metavar="FILE", help="write both reports as JSON (- for stdout)")
    _add_timing_args(p)
    add_mode_args(p)
    return {"whatif": _whatif}


def _whatif(args: argparse.Namespace, console: Console) -> int:
    from .cli import _write_json, timing_kwargs
    from .costmodel.compare import whatif
    from .render import print_whatif
    graph, dims, mode_notes = load_step(args, console)
    result = whatif(graph, args.target, parse_factors(args.scale), prices=parse_prices(args.price),
                    **timing_kwargs(args), dims=dims)
    for report in (result.base, result.scaled):     # the two reports may share one notes list
        report.notes.extend(n for n in mode_notes if n not in report.notes)
    print_whatif(result, console)
    return _write_json(args, console, dump_json(result.to_dict(), 2, "what-if"))
