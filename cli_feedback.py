"""How much the command line says while it works: ``--quiet``, ``--verbose`` and progress.

``--quiet`` silences everything on stdout (tables, "wrote" lines, progress): for scripts that
only want the files ``--json``, ``--trace`` or ``--html`` write; errors and warnings still go to
stderr. ``--verbose`` adds, on stderr, what was loaded and how long each step took, and a
traceback under an error (for a bug report). Both flags are accepted before or after the
subcommand (``narrowpipe -q compare ...`` or ``narrowpipe compare ... -q``).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.markup import escape

__all__ = ["add_feedback_flags", "load_model", "check_targets", "say", "verbose", "rewarned", "unwarned_notes"]


def add_feedback_flags(parser: argparse.ArgumentParser, *, subcommand: bool) -> None:
    """``-q/--quiet`` and ``-v/--verbose``; on a subcommand they default to "not given", so a flag
    given before the subcommand is not reset by the subcommand's parser."""
    default: Any = argparse.SUPPRESS if subcommand else False
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-q", "--quiet", action="store_true", default=default,
                       help="print nothing but errors and warnings (files are still written)")
    group.add_argument("-v", "--verbose", action="store_true", default=default,
                       help="also print what was loaded and how long each step took (stderr)")


def verbose(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "verbose", False))


def say(args: argparse.Namespace, message: str) -> None:
    """A ``--verbose`` line on stderr (nothing otherwise)."""
    if verbose(args):
        Console(stderr=True, highlight=False).print(f"[dim]{escape(message)}[/]")


def load_model(args: argparse.Namespace, console: Console) -> Any:
    """The command's model, with a spinner on a terminal (exporting a big model takes minutes) and,
    with ``--verbose``, what it is and how long it took."""
    from .cli import resolve_model
    from .render.progress import progress
    check_targets(args)
    rebuild = bool(getattr(args, "rebuild", False))
    what = f"exporting {args.model} with torch.export" if rebuild else f"loading {args.model}"
    start = time.perf_counter()
    with progress(console, what):
        graph = resolve_model(args.model, rebuild=rebuild)
    dims = ", ".join(graph.dims) or "none"
    say(args, f"{what}: {len(graph.nodes):,} nodes, dims {dims} ({time.perf_counter() - start:.2f} s)")
    return graph


def check_targets(args: argparse.Namespace) -> None:
    """Resolve the chips a command names (``--target``, ``--targets`` with ``--target-file``) before
    its model loads: an unknown name was reported only after a .pt2 loaded (QA: 13 s). Every caller
    of :func:`load_model` times a chip (analyze, compare, whatif, roofline)."""
    from .backends import get_target
    from .cli_args import target_specs
    if getattr(args, "target", None):
        get_target(args.target)
    if getattr(args, "targets", None):
        for spec in target_specs(args.targets, getattr(args, "target_file", None) or []):
            get_target(spec)


@contextmanager
def rewarned() -> Iterator[list[str]]:
    """The messages of the warnings its block raises (filled on leaving), raised again on leaving so
    the command line still shows them last, where the eye lands."""
    messages: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield messages
    for w in caught:
        messages.append(str(w.message))
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def unwarned_notes(report: Any, warned: list[str]) -> Any:
    """``report`` as printed: without the notes a warning also gives (a dim above its exported range
    was said twice, as 'note:' under the tables and as 'warning:' last); its JSON keeps them all."""
    return dataclasses.replace(report, notes=[n for n in report.notes if n not in warned])
