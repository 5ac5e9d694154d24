"""Predictions against measurements on this machine's CPU (issues 5 and 12: calibration and validation).

    python benchmarks/cpu_validate.py                      # calibrate, then validate (several minutes)
    python benchmarks/cpu_validate.py --target benchmarks/results/host.toml   # reuse a calibration

1. ``narrowpipe calibrate`` on this machine (unless --target is given), with torch at one thread
   (--threads): one thread keeps the timings steady on a machine shared with other jobs.
2. Per-op sweep of held-out shapes (none measured by the calibration): matmul, convolution,
   elementwise; median absolute error per group (acceptance: <= 20%).
3. End-to-end eager forward passes of the validation architectures (``calibration/validation_models.py``:
   depthwise convnets, a ResNet, ViT and Swin, GPT-2, a GQA decoder, an encoder, an encoder-decoder;
   fp32, batch 1 and 8, text at seq 128), measured in interleaved rounds on the wall clock and the
   thread's CPU clock, predicted from the same modules' ``torch.export`` on the calibrated target
   with the eager per-op overhead; per-op-type breakdown from torch.profiler. Acceptance (issue 12):
   median |error| <= 10% and every model within 20%, judged on the CPU clock (at one thread).
   Each timed forward's minor page faults are counted against the fresh bytes the CPU model charges.
4. Writes benchmarks/results/cpu_validate.{json,md,png}, comparing with the previous release's file
   (--previous).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("KINETO_LOG_LEVEL", "5")

import torch  # noqa: E402

from narrowpipe.backends import CpuTarget, get_target  # noqa: E402
from narrowpipe.calibration import calibrate  # noqa: E402
from narrowpipe.calibration.validate import (  # noqa: E402
    VALIDATION_MODELS,
    Case,
    ModelValidation,
    op_sweep,
    summarize,
    validate_run,
)
from narrowpipe.calibration.validation_models import MODELS  # noqa: E402
from narrowpipe.costmodel.execution.cpu import cold_call_time  # noqa: E402
from narrowpipe.render.validation import plot_predicted_vs_measured  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, env_header, environment  # noqa: E402

PREVIOUS = RESULTS / "cpu_validate_2026-12-06_before.json"
MEDIAN_BAR, EACH_BAR, OPS_BAR = 0.10, 0.20, 0.20


def _judged(c: Case, clock: str) -> float:
    """The error the bars judge: against the thread-CPU clock when measured, else the wall clock."""
    return c.cpu_error if clock == "cpu" and c.cpu_error is not None else c.error


def _previous(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    models = {m["end_to_end"]["name"]: m["end_to_end"]["error"] for m in data.get("models", [])}
    return {"date": data.get("date", path.stem), "ops": data.get("summary", {}).get("ops", {}), "models": models}


def _markdown(env: dict[str, Any], target: CpuTarget, sweep: list[Case], models: list[ModelValidation],
              probes: list[Case], summary: dict[str, Any], clock: str, prev: dict[str, Any],
              acceptance: dict[str, bool], seconds: float) -> str:
    e2e = [m.end_to_end for m in models]
    judged = [abs(_judged(c, clock)) for c in e2e]
    per_op = (target.launch_overhead or 0.0) + (target.eager_op_overhead or 0.0)
    pd = prev.get("date", "previous")
    lines = [f"# CPU validation ({env['date'][:10]})", "", env_header(env).rstrip(), f"- run time: {seconds:.0f} s",
             "", f"Target: `{target.display_name}`: dispatch {target.launch_overhead * 1e6:.2f} us per op, "
             f"eager per-op overhead {(target.eager_op_overhead or 0) * 1e6:.2f} us per op, "
             f"{(target.eager_module_call_overhead or 0) * 1e6:.2f} us per nn.Module call, "
             f"{(target.eager_cold_call_overhead or 0) * 1e6:.2f} us more per kernel or module call whose state a "
             "large forward evicted (all measured by "
             "`calibrate`), matmul plateau {:.0%} of the derived peak; GEMMs by shape over a {} point (M, N, K) "
             "grid.".format(target.matmul_efficiency, len(target.matmul_grid)), "",
             f"Models were measured in {summary['rounds']} interleaved rounds (one repeat of each per round, "
             "rotated order, after 2 warm-up calls) with torch at one thread, on two clocks: wall time and the "
             "calling thread's CPU time (`time.thread_time()`), which does not count the time the thread "
             "waited for other processes on this shared 2-core machine. "
             f"The bars are judged on the **{'CPU' if clock == 'cpu' else 'wall'} clock** "
             f"(median spread over the models: wall {summary['wall_spread']:.1%}, CPU {summary['cpu_spread']:.1%}; "
             "spread = interquartile range / median).", "",
             "Drift probes, measured in the same rounds (shapes `calibrate` measured, so right after it their "
             "predictions match; their error is how far the machine drifted from its calibrated state, and is in "
             "every model error too): " + "; ".join(f"{c.name} {_judged(c, clock):+.1%}" for c in probes) + ".", "",
             f"| group | cases | median abs error | max abs error | previous median ({pd}) |",
             "|---|--:|--:|--:|--:|"]
    for group, v in summary["ops"].items():
        p = prev.get("ops", {}).get(group)
        lines.append(f"| {group} | {v['cases']} | {v['median_abs_error']:.1%} | {v['max_abs_error']:.1%} | "
                     + (f"{p['median_abs_error']:.1%}" if p else "-") + " |")
    lines.append(f"| end-to-end ({clock} clock) | {len(judged)} | {statistics.median(judged):.1%} | "
                 f"{max(judged):.1%} | {summary['previous_e2e_median']} |")
    lines += ["", "| model | kernels | module calls | measured (wall) | measured (CPU) | predicted | "
              f"of it per-op overhead | error vs wall | error vs CPU | previous error ({pd}, wall) |",
              "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for m in models:
        c = m.end_to_end
        p = prev.get("models", {}).get(c.name)
        over = (m.kernels or 0) * per_op + (m.module_calls or 0) * (target.eager_module_call_overhead or 0.0) \
            + ((m.kernels or 0) + (m.module_calls or 0)) * cold_call_time(target, m.footprint or 0.0)
        cpu = f"{c.cpu_s * 1e3:.1f} ms ±{(c.cpu_spread or 0) / 2:.0%}" if c.cpu_s else "-"
        lines.append(f"| {c.name} | {m.kernels} | {m.module_calls if m.module_calls is not None else '-'} | "
                     f"{c.measured_s * 1e3:.1f} ms ±{(c.spread or 0) / 2:.0%} | {cpu} | "
                     f"{c.predicted_s * 1e3:.1f} ms | {over / c.predicted_s:.0%} | {c.error:+.1%} | "
                     + (f"{c.cpu_error:+.1%}" if c.cpu_error is not None else "-") + " | "
                     + (f"{p:+.1%}" if p is not None else "-") + " |")
    if any(m.faulted_bytes is not None for m in models):
        lines += ["", "Fresh pages: MiB the timed forwards faulted in (minor page faults counted around each timed "
                  "forward, median) against the fresh bytes the CPU model charges (outputs and convolution copies "
                  "of >= 32 MiB, which glibc maps anew on every call). Faults beyond the charged bytes come from "
                  "glibc returning the top of its heap to the OS and growing it again (M_TRIM_THRESHOLD); fewer "
                  "come when a large buffer fits a hole the process's earlier frees left in the heap. Both depend "
                  "on the allocation history of the process and are not modeled.", "",
                  "| model | faulted per forward | charged as fresh |", "|---|--:|--:|"]
        for m in models:
            faulted = "-" if m.faulted_bytes is None else f"{m.faulted_bytes / 2**20:.1f} MiB"
            lines.append(f"| {m.end_to_end.name} | {faulted} | {(m.fresh_bytes or 0) / 2**20:.1f} MiB |")
    lines += ["", "Per op type (torch.profiler CPU time of the outermost aten calls vs the predicted time of the "
              "nodes lowered from them; the profiler's own overhead is in the measured side), top 6 per model:", "",
              "| model | op | measured | predicted | error |", "|---|---|--:|--:|--:|"]
    for m in models:
        for c in m.by_op[:6]:
            lines.append(f"| {m.end_to_end.name} | {c.group} | {c.measured_s * 1e3:.2f} ms | "
                         f"{c.predicted_s * 1e3:.2f} ms | {c.error:+.1%} |")
    lines += ["", "| op case | measured | predicted | error |", "|---|--:|--:|--:|"]
    for c in sweep:
        lines.append(f"| {c.group}: {c.name} | {c.measured_s * 1e6:.1f} us | {c.predicted_s * 1e6:.1f} us "
                     f"| {c.error:+.1%} |")
    verdict = {True: "PASS", False: "FAIL"}
    lines += ["", f"Acceptance: per-op median <= {OPS_BAR:.0%}: {verdict[acceptance['ops_median']]}; "
              f"end-to-end median <= {MEDIAN_BAR:.0%}: {verdict[acceptance['e2e_median']]}; every model within "
              f"{EACH_BAR:.0%}: {verdict[acceptance['e2e_each']]} ({clock} clock).", "",
              "![predicted vs measured](cpu_validate.png)"]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: steady timings)")
    ap.add_argument("--target", help="an existing calibrated target file (skip calibration)")
    ap.add_argument("--models", default=",".join(VALIDATION_MODELS), help=f"of: {', '.join(MODELS)}")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=7, help="interleaved measurement rounds")
    ap.add_argument("--no-sweep", action="store_true", help="skip the held-out per-op sweep")
    ap.add_argument("--no-profile", action="store_true", help="skip the per-op-type profile of each model")
    ap.add_argument("--previous", default=str(PREVIOUS), help="the previous release's results JSON")
    ap.add_argument("--out", default=str(RESULTS / "cpu_validate"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    target_path = args.target or str(Path(args.out).with_name("host.toml"))
    if not args.target:
        calibrate(target_path)
        print(f"calibrated in {time.perf_counter() - t0:.1f} s -> {target_path}", flush=True)
    target = get_target(target_path)
    assert isinstance(target, CpuTarget)
    sweep = [] if args.no_sweep else op_sweep(target)
    print(f"op sweep: {len(sweep)} cases at {time.perf_counter() - t0:.1f} s", flush=True)
    run = validate_run(args.models.split(","), target, batches=[int(x) for x in args.batches.split(",")],
                       seq=args.seq, rounds=args.rounds, profile=not args.no_profile,
                       progress=lambda label: print(f"  {label}", flush=True))
    models, probes = run.models, run.probes
    e2e = [m.end_to_end for m in models]
    for c in e2e + probes:
        cpu = f"cpu {c.cpu_s * 1e3:8.1f} ms ({c.cpu_error:+.1%})" if c.cpu_s and c.cpu_error is not None else ""
        print(f"{c.name:22s} wall {c.measured_s * 1e3:8.1f} ms ({c.error:+.1%})  {cpu}  "
              f"predicted {c.predicted_s * 1e3:8.1f} ms")
    clock = "cpu" if all(c.cpu_s for c in e2e) else "wall"
    judged = [abs(_judged(c, clock)) for c in e2e]
    prev = _previous(Path(args.previous))
    prev_errs = [abs(e) for e in prev.get("models", {}).values()]
    summary: dict[str, Any] = {
        "ops": summarize(sweep) if sweep else {}, "end_to_end": summarize(e2e), "clock": clock,
        "rounds": args.rounds, "median_abs_error": statistics.median(judged), "max_abs_error": max(judged),
        "wall_spread": statistics.median(c.spread or 0.0 for c in e2e),
        "cpu_spread": statistics.median(c.cpu_spread or 0.0 for c in e2e),
        "previous_e2e_median": f"{statistics.median(prev_errs):.1%}" if prev_errs else "-"}
    acceptance = {"ops_median": all(v["median_abs_error"] <= OPS_BAR for v in summary["ops"].values()),
                  "e2e_median": summary["median_abs_error"] <= MEDIAN_BAR,
                  "e2e_each": summary["max_abs_error"] <= EACH_BAR}
    env = environment()
    seconds = time.perf_counter() - t0
    out = Path(args.out)
    data = {"format": "narrowpipe.validation-run", "version": 2, "env": env, "date": env["date"][:10],
            "target": target.name, "cpu": target.display_name, "threads": args.threads, "seconds": seconds,
            "eager_op_overhead_s": target.eager_op_overhead, "launch_overhead_s": target.launch_overhead,
            "summary": summary, "acceptance": acceptance, "previous": prev,
            "op_sweep": [c.to_dict() for c in sweep], "probes": [c.to_dict() for c in probes],
            "models": [m.to_dict() for m in models]}
    out.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n")
    plotted = [Case(c.group, c.name, c.cpu_s or c.measured_s, c.predicted_s) if clock == "cpu" else c for c in e2e]
    plot_predicted_vs_measured(sweep + plotted, out.with_suffix(".png"),
                               f"narrowpipe on {target.display_name}; models: {clock} clock")
    md = _markdown(env, target, sweep, models, probes, summary, clock, prev, acceptance, seconds)
    out.with_suffix(".md").write_text(md)
    print("\n".join(md.splitlines()[-3:]))
    return 0 if all(acceptance.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
