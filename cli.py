"""The ``narrowpipe`` command line.

Every subcommand turns a :class:`~narrowpipe.errors.NarrowpipeError` into a one-line message and
exit status 2, never a traceback: users get the file, node and reason.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from .errors import NarrowpipeError

__all__ = ["main", "build_parser", "resolve_model", "parse_sets"]

_COMMANDS: dict[str, Callable[[argparse.Namespace, Console], int]] = {}


def command(name: str) -> Callable[[Callable[[argparse.Namespace, Console], int]], Callable[..., int]]:
    def deco(fn: Callable[[argparse.Namespace, Console], int]) -> Callable[..., int]:
        _COMMANDS[name] = fn
        return fn
    return deco


def parse_sets(items: Sequence[str] | None) -> dict[str, int]:
    """``["batch=8", "seq=2048"]`` -> ``{"batch": 8, "seq": 2048}`` (also accepts comma lists)."""
    out: dict[str, int] = {}
    for item in items or ():
        for part in item.split(","):
            if not part.strip():
                continue
            if "=" not in part:
                raise NarrowpipeError(f"--set expects DIM=VALUE, got {part!r}")
            k, v = part.split("=", 1)
            try:
                out[k.strip()] = int(v)
            except ValueError:
                raise NarrowpipeError(f"--set {k.strip()}: {v!r} is not an integer") from None
    return out


def resolve_model(model: str, *, rebuild: bool = False) -> Any:
    """A model argument: a file (.onnx, .pt2, .json) or the name of a bundled example."""
    from .loading import SUFFIXES, load
    from .models.examples import EXAMPLES, load_example
    path = Path(model)
    if path.suffix.lower() in SUFFIXES or path.exists():
        return load(path)
    if model in EXAMPLES:
        return load_example(model, rebuild=rebuild)
    return load_example(model)  # raises with close matches


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="a .onnx/.pt2/.json file or a bundled example (see `narrowpipe examples`)")
    p.add_argument("--set", action="append", metavar="DIM=VALUE", help="bind a symbolic dim, e.g. --set batch=8")
    p.add_argument("--rebuild", action="store_true", help="re-export a bundled example instead of the shipped graph")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="narrowpipe", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command")

    p = sub.add_parser("analyze", help="count FLOPs, bytes and params of every op")
    _add_model_args(p)
    p.add_argument("--json", metavar="FILE", help="write the full report as JSON")
    p.add_argument("--top", type=int, default=20, help="nodes to list (default 20)")
    p.add_argument("--all", action="store_true", help="list every node")
    p.add_argument("--strict", action="store_true", help="fail on any op without a cost rule")

    sub.add_parser("examples", help="list the bundled example models")
    return parser


@command("analyze")
def _analyze(args: argparse.Namespace, console: Console) -> int:
    from .costmodel.analyze import analyze
    from .render import print_report
    graph = resolve_model(args.model, rebuild=args.rebuild)
    report = analyze(graph, strict=args.strict, **parse_sets(args.set))
    print_report(report, console, top=None if args.all else args.top)
    if args.json:
        Path(args.json).write_text(report.to_json())
        console.print(f"wrote {args.json}")
    return 0


@command("examples")
def _examples(args: argparse.Namespace, console: Console) -> int:
    from rich.table import Table
    from .models.examples import EXAMPLES
    t = Table(title="bundled examples")
    t.add_column("name")
    t.add_column("model")
    t.add_column("default dims")
    for ex in EXAMPLES.values():
        t.add_row(ex.name, ex.description, ", ".join(f"{k}={v}" for k, v in ex.dims.items()))
    console.print(t)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    console = Console()
    if args.version:
        from . import __version__
        console.print(f"narrowpipe {__version__}")
        return 0
    if not args.command:
        parser.print_help()
        return 1
    try:
        return _COMMANDS[args.command](args, console)
    except NarrowpipeError as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {exc}", highlight=False)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
