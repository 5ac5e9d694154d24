"""GEMM shapes no calibration measured, predicted with and without the measured (M, N, K) grid.

    python benchmarks/cpu_gemm_heldout.py                          # measure the grid, then the shapes
    python benchmarks/cpu_gemm_heldout.py --measurements benchmarks/results/host.measurements.json

The "before" target is ``calibrate``'s fit of the measurements without their GEMM grid (square-GEMM
curve by FLOPs times the N = K = 2048 skinny curve); "after" is the same fit with it. Both predict
the same held-out fp32 GEMMs, measured with cold weights as ``calibrate`` measures (torch at one
thread): the validation's held-out GEMMs and layer shapes of the validation models, none of them a
grid point. Writes benchmarks/results/cpu_gemm_heldout.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from narrowpipe.calibration.calibrate import load_measurements  # noqa: E402
from narrowpipe.calibration.fit import host_target  # noqa: E402
from narrowpipe.calibration.gemm_grid_sweep import GRID_M, GRID_N, GRID_NK  # noqa: E402
from narrowpipe.calibration.host import describe_cpu  # noqa: E402
from narrowpipe.calibration.validate import _measure_cold, _predict  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, env_header, environment  # noqa: E402

#: (M, N, K): the validation's held-out GEMMs, then model layers (GPT-2/BERT/ViT at batch 1, Swin
#: and ConvNeXt stages, MobileNet's classifier, decode GEMMs of other widths; vocabulary projections:
#: GPT-2's LM head at 128 tokens, T5-small's at decode batch 4, SmolLM2's at 8 x 128 tokens).
HELD_OUT = ((100, 100, 100), (300, 500, 700), (1000, 200, 1000), (777, 777, 777), (1, 4096, 1024),
            (4, 1024, 4096), (64, 3072, 768), (512, 768, 3072), (1536, 1024, 256),
            (128, 2304, 768), (197, 768, 768), (197, 3072, 768), (197, 768, 3072), (96, 768, 3072),
            (49, 1536, 384), (196, 384, 1536), (784, 192, 768), (3136, 384, 96), (1, 1000, 1280),
            (2, 1536, 576), (32, 512, 512), (256, 1536, 576), (1024, 2304, 768), (640, 1280, 320),
            (128, 50257, 768), (4, 32128, 512), (1024, 49152, 576))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measurements", help="a calibrate measurements JSON (default: measure here)")
    ap.add_argument("--out", default=str(RESULTS / "cpu_gemm_heldout"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.measurements:
        ms = load_measurements(args.measurements)
    else:
        from narrowpipe.calibration.run import run_all
        ms = run_all("cpu", quick=False)       # calibrate's sweeps, the GEMM grid among them
    grid = {(m, n, k) for m in GRID_M for n in GRID_N for k in GRID_NK}
    assert not grid & set(HELD_OUT), "a held-out shape is a grid point"
    host = describe_cpu(1)
    before = host_target(host, [m for m in ms if m.kind != "gemm_grid"], "before")
    after = host_target(host, ms, "after")
    assert after.matmul_grid, "the measurements hold no full GEMM grid"
    rows = []
    for m, n, k in HELD_OUT:
        def make(m: int = m, n: int = n, k: int = k):  # noqa: ANN202
            return torch.matmul, (torch.randn(m, k), torch.randn(k, n))

        class MM(torch.nn.Module):
            def forward(self, a, b):  # noqa: ANN001, ANN201
                return a @ b
        mod, inputs = MM(), make()[1]
        measured = _measure_cold("matmul", lambda mod=mod, inputs=inputs: (mod, inputs))
        pb, pa = _predict(mod, inputs, before), _predict(mod, inputs, after)
        rows.append({"shape": [m, n, k], "measured_s": measured, "before_s": pb, "after_s": pa,
                     "before_error": pb / measured - 1, "after_error": pa / measured - 1})
        print(f"{m}x{n}x{k}: measured {measured * 1e6:.1f} us, before {pb / measured - 1:+.1%}, "
              f"after {pa / measured - 1:+.1%}", flush=True)
    med_b = statistics.median(abs(r["before_error"]) for r in rows)
    med_a = statistics.median(abs(r["after_error"]) for r in rows)
    env = environment()
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps({"env": env, "grid_m": GRID_M, "grid_n": GRID_N, "grid_k": GRID_NK,
                                                    "rows": rows,
                                                    "median_abs_before": med_b, "median_abs_after": med_a},
                                                   indent=2) + "\n")
    lines = [f"# Held-out GEMM shapes on the CPU ({env['date'][:10]})", "", env_header(env).rstrip(), "",
             f"Grid `calibrate` measures: M in {GRID_M}, N in {GRID_N}, K in {GRID_NK} (fp32, weights cold). "
             "Before: square-GEMM curve x skinny curve (N = K = 2048). After: trilinear in log M, N, K over the "
             "grid (and, for unaligned output rows, the measured `matmul_unaligned_curve`).",
             "", f"Median |error|: before {med_b:.1%}, after {med_a:.1%}; max before "
             f"{max(abs(r['before_error']) for r in rows):.1%}, after {max(abs(r['after_error']) for r in rows):.1%}.",
             "", "| M x N x K | measured | before | after |", "|---|--:|--:|--:|"]
    for r in rows:
        lines.append(f"| {'x'.join(map(str, r['shape']))} | {r['measured_s'] * 1e6:.1f} us | "
                     f"{r['before_error']:+.1%} | {r['after_error']:+.1%} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(lines[6])
    return 0


if __name__ == "__main__":
    sys.exit(main())
