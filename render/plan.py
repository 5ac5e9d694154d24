"""``narrowpipe plan``: a training plan for people: the strategy and placement, where the step time
goes (compute, recomputation, exposed communication, bubble), memory per device by term, the
collectives, and why each runner-up lost. Reads only the :class:`~narrowpipe.Plan` result."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..backends import Target
from ..backends.kernel_checks import checks_line
from ..cli_args import count_arg
from ..costmodel.planner.plan import Plan
from ..costmodel.planner.strategy import RECOMPUTE, parse_switch
from ..errors import NarrowpipeError, PlanError
from .emit import SERVING_TOOLS, TRAINING_TOOLS, Launch, check_tool_runtime, check_tool_target, write_launch
from .output_file import say_wrote, write_output
from .units import nbytes, seconds

__all__ = ["register_plan", "run_plan", "print_plan", "launch_for"]

_FIX_FIELDS = ("tp", "pp", "dp", "cp", "ep", "microbatch", "interleave", "zero")
_LABELS = {"compute": "compute", "recompute": "recomputation", "tp_comm": "tensor-parallel comm (exposed)",
           "cp_comm": "context-parallel comm (exposed)", "ep_comm": "expert all-to-all (exposed)",
           "p2p": "pipeline sends", "param_gather": "ZeRO-3 parameter gathers (exposed)",
           "bubble": "pipeline bubble", "dp_comm": "data-parallel reduction (exposed)",
           "tied_grad": "tied-embedding gradient all-reduce (exposed)", "optimizer": "optimizer step"}


def _labels(zero: int) -> dict[str, str]:
    """The step terms' names; under ZeRO 1-2 the parameter gather is the distributed optimizer's
    all-gather of the updated shards, once per step, not ZeRO-3's gather before each layer."""
    if zero >= 3:
        return _LABELS
    return {**_LABELS, "param_gather": f"ZeRO-{zero} parameter all-gather after the optimizer (exposed)"}


def register_plan(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("plan", help="shard a model over N devices for training: strategy, step time, memory")
    p.add_argument("model", help="a .onnx/.pt2/.json file, a config.json, or a bundled example")
    p.add_argument("--devices", type=int, required=True, help="number of devices (GPUs, TPU chips)")
    p.add_argument("--target", required=True, help="a system (dgx-h100, tpu-v5e-256) or a chip (a100, h100)")
    p.add_argument("--system", help="the system the chips sit in (default: the target's catalog system)")
    p.add_argument("--mode", default="train", choices=("train",), help="what to plan (default train)")
    p.add_argument("--global-batch", type=int, required=True, help="sequences per optimizer step")
    p.add_argument("--seq", type=int, help="tokens per sequence (default: the model's)")
    p.add_argument("--dtype", help="retype weights and activations (default: the model's): bf16, fp16 or fp32; "
                   "fp8 (fp8_e4m3, fp8_e5m2): Transformer Engine's FP8 GEMMs on bf16 weights and activations")
    p.add_argument("--runtime", default=None,
                   help="megatron-core (the default), maxtext (JAX/XLA; the default on Google TPUs) or "
                        "megatron-lm-2021")
    for name in _FIX_FIELDS:
        p.add_argument(f"--{name.replace('_', '-')}", type=int, help=f"fix {name} (otherwise searched)")
    p.add_argument("--recompute", choices=RECOMPUTE, help="fix activation recomputation (dots: maxtext only)")
    p.add_argument("--sequence-parallel", choices=("on", "off"), help="fix sequence parallelism")
    p.add_argument("--fix", metavar="K=V,...", help="fix several at once, e.g. --fix tp=8,pp=4,recompute=full")
    p.add_argument("--expert-balance", metavar="SPREAD", help="MoE routed rows over experts: random (default), "
                   "balanced, zipf:S or hot:F; under expert parallelism the busiest device sets the step")
    p.add_argument("--top", type=count_arg, default=5, help="runners-up to list (default 5)")
    p.add_argument("--json", metavar="FILE", help="write the plan as JSON (- for stdout)")
    p.add_argument("--trace", metavar="FILE.json", help="write the step as a Chrome trace (ui.perfetto.dev): a "
                   "process per pipeline stage, a slice per forward/backward pass, the bubble and exposed comm")
    p.add_argument("--emit", choices=(*TRAINING_TOOLS, *SERVING_TOOLS),
                   help="print the plan as launch settings: megatron (pretrain_gpt.py arguments), torch (DeviceMesh, "
                        "FSDP2, tensor-parallel plan), jax (mesh and PartitionSpecs); vllm comes from `serve`")
    p.add_argument("--emit-out", metavar="FILE", help="write --emit to FILE instead of stdout (.json: as JSON)")
    return p


def fixed_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The strategy fields the command line fixes (``--tp 8`` and ``--fix tp=8`` alike)."""
    out: dict[str, Any] = {}
    for item in filter(None, (args.fix or "").split(",")):
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            raise PlanError(f"--fix: expected KEY=VALUE, got {item!r}")
        value = value.strip()
        if key == "sequence_parallel":
            out[key] = parse_switch("--fix sequence_parallel", value)
        elif key == "recompute":
            out[key] = value
        else:
            try:
                out[key] = int(value)
            except ValueError:
                raise PlanError(f"--fix: {key} must be an integer, got {value!r}") from None
    flags: dict[str, Any] = {name: getattr(args, name) for name in _FIX_FIELDS if getattr(args, name, None) is not None}
    if args.recompute:
        flags["recompute"] = args.recompute
    if args.sequence_parallel:
        flags["sequence_parallel"] = args.sequence_parallel == "on"
    clash = [f"--fix {k}={out[k]} and --{k.replace('_', '-')} {v}"
             for k, v in flags.items() if k in out and out[k] != v]
    if clash:
        raise PlanError("the command line fixes a field twice with different values: " + "; ".join(clash))
    return {**out, **flags}


def run_plan(args: argparse.Namespace, console: Console) -> int:
    from .. import plan as make_plan
    if args.emit in SERVING_TOOLS:
        raise PlanError(f"{args.emit} serves models: its settings come from a serving deployment, "
                        f"`narrowpipe serve MODEL --target ... --emit {args.emit}`, not from a training plan")
    if args.emit_out and not args.emit:
        raise PlanError("--emit-out needs --emit megatron|torch|jax")
    chip = None
    if args.emit:
        from ..costmodel.planner.machine import resolve_machine
        chip, _ = resolve_machine(args.target, args.system, args.devices)   # what the plan runs on, a file's chip too
        check_tool_target(args.emit, chip)                                  # before the search, not after it
        check_tool_runtime(args.emit, args.runtime)
    result = make_plan(args.model, args.target, args.devices, mode=args.mode, global_batch=args.global_batch,
                       seq=args.seq, parallel=fixed_fields(args), dtype=args.dtype, system=args.system,
                       runtime=args.runtime, top=args.top, expert_balance=args.expert_balance)
    launch = launch_for(result, args.emit, chip) if args.emit else None    # refused before the plan is printed
    print_plan(result, console)
    if args.json:
        write_output(args.json, result.to_json(), "--json")
        say_wrote(console, args.json)
    if args.trace:
        from .plan_trace import write_plan_trace
        _, tl = write_plan_trace(args.trace, result)
        how = "" if abs(tl.difference_s) <= 1e-9 * result.step_time_s else (
            f"; the step is the simulated schedule's {seconds(tl.total_s)}, the closed form's "
            f"{seconds(tl.closed_form_step_s)} ({-tl.difference_s / tl.total_s:+.2%})")
        say_wrote(console, args.trace, f" (open it in ui.perfetto.dev){how}")
    if launch is not None:
        written = write_launch(launch, args.emit_out)
        if written:
            say_wrote(console, written, f" ({args.emit} settings)")
        else:
            sys.stdout.write(launch.text())   # raw: no wrapping or markup in a command people paste
    return 0


def launch_for(plan: Plan, tool: str, chip: Target | None = None) -> Launch:
    """``tool``'s launch settings for a training plan; ``chip`` the plan's chip where its name is no
    catalog chip's (a user's file: ``my-gpu``, ``h100-sxm@my.toml``). Every tool writes a transformer's
    layers (sizes, per-layer sharding): a model the planner did not recognise as one is refused."""
    if tool in TRAINING_TOOLS and not plan.architecture:
        raise PlanError(f"--emit {tool}: launch settings describe a transformer (layers, hidden size, heads, the "
                        f"per-layer sharding); {plan.model} is not one narrowpipe recognises, so its plan has "
                        "no such settings to emit")
    if tool == "megatron":
        from .emit_megatron import megatron_launch
        return megatron_launch(plan, chip)
    if tool == "torch":
        from .emit_torch import torch_launch
        return torch_launch(plan, chip)
    if tool == "jax":
        from .emit_jax import jax_launch
        return jax_launch(plan, chip)
    raise PlanError(f"--emit {tool}: a training plan emits {', '.join(TRAINING_TOOLS)}")


def _peak(plan: Plan) -> str:
    """`` of 1979 TFLOP/s fp8_e4m3`` for an FP8 plan, whose MFU may be against either its FP8 or its bf16
    peak (the one that does most of the matmul FLOPs); nothing for the rest, whose peak is their dtype's."""
    if not plan.runtime.get("fp8") or plan.mfu <= 0:
        return ""
    peak = plan.tflops_per_device / plan.mfu
    try:
        from ..backends import get_target
        rates = get_target(plan.target).matrix_flops
    except NarrowpipeError:      # a user's chip file has no catalog name: the rate alone
        return f" of {peak:.0f} TFLOP/s"
    name = next((d for d in ("fp8_e4m3", plan.dtype) if d in rates and abs(rates[d] / 1e12 - peak) <= 1e-6 * peak), "")
    return f" of {peak:.0f} TFLOP/s {name}".rstrip()


def print_plan(plan: Plan, console: Console) -> None:
    p = plan.parallel
    console.print(f"[bold]{escape(plan.model)}[/] on {plan.devices} x {escape(plan.target)} "
                  f"({escape(plan.system)}), seq {plan.seq}, global batch {p.global_batch}, runtime "
                  f"{escape(str(plan.runtime.get('name', '')))}"
                  + (", FP8 GEMMs (Transformer Engine hybrid recipe; the rest bf16/fp32)"
                     if plan.runtime.get("fp8") else ""))
    console.print(f"[bold]plan:[/] {escape(p.describe())}  (schedule {p.schedule})")
    console.print(f"step {seconds(plan.step_time_s)}, {plan.tokens_per_s:,.0f} {plan.item_unit}/s, "
                  f"{plan.tflops_per_device:.0f} model TFLOP/s per device (MFU {plan.mfu:.1%}{_peak(plan)}), "
                  f"{plan.hw_tflops_per_device:.0f} with recomputation")
    t = Table(title="where the step goes", title_justify="left")
    t.add_column("term")
    t.add_column("time", justify="right")
    t.add_column("share", justify="right")
    labels = _labels(p.zero)
    for key, value in plan.breakdown.items():
        if value > 0:
            t.add_row(labels.get(key, key), seconds(value), f"{value / plan.step_time_s:.1%}")
    for key, value in plan.hidden_comm.items():
        t.add_row(f"[dim]hidden: {labels.get(key, key).replace(' (exposed)', '')}[/]", f"[dim]{seconds(value)}[/]", "")
    console.print(t)
    m = plan.memory_per_device
    terms = ", ".join(f"{k.replace('_', ' ')} {nbytes(v)}" for k, v in m.items()
                      if k not in ("total", "capacity", "device") and v > 0)
    console.print(f"memory on the fullest device (pipeline stage {int(m['device'])}): {nbytes(m['total'])} of "
                  f"{nbytes(m['capacity'])} ({terms})")
    if plan.collectives:
        c = Table(title="collectives per step (critical device)", title_justify="left")
        for col in ("purpose", "op", "group", "count", "time", "exposed"):
            c.add_column(col, justify="left" if col in ("purpose", "op") else "right")
        for row in plan.collectives[:8]:
            c.add_row(str(row["purpose"]), str(row["op"]), str(row["group_size"]), str(row["per_step"]),
                      seconds(float(row["seconds"])), seconds(float(row["exposed_s"])))
        console.print(c)
    if plan.runners_up:
        r = Table(title="runners-up and why they lost", title_justify="left")
        r.add_column("strategy")
        r.add_column("step", justify="right")
        r.add_column("why")
        for ru in plan.runners_up:
            r.add_row(escape(ru.parallel.describe()), seconds(ru.step_time_s), escape(ru.why))
        console.print(r)
    for note in plan.notes:
        console.print(f"[dim]- {escape(note)}[/]")
    console.print(f"[dim]{escape(checks_line([plan.target]))}[/]")
