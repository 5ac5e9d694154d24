"""Predictions against measurements on this machine's CPU (issue: calibration and validation).

    python benchmarks/cpu_validate.py                # calibrate, then validate (a few minutes)
    python benchmarks/cpu_validate.py --threads 2 --target host.toml   # reuse a calibration

1. ``narrowpipe calibrate`` on this machine (unless --target is given).
2. Per-op sweep of held-out shapes (none measured by the calibration): matmul, convolution,
   elementwise; median absolute error per group (acceptance: <= 20%).
3. End-to-end eager forward passes of GPT-2, BERT-base and ResNet-50 (fp32, batch 1 and 8, text at
   seq 128), with the per-op-type breakdown from torch.profiler (acceptance: <= 25% each).
4. Writes benchmarks/results/cpu_validate.{json,md} and the predicted-vs-measured plot PNG.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import date
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("KINETO_LOG_LEVEL", "5")

import torch  # noqa: E402

from narrowpipe.backends import get_target  # noqa: E402
from narrowpipe.calibration import calibrate  # noqa: E402
from narrowpipe.calibration.validate import VALIDATION_MODELS, op_sweep, summarize, validate_model  # noqa: E402
from narrowpipe.render.validation import plot_predicted_vs_measured  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--target", help="an existing calibrated target file (skip calibration)")
    ap.add_argument("--models", default=",".join(VALIDATION_MODELS))
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--out", default=str(RESULTS / "cpu_validate"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    target_path = args.target or str(Path(args.out).with_name("host.toml"))
    if not args.target:
        calibrate(target_path)
        print(f"calibrated in {time.perf_counter() - t0:.1f} s -> {target_path}")
    target = get_target(target_path)
    sweep = op_sweep(target)
    t1 = time.perf_counter()
    print(f"op sweep: {len(sweep)} cases in {t1 - t0:.1f} s")
    models = []
    for name in args.models.split(","):
        for b in (int(x) for x in args.batches.split(",")):
            models.append(validate_model(name, target, batch=b, seq=args.seq))
            e = models[-1].end_to_end
            print(f"{e.name:20s} measured {e.measured_s * 1e3:9.1f} ms  predicted {e.predicted_s * 1e3:9.1f} ms  "
                  f"error {e.error:+.1%}")
    e2e = [m.end_to_end for m in models]
    summary = {"ops": summarize(sweep), "end_to_end": summarize(e2e)}
    ok_ops = all(v["median_abs_error"] <= 0.20 for v in summary["ops"].values())
    ok_e2e = all(abs(c.error) <= 0.25 for c in e2e)
    meta = {"date": date.today().isoformat(), "machine": platform.processor() or platform.machine(),
            "cpu": target.display_name, "threads": args.threads, "torch": torch.__version__,
            "seconds": time.perf_counter() - t0, "command": " ".join(["python"] + sys.argv)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {"format": "narrowpipe.validation", "version": 1, **meta, "target": target.name,
            "summary": summary, "acceptance": {"ops_median_le_20pct": ok_ops, "e2e_le_25pct": ok_e2e},
            "op_sweep": [c.to_dict() for c in sweep], "models": [m.to_dict() for m in models]}
    out.with_suffix(".json").write_text(json.dumps(data, indent=2))
    png = plot_predicted_vs_measured(sweep + e2e, out.with_suffix(".png"),
                                     f"narrowpipe on {target.display_name}, {args.threads} thread(s)")
    lines = [f"# CPU validation ({meta['date']})", "", f"Machine: {meta['cpu']}, {args.threads} thread(s), "
             f"torch {meta['torch']}. Command: `{meta['command']}` ({meta['seconds']:.0f} s).", "",
             "| group | cases | median abs error | max abs error |", "|---|---|---|---|"]
    for group, v in {**summary["ops"], **{"end-to-end": summary["end_to_end"]["model"]}}.items():
        lines.append(f"| {group} | {v['cases']} | {v['median_abs_error']:.1%} | {v['max_abs_error']:.1%} |")
    lines += ["", "| model | measured | predicted | error |", "|---|---|---|---|"]
    for c in e2e:
        lines.append(f"| {c.name} | {c.measured_s * 1e3:.1f} ms | {c.predicted_s * 1e3:.1f} ms | {c.error:+.1%} |")
    lines += ["", "| op case | measured | predicted | error |", "|---|---|---|---|"]
    for c in sweep:
        lines.append(f"| {c.group}: {c.name} | {c.measured_s * 1e6:.1f} us | {c.predicted_s * 1e6:.1f} us "
                     f"| {c.error:+.1%} |")
    lines += ["", f"Acceptance: per-op median <= 20%: {'PASS' if ok_ops else 'FAIL'}; "
              f"end-to-end <= 25%: {'PASS' if ok_e2e else 'FAIL'}", "", f"![predicted vs measured]({png.name})"]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-3:]))
    return 0 if ok_ops and ok_e2e else 1


if __name__ == "__main__":
    sys.exit(main())
