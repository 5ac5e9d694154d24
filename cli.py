"""The ``narrowpipe`` command line.

Every subcommand turns a :class:`~narrowpipe.errors.NarrowpipeError` into a one-line message and
exit status 2, never a traceback: users get the file, node and reason.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from .cli_args import (
    count_arg,
    formats_arg,
    parse_grid,
    parse_prices,
    parse_sets,
    positive_arg,
    positive_list_arg,
    target_specs,
    timing_kwargs,
)
from .cli_feedback import add_feedback_flags, load_model, rewarned, say, unwarned_notes
from .cli_outputs import add_output_args, check_outputs, register_output_commands, write_outputs
from .cli_serve import add_mode_args, apply_mode, register_serve, run_serve, run_serve_sweep
from .cli_train import add_train_args, print_training_memory, training_graph
from .cli_whatif import register_whatif
from .errors import NarrowpipeError, NarrowpipeWarning
from .jsonout import dumps as dump_json

__all__ = ["main", "build_parser", "resolve_model", "parse_sets"]

_COMMANDS: dict[str, Callable[[argparse.Namespace, Console], int]] = {}


def command(name: str) -> Callable[[Callable[[argparse.Namespace, Console], int]], Callable[..., int]]:
    def deco(fn: Callable[[argparse.Namespace, Console], int]) -> Callable[..., int]:
        _COMMANDS[name] = fn
        return fn
    return deco


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
    p.add_argument("--set", action="append", metavar="DIM=VALUE",
                   help="bind a symbolic dim, e.g. --set batch=8; compare sweeps a list: --set batch=1,8,64")
    p.add_argument("--rebuild", action="store_true", help="re-export a bundled example instead of the shipped graph")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="narrowpipe", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    add_feedback_flags(parser, subcommand=False)
    sub = parser.add_subparsers(dest="command")

    p = sub.add_parser("analyze", help="count FLOPs, bytes and params of every op")
    _add_model_args(p)
    p.add_argument("--json", metavar="FILE", help="write the full report as JSON (- for stdout)")
    p.add_argument("--top", type=count_arg, default=20, help="nodes to list (default 20)")
    p.add_argument("--all", action="store_true", help="list every node")
    p.add_argument("--strict", action="store_true", help="fail on any op without a cost rule")
    p.add_argument("--target", help="time the model on a target (name, alias or .toml file)")
    _add_timing_args(p)
    add_output_args(p)
    add_mode_args(p)
    add_train_args(p)

    p = sub.add_parser("compare", help="predict a model on several hardware targets side by side")
    _add_model_args(p)
    p.add_argument("--targets", required=True,
                   help="comma-separated target names, aliases or .toml files (see `narrowpipe targets`)")
    p.add_argument("--target-file", action="append", default=[], metavar="FILE",
                   help="add a user target from a TOML file (repeatable); --targets may name it")
    p.add_argument("--json", metavar="FILE", help="write every target's full report as JSON (- for stdout)")
    p.add_argument("--strict", action="store_true", help="fail on any op without a cost rule")
    _add_timing_args(p)
    add_output_args(p)
    add_mode_args(p)

    _COMMANDS.update(register_whatif(sub))

    p = sub.add_parser("targets", help="list the hardware catalog")
    p.add_argument("--resources", action="store_true", help="list the resource names whatif --scale accepts")
    p.add_argument("--show", metavar="TARGET", help="print one chip's or system's numbers with their sources")
    p.add_argument("--checks", action="store_true",
                   help="how far each chip's kernel model is checked: held-out error on public kernel timings")

    p = sub.add_parser("calibrate", help="microbenchmark this machine and write a target file (needs torch)")
    p.add_argument("-o", "--out", default="host.toml", help="target file to write (default host.toml)")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    p.add_argument("--threads", type=positive_arg, help="CPU threads to use (default: torch's default)")
    p.add_argument("--quick", action="store_true", help="a short sweep (for smoke tests)")
    p.add_argument("--base", help="calibrate a catalog chip: keep its peaks, replace its measured ceilings")
    p.add_argument("--from-measurements", metavar="FILE",
                   help="fit a measurements JSON, or a per-kernel timings CSV (with --base), instead of measuring")
    p.add_argument("--name", help="name of the written target")

    p = sub.add_parser("validate", help="run a model with torch here and compare it with the prediction")
    p.add_argument("model", help="a validation architecture (gpt2, smollm2-135m, bert-base, t5-small, vit-base, "
                   "swin-tiny, resnet50, mobilenet-v2, convnext-tiny)")
    p.add_argument("--target", required=True, help="the calibrated target (e.g. host.toml)")
    p.add_argument("--batch", type=positive_list_arg, action="extend", help="batch size(s): 1,8 or repeated "
                   "(default 1 and 8)")
    p.add_argument("--seq", type=positive_arg, help="sequence length for text models (default 128; an image "
                   "model has none)")
    p.add_argument("--threads", type=positive_arg, help="CPU threads (default: the calibrated target's)")
    p.add_argument("--tiny", action="store_true", help="a 2-layer version of the architecture (smoke tests)")
    p.add_argument("--json", metavar="FILE", help="write the table as JSON (- for stdout)")

    from .render.diagnosis import register_diagnose
    register_diagnose(sub)
    register_serve(sub)
    from .render.plan import register_plan
    register_plan(sub)

    sub.add_parser("examples", help="list the bundled example models")
    _COMMANDS.update(register_output_commands(sub))
    for subparser in sub.choices.values():
        add_feedback_flags(subparser, subcommand=True)
    return parser


def _add_timing_args(p: argparse.ArgumentParser, *, price: bool = True) -> None:
    """The options that change predicted times; ``--price`` only where a cost is printed (a roofline
    plots no cost, and offered it to no effect)."""
    p.add_argument("--fusion", choices=("full", "none"), help="kernel fusion (default: full; CPU: none)")
    p.add_argument("--tf32", action="store_true", help="fp32 matmuls on TF32 tensor cores (= --fp32-matmul high)")
    p.add_argument("--fp32-matmul", choices=("default", "high", "highest"), default="default",
                   help="fp32 matmul precision: the framework default (GPU fp32, TPU one bf16 pass), high (TF32, 3 "
                   "bf16 passes), highest (full fp32: 6 bf16 passes on TPUs)")
    p.add_argument("--fp32-conv", choices=("default", "high", "highest"), default="default",
                   help="fp32 convolution precision: default the library's (cuDNN on Ampere+: TF32, as PyTorch "
                   "leaves it; elsewhere the matmul level), high (TF32), highest (full fp32)")
    p.add_argument("--sparse", action="store_true", help="2:4 structured-sparse weights where supported")
    if price:
        p.add_argument("--price", action="append", metavar="TARGET=USD",
                       help="USD per device-hour, e.g. --price h100=2.5 (repeatable)")
    p.add_argument("--weights", metavar="DTYPE", help="retype float weights, e.g. fp8_e4m3, fp4, int8, bf16")
    p.add_argument("--activations", metavar="DTYPE", help="retype float activations, e.g. bf16, fp8_e4m3")
    p.add_argument("--expert-balance", metavar="SPREAD", help="MoE routed rows over experts: random (default: expected "
                   "experts read), balanced (the most), zipf:S (i-th share ~ 1/i^S) or hot:F (hottest takes F)")


@command("analyze")
def _analyze(args: argparse.Namespace, console: Console) -> int:
    from .cli_args import analyze_price
    from .costmodel.analyze import analyze
    from .render import print_report
    check_outputs(args, timed=bool(args.target))
    formats = formats_arg(args) if args.target else None
    graph = load_model(args, console)
    if formats is not None and not args.mode:   # --mode: on the graph it serves (a rebuild would drop them)
        graph = formats.apply(graph)
    forward, graph = graph, training_graph(graph, args)
    price = analyze_price(args.target, args.price)
    graph, dims, mode_notes = apply_mode(graph, args, parse_sets(args.set), formats)
    with rewarned() as warned:
        report = analyze(graph, args.target, strict=args.strict, price=price, **timing_kwargs(args), dims=dims)
    report.notes.extend(mode_notes)
    print_report(unwarned_notes(report, warned), console, top=None if args.all else args.top)
    write_outputs(args, console, report)
    print_training_memory(forward, args, parse_sets(args.set), console, report.timing)
    return _write_json(args, console, report.to_json())


@command("compare")
def _compare(args: argparse.Namespace, console: Console) -> int:
    from .costmodel.compare import compare
    from .render import print_comparison
    grid = parse_grid(args.set)
    check_outputs(args, timed=True, sweep=any(len(v) > 1 for v in grid.values()))
    formats = formats_arg(args)
    graph = load_model(args, console)
    graph = graph if args.mode else formats.apply(graph)   # --mode: on the graph it serves
    specs = target_specs(args.targets, args.target_file)
    if not specs:
        raise NarrowpipeError("--targets is empty")
    graph, fixed, mode_notes = apply_mode(graph, args, {}, formats)
    for note in mode_notes:
        console.print(note)
    grid = {**{k: [v] for k, v in fixed.items()}, **grid}
    options = {"strict": args.strict, "prices": parse_prices(args.price), **timing_kwargs(args)}
    if any(len(v) > 1 for v in grid.values()):
        from .costmodel.sweep import grid_points, sweep
        from .render.progress import progress
        from .render.sweep import print_sweep
        with progress(console, "sweeping", total=len(grid_points(grid))) as step:
            swept = sweep(graph, specs, grid, progress=step, **options)
        print_sweep(swept, console)
        return _write_json(args, console, swept.to_json())
    result = compare(graph, specs, dims={k: v[0] for k, v in grid.items()}, **options)
    print_comparison(result, console)
    write_outputs(args, console, result)
    return _write_json(args, console, result.to_json())


@command("targets")
def _targets(args: argparse.Namespace, console: Console) -> int:

    from .backends import RESOURCES
    if args.resources:
        console.print("resources for whatif --scale: " + ", ".join(RESOURCES))
        return 0
    if args.show:
        from .render.show_card import show_card
        console.print(show_card(args.show))
        return 0
    if args.checks:
        from .render.checks_table import checks_table
        console.print(checks_table())
        return 0
    from .render.catalog_table import catalog_table
    console.print(catalog_table())
    return 0


def _write_json(args: argparse.Namespace, console: Console, text: str) -> int:
    """Write ``--json``, creating missing folders: the analysis already ran, and losing it to a
    traceback over ``out/`` not existing yet helps nobody."""
    if getattr(args, "json", None):
        from .render.output_file import say_wrote, write_output
        write_output(args.json, text, "--json")
        say_wrote(console, args.json) if args.json != "-" else console.print("wrote the JSON to stdout")
    return 0


def _set_threads(threads: int | None) -> None:
    if threads:
        import torch
        torch.set_num_threads(threads)


def _need_torch(why: str) -> None:
    """A clear error with the install hint where a command runs torch and torch is not installed."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise NarrowpipeError(f"{why}: pip install 'narrowpipe[torch]'") from None


@command("calibrate")
def _calibrate(args: argparse.Namespace, console: Console) -> int:
    _need_torch("calibrate measures with torch")
    from .calibration import calibrate, check_measured_threads, measurements_path
    from .render.output_file import say_wrote
    from .render.progress import progress
    from .render.units import seconds, si
    if args.threads and args.from_measurements:
        check_measured_threads(args.from_measurements, args.threads)
    _set_threads(args.threads)
    fit: list[str] = []       # a kernel CSV's fit: its own summary (what it fitted, its error)
    with progress(console, "calibrating") as step:
        target = calibrate(args.out, device=args.device, quick=args.quick, base=args.base,
                           from_measurements=args.from_measurements, name=args.name, progress=step,
                           report=fit.append)
    raw = measurements_path(args.out)
    say_wrote(console, args.out, f" ({target.display_name})" + (f" and {raw}" if raw.exists() else ""))
    for line in fit:
        console.print(f"  {line}", markup=False)
    if not fit:
        console.print(f"  matmul plateau {target.matmul_efficiency:.0%} of peak, "
                      f"memory {si(target.memory_bandwidth, 'B/s')} best, dispatch {seconds(target.launch_overhead)}")
    if target.vendor == "host":
        # what each dtype's GEMMs reach at the plateau: fp16 may be two orders below bf16
        plateau = (f"{dt} {si(rate * target.matmul_efficiency, 'FLOP/s')}" for dt, rate in target.matrix_flops.items())
        console.print("  GEMM plateau " + ", ".join(plateau))
    return 0


@command("validate")
def _validate(args: argparse.Namespace, console: Console) -> int:

    _need_torch("validate runs the model with torch")
    from .backends import CpuTarget, get_target
    from .calibration.validate import summarize, validate_run
    from .calibration.validation_models import check_seq_option
    from .render.validation import validation_table
    target = get_target(args.target)
    check_seq_option(args.model, args.seq)
    # a target `calibrate` wrote runs with the threads it was measured with
    host_cores = target.cores if isinstance(target, CpuTarget) and target.vendor == "host" else None
    _set_threads(args.threads or host_cores)
    # with the drift probes: what they are off by tells a model error from a machine that changed
    run = validate_run([args.model], target, batches=args.batch or [1, 8], seq=args.seq or 128, tiny=args.tiny)
    console.print(validation_table(results := run.models, run.probes))
    cases = [r.end_to_end for r in results] + [c for r in results for c in r.by_op]
    return _write_json(args, console, dump_json({"format": "narrowpipe.validation", "version": 6,
                                                  "target": target.name, "results": [r.to_dict() for r in results],
                                                  "probes": [c.to_dict() for c in run.probes],
                                                  "summary": summarize(cases)}, indent=2, what="validation"))


@command("plan")
def _plan(args: argparse.Namespace, console: Console) -> int:
    from .render.plan import run_plan
    return run_plan(args, console)


@command("diagnose")
def _diagnose(args: argparse.Namespace, console: Console) -> int:
    from .render.diagnosis import run_diagnose
    return run_diagnose(args, console)


command("serve")(run_serve)
command("serve-sweep")(run_serve_sweep)


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
    # a document on stdout (--json -) keeps stdout for itself: what people read goes to stderr
    to_stdout = "-" in (getattr(args, f, None) for f in ("json", "trace", "html"))
    console = Console(quiet=args.quiet, stderr=to_stdout)
    if args.version:
        from . import __version__
        console.print(f"narrowpipe {__version__}")
        return 0
    if not args.command:     # a usage error, as argparse's own: help on stderr, exit 2
        parser.print_help(sys.stderr)
        return 2
    caught: list[warnings.WarningMessage] = []
    try:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", NarrowpipeWarning)   # the rest keep Python's filters
                start = time.perf_counter()
                status = _COMMANDS[args.command](args, console)
                say(args, f"{args.command}: {time.perf_counter() - start:.2f} s")
                return status
        finally:
            _show_warnings(caught)   # after the block: inside it, showwarning would record again
    except NarrowpipeError as exc:  # messages hold [brackets] (pip extras, paths): no markup
        if args.verbose:
            Console(stderr=True).print_exception()
        # soft_wrap: one line whatever the terminal's width, so a long path is never split
        Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:   # `narrowpipe ... | head`: the reader left; stop quietly
        sys.stdout = open(os.devnull, "w")   # noqa: SIM115 (the interpreter flushes stdout at exit)
        return 141


def _show_warnings(caught: list[warnings.WarningMessage]) -> None:
    """Ours (a dim above its exported range) go last on stderr in bold, where the eye lands after
    a long table; anything else goes through Python's usual display. Each is said once: a file read
    again by each step of a command (``--target-file``'s chip by the comparison, every point of a
    sweep) raised its warning each time."""
    err = Console(stderr=True, soft_wrap=True)
    said: set[tuple[type, str]] = set()
    for w in caught:
        if (w.category, str(w.message)) in said:
            continue
        said.add((w.category, str(w.message)))
        if issubclass(w.category, NarrowpipeWarning):
            err.print(f"[bold yellow]warning:[/] {escape(str(w.message))}", highlight=False)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)


if __name__ == "__main__":
    sys.exit(main())
