"""The serving commands: ``serve`` (a capacity plan under a latency target, or one deployment's
figures) and ``serve-sweep`` (decode over batch x context), and ``--mode``/``--context`` for
``analyze`` and ``compare``.

    narrowpipe serve llama-3-8b --target h100 --rate 1000 --input 2048 --output 256 --tpot 30ms
    narrowpipe serve llama-3-8b --target h100 --mode generate --batch 8 --input 2048 --output 256 --tp 2
    narrowpipe serve-sweep llama-3-8b --target h100 --batches 1,8,64,256 --context 4096
    narrowpipe compare llama-3-8b --targets h100,tpu-v6e --mode decode --context 8192 --set batch=64

Kept beside ``cli.py`` (which registers these in a few lines) so the command line stays one file
per concern.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from rich.console import Console

from .cli_args import formats_arg, parse_prices, parse_sets
from .cli_feedback import load_model
from .durations import parse_duration
from .errors import NarrowpipeError
from .ir.dim_spec import by_ir_name
from .jsonout import dumps as dump_json
from .render.output_file import say_wrote

__all__ = ["register_serve", "run_serve", "run_serve_sweep", "add_mode_args", "apply_mode", "load_step",
           "parse_duration", "NO_LAYOUT_EXIT"]

#: ``serve --tpot``'s exit status when no layout meets the targets (the plan is still printed and
#: written): a script can tell "no answer" from an answer (0) and from bad input (2).
NO_LAYOUT_EXIT = 1


def _ints(text: str, flag: str, least: int = 0) -> list[int]:
    """A comma list of distinct integers of at least ``least`` (an empty item or a repeat is a typo)."""
    parts = [v.strip() for v in text.split(",")]
    while parts and not parts[-1]:
        parts.pop()
    try:
        values = [int(v) for v in parts]
    except ValueError:
        raise NarrowpipeError(f"{flag} expects integers separated by commas, got {text!r}") from None
    if not values or min(values) < least:
        raise NarrowpipeError(f"{flag} expects integers of at least {least}, got {text!r}")
    if len(set(values)) < len(values):
        raise NarrowpipeError(f"{flag} lists a value twice: {text!r}")
    return values


def _formats(p: argparse.ArgumentParser) -> None:
    p.add_argument("--weights", metavar="DTYPE", help="weight format, e.g. fp8_e4m3, int8, int4, fp4 (weight-only)")
    p.add_argument("--activations", metavar="DTYPE", help="activation format, e.g. fp8_e4m3")
    p.add_argument("--kv", metavar="DTYPE", help="KV cache format, e.g. fp8_e4m3")
    p.add_argument("--gemm-inputs", metavar="DTYPE", help="format GEMMs read activations in, the rest staying "
                   "in --activations (FP8 as TensorRT-LLM/vLLM run it: --weights fp8_e4m3 --gemm-inputs fp8_e4m3)")
    p.add_argument("--system", help="a system file whose links price the collectives (e.g. dgx-h100)")
    p.add_argument("--price", action="append", metavar="TARGET=USD", help="USD per device-hour")
    p.add_argument("--json", metavar="FILE", help="write the result as JSON (- for stdout)")
    p.add_argument("--mla-decode", choices=("absorbed", "as-built"), default="absorbed",
                   help="latent attention (DeepSeek MLA): time decode absorbed, as vLLM/SGLang run it (default), "
                   "or as built (decompressed, transformers' form); prefill stays as built")


def register_serve(sub: Any) -> None:
    """Add ``serve`` and ``serve-sweep`` to the CLI's subparsers."""
    p = sub.add_parser("serve", help="LLM serving: devices, layout and batch for a request rate under a "
                                     "latency target, or one deployment's TTFT/TPOT/throughput")
    p.add_argument("model", help="a causal LM: .onnx/.pt2/.json file, config.json or bundled example")
    p.add_argument("--target", required=True, help="target(s), comma-separated")
    p.add_argument("--rate", type=float, help="requests per second to serve, with --tpot (default 1)")
    p.add_argument("--input", "--input-len", dest="input", type=int, default=2048, help="prompt tokens (2048)")
    p.add_argument("--output", "--output-len", dest="output", type=int, default=256, help="output tokens (256)")
    p.add_argument("--tpot", help="time-per-output-token target, e.g. 30ms: plan the capacity")
    p.add_argument("--tpot-ms", type=float, help="the same target in milliseconds")
    p.add_argument("--ttft", help="time-to-first-token target, e.g. 500ms")
    p.add_argument("--devices", type=int, help="largest tensor- (or expert-) parallel group to consider per replica "
                   "(with --tpot)")
    p.add_argument("--pp", default="1", help="pipeline depths to consider (plan) or use (point), e.g. 1,2")
    p.add_argument("--mode", choices=("prefill", "decode", "generate"),
                   help="without --tpot: one deployment in this mode (default generate)")
    p.add_argument("--batch", type=int, help="sequences per step (without --tpot; default 1)")
    p.add_argument("--context", type=int, help="KV cache length for --mode decode (default --input)")
    p.add_argument("--tp", type=int, help="tensor-parallel devices (without --tpot; default 1)")
    p.add_argument("--ep", type=int, help="expert-parallel devices of a mixture of experts, vLLM's "
                   "--enable-expert-parallel: ep = tp x data-parallel ranks (without --tpot; default 1: none)")
    p.add_argument("--emit", choices=("vllm",), help="print the deployment as vLLM engine arguments (with --tpot: "
                   "the best-throughput layout at its batch)")
    p.add_argument("--emit-out", metavar="FILE", help="write --emit to FILE instead of stdout (.json: as JSON)")
    _formats(p)
    p = sub.add_parser("serve-sweep", help="decode over batch x context: TPOT, tokens/s, fit, crossover batch")
    p.add_argument("model", help="a causal LM (see serve)")
    p.add_argument("--target", required=True, help="target(s), comma-separated")
    p.add_argument("--batches", default="1,8,64,256", help="batch sizes, e.g. 1,8,64,256")
    p.add_argument("--context", default="4096", help="KV cache length(s), e.g. 4096,8192")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel devices")
    p.add_argument("--pp", type=int, default=1, help="pipeline stages")
    p.add_argument("--ep", type=int, default=1, help="expert-parallel devices (ep = tp x data-parallel ranks)")
    _formats(p)


def add_mode_args(p: argparse.ArgumentParser) -> None:
    """``--mode`` and ``--context`` for analyze and compare."""
    p.add_argument("--mode", choices=("prefill", "decode"), help="time a serving step: prefill of --context "
                   "tokens, or one decode step with a KV cache of --context tokens")
    p.add_argument("--context", type=int, help="prompt or KV cache length for --mode (2048)")


def load_step(args: argparse.Namespace, console: Console) -> tuple[Any, dict[str, Any], list[str]]:
    """The model argument loaded as the step ``--mode`` asks for, with ``--set``'s dims and the
    formats applied where they belong (:func:`apply_mode`): what whatif and roofline time."""
    formats = formats_arg(args)
    graph = load_model(args, console)
    graph = graph if args.mode else formats.apply(graph)   # --mode: on the graph it serves
    return apply_mode(graph, args, parse_sets(args.set), formats)


def apply_mode(graph: Any, args: argparse.Namespace, dims: dict[str, Any],
               formats: Any = None) -> tuple[Any, dict[str, Any], list[str]]:
    """The graph, dims and notes of the serving step ``--mode`` asks for (unchanged, no notes, without
    it). The notes say how the serving graph differs from the one given (a prefill's head on each
    sequence's last token counts fewer FLOPs than the export's forward), so a report says why.
    ``formats`` (``--weights``/``--activations``) go to the graph serving builds: a cache-less graph
    is rebuilt from its architecture, and formats applied before that rebuild were silently lost (without
    ``--mode`` the caller applies them itself)."""
    mode = getattr(args, "mode", None)
    context = getattr(args, "context", None)
    if not mode:
        if context is not None:
            raise NarrowpipeError("--context is the prompt or KV cache length of a serving step: give --mode "
                                  "prefill or --mode decode with it (or --set seq=N for a plain forward)")
        return graph, dims, []
    from .costmodel.serving import serving_graph
    context = 2048 if context is None else context
    if context < 1 and mode == "prefill":
        raise NarrowpipeError(f"--context must be at least 1 token for --mode prefill, got {context}")
    if context < 0:
        raise NarrowpipeError(f"--context must not be negative, got {context}")
    sg = serving_graph(graph, formats)
    dims = by_ir_name(graph.dims, dims)   # --set batch-size=4 names the ONNX file's dim batch_size
    given = next((dims[n] for n in sg.batch_dims if n in dims), None)
    batch = 1 if given is None else int(given)      # 0 is a batch given, not one left out
    if batch < 1:
        raise NarrowpipeError(f"--set batch={given}: a serving step's batch must be at least 1")
    tokens, past = (1, context) if mode == "decode" else (context, 0)
    sg.check_context(tokens + past)       # what serve refuses, analyze and compare refuse too
    out = {k: v for k, v in dims.items() if k in sg.graph.dims}
    for k, v in sg.bindings(int(batch), tokens, past).items():
        if k in dims and int(dims[k]) != v:
            raise NarrowpipeError(f"--set {k}={dims[k]} disagrees with --mode {mode} --context {context}, "
                                  f"which binds {k}={v}")
        out[k] = v
    notes = [f"--mode {mode}: {n}" for n in sg.notes]
    spec = sg.spec
    if mode == "decode" and spec is not None and spec.is_mla and not spec.mla_absorb:
        notes.append("--mode decode: latent attention (MLA) timed decompressed, as built (kv_b_proj expands the "
                     "whole cache every step); serving engines decode absorbed, which `narrowpipe serve` times")
    return sg.graph, out, notes


def _prices(args: argparse.Namespace, targets: list[str]) -> dict[str, float]:
    """``--price`` by the canonical name of each served target's chip (a system file's chip too); a
    price for a chip not served prices nothing and is warned about, as compare and analyze do (a
    plan over several targets dropped every price, taking the catalog's)."""
    if not args.price:
        return {}
    import warnings

    from .backends.registry import chip_and_system
    from .costmodel.prices import prices_by_target
    from .errors import NarrowpipeWarning
    chips = [chip_and_system(t)[0] for t in targets]
    priced = prices_by_target(parse_prices(args.price), chips)
    unused = sorted(set(priced) - {c.name for c in chips})
    if unused:
        warnings.warn(f"--price for {', '.join(unused)}: not among the served targets, so it prices nothing",
                      NarrowpipeWarning, stacklevel=2)
    return priced


def run_serve(args: argparse.Namespace, console: Console) -> int:
    from .cli import _write_json, resolve_model
    from .costmodel.serving import serve
    from .costmodel.serving.capacity import plan_capacity
    from .render.serving import print_capacity, print_serving
    graph = resolve_model(args.model)
    targets = [t.strip() for t in args.target.split(",") if t.strip()]
    if not targets:
        raise NarrowpipeError("--target is empty")
    tpot = parse_duration(args.tpot, "--tpot") if args.tpot else \
        (args.tpot_ms / 1e3 if args.tpot_ms is not None else None)
    pps = _ints(args.pp, "--pp", least=1)
    _check_flags(args, tpot is not None, pps)
    kw = dict(weights=args.weights, activations=args.activations, kv=args.kv, system=args.system,
              gemm_inputs=args.gemm_inputs, mla_decode=args.mla_decode)
    if tpot is not None:
        plan = plan_capacity(graph, targets, rate=1.0 if args.rate is None else args.rate, input_len=args.input,
                             output_len=args.output, tpot=tpot, ttft=parse_duration(args.ttft, "--ttft"),
                             max_tp=args.devices, pps=pps, price=_prices(args, targets), **kw)
        print_capacity(plan, console)
        _emit(args, console, graph, plan)
        written = _write_json(args, console, plan.to_json())
        return written if plan.best_throughput is not None else NO_LAYOUT_EXIT
    if len(targets) > 1:
        raise NarrowpipeError("one --target without --tpot (a point question is about one deployment)")
    mode = args.mode or "generate"
    from .backends.registry import chip_and_system
    price = _prices(args, targets).get(chip_and_system(targets[0])[0].name)
    input_len, output_len, context = _lengths(args, mode)
    # `is None`, not `or`: a 0 given is refused by serve (``args.batch or 1`` ran --batch 0 as 1, exit 0)
    r = serve(graph, targets[0], mode=mode, batch=1 if args.batch is None else args.batch, context=context,
              input_len=input_len, output_len=output_len, tp=1 if args.tp is None else args.tp, pp=pps[0],
              ep=1 if args.ep is None else args.ep, price=price, **kw)
    print_serving(r, console)
    _emit(args, console, graph, r)
    return _write_json(args, console, r.to_json())


def _lengths(args: argparse.Namespace, mode: str) -> tuple[int | None, int | None, int | None]:
    """``(input_len, output_len, context)`` as ``mode`` reads them: a decode step reads only the KV
    cache's length (``--context``, else ``--input``), a prefill only the prompt. Passing the other
    defaults (2048 in, 256 out) wrote them into a decode step's JSON, where the API and serve-sweep
    write null."""
    if mode == "decode":
        return None, None, args.context if args.context is not None else args.input
    return args.input, args.output if mode == "generate" else None, args.context


def _check_flags(args: argparse.Namespace, plan: bool, pps: list[int]) -> None:
    """Refuse a flag the question asked would ignore: a capacity plan (``--tpot``) searches the layout
    and the batch itself, a point question (no ``--tpot``) has no rate or latency target to meet, and
    only a decode step reads ``--context``; silently dropping any of them answers another question."""
    given = [flag for flag, value in (("--tp", args.tp), ("--ep", args.ep), ("--batch", args.batch),
                                      ("--mode", args.mode), ("--context", args.context)) if value is not None]
    if plan and given:
        raise NarrowpipeError(f"{', '.join(given)}: a capacity plan (--tpot) searches the layout and batch itself "
                              "(cap tensor parallelism with --devices, pipelines with --pp); drop --tpot to ask "
                              "about one deployment")
    if not plan:
        targets = [flag for flag, value in (("--ttft", args.ttft), ("--rate", args.rate),
                                            ("--devices", args.devices)) if value is not None]
        if targets:
            verb = "belongs" if len(targets) == 1 else "belong"
            raise NarrowpipeError(f"{', '.join(targets)} {verb} to a capacity plan: give --tpot as well (without it, "
                                  "serve prints one deployment's TTFT and TPOT; --tp sets its devices)")
        if len(pps) > 1:
            raise NarrowpipeError(f"--pp {args.pp}: one pipeline depth for one deployment (a list is for --tpot)")
        mode = args.mode or "generate"
        if args.context is not None and mode != "decode":
            raise NarrowpipeError(f"--context is the KV cache length of --mode decode; --mode {mode} takes its "
                                  "lengths from --input and --output")
    if args.rate is not None and not (args.rate > 0 and math.isfinite(args.rate)):
        raise NarrowpipeError(f"--rate must be a positive finite number of requests per second, got {args.rate:g}")
    if args.devices is not None and args.devices < 1:
        raise NarrowpipeError(f"--devices must be at least 1, got {args.devices}")


def _emit(args: argparse.Namespace, console: Console, graph: Any, result: Any) -> None:
    """``--emit vllm``: the deployment as vLLM engine arguments (:mod:`narrowpipe.render.emit_vllm`)."""
    if not getattr(args, "emit", None):
        if getattr(args, "emit_out", None):
            raise NarrowpipeError("--emit-out needs --emit vllm")
        return
    import sys

    from .costmodel.serving import Formats, ServingReport
    from .render.emit import write_launch
    from .render.emit_vllm import vllm_from_capacity, vllm_from_report
    params = [w for w in graph.weights if w.kind.value == "param"]
    own = params[0].dtype.value if params else "fp32"
    from .backends.registry import chip_and_system
    chips = {c.name: c for c in (chip_and_system(t.strip())[0] for t in args.target.split(",") if t.strip())}
    if isinstance(result, ServingReport):
        launch = vllm_from_report(result, args.model, own, chips.get(result.target))
    else:
        formats = Formats.of(args.weights, args.activations, args.kv, args.gemm_inputs).to_dict()
        launch = vllm_from_capacity(result, args.model, own, formats, chips)
    written = write_launch(launch, args.emit_out)
    if written:
        say_wrote(console, written, " (vllm settings)")
    else:
        sys.stdout.write(launch.text())


def run_serve_sweep(args: argparse.Namespace, console: Console) -> int:
    from .cli import _write_json, resolve_model
    from .costmodel.serving import Formats, crossover, replica_for, serve, serving_graph
    from .render.serving import print_serving_sweep
    graph = resolve_model(args.model)
    batches, contexts = _ints(args.batches, "--batches", least=1), _ints(args.context, "--context")
    out = []
    targets = [t.strip() for t in args.target.split(",") if t.strip()]
    if not targets:
        raise NarrowpipeError("--target is empty")
    # the model prepared once and every context checked against its positions before any step is timed
    # (a context past them failed after 20-35 s of crossovers on 70B)
    sg = serving_graph(graph, Formats.of(args.weights, args.activations, args.kv, args.gemm_inputs))
    for ctx in contexts:
        sg.check_context(ctx + 1)               # a decode step on ``ctx`` tokens holds ctx + 1
    # every target's deployment first, as compare loads every chip first: an unknown name is an error
    # before any table is printed or the --json file is skipped (h100,nope printed h100's table, then failed)
    replicas = [(target, replica_for(sg, target, tp=args.tp, pp=args.pp, ep=args.ep, weights=args.weights,
                                     activations=args.activations, kv=args.kv, system=args.system,
                                     gemm_inputs=args.gemm_inputs, mla_decode=args.mla_decode))
                for target in targets]
    prices = _prices(args, targets)
    for _target, replica in replicas:
        reports = []
        for ctx in contexts:
            cross = None if replica.dataflow else crossover(replica, ctx)
            for i, b in enumerate(batches):
                r = serve(replica, mode="decode", batch=b, context=ctx, with_crossover=False,
                          price=prices.get(replica.target.name))
                r.crossover = cross if i == 0 else None
                reports.append(r)
        print_serving_sweep(reports, console)
        out.extend(reports)
    return _write_json(args, console, dump_json({"format": "narrowpipe.serving_sweep", "version": 1,
                                                 "points": [r.to_dict() for r in out]}, 2, "serving sweep"))
