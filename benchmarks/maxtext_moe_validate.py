"""Mixtral 8x7B training on TPUs as MaxText's published runs ran it, planned under the dropless form
(runtime ``maxtext``: sorted rows through grouped GEMMs) and the capacity-factor form those runs used
(runtime ``maxtext-dropped``: GShard dispatch/combine einsums over ``[experts, capacity]`` buckets,
costmodel/planner/moe_capacity.py). Nothing is fitted: the capacity factor is the run config's.

Rows (published numbers):

* v6e-256, developed on: AI-Hypercomputer/tpu-recipes training/trillium/Mixtral-8x7B-MaxText
  (maxtext@e7292a3a, libtpu 20241028, ``--model_name=mixtral_8x7b_dropped``): log line "seconds: 8.409,
  TFLOP/s/device: 323.173, Tokens/s/device: 3896.752, total_weights: 8388608"; MaxText
  docs/reference/models/tiering.md: 35.23% MFU, 3,899 tok/s/device. Config
  (benchmarks/maxtext_trillium_model_configs.py@e7292a3a ``mixtral_8x7b_dropped``): per_device_batch_size
  8, ici_fsdp_parallelism -1, max_target_length 4096, remat_policy full, attention flash, megablox False,
  capacity_factor 1.25.
* v5p-128, held out: MaxText end_to_end/tpu/mixtral/Run_Mixtral.md (7534e5e21, 2024-07-04): 251.94
  TFLOP/s/chip, 54.89% MFU. Its run script (tpu-recipes training/v5p/Mixtral-8X7B-Maxtext/scripts/
  run_mixtral-8x7b.sh) is not in the stored sources: assumption: the v6e recipe's settings (batch 8 per
  chip, FSDP over every chip, full remat, capacity factor 1.25).
* v5p-256, held out: tiering.md v5p table: 52.56% MFU, 2,909 tok/s/device; same assumption.

Tokens per second per chip are compared; a published TFLOP/s is converted at MaxText's own count for
this model, ``323.173e12 x 8.409 / 32768 = 8.293e10`` FLOPs per token (the v6e log: 8 x 4096 tokens per
chip per step; maxtext_utils.calculate_tflops_training_per_device counts top-k experts, no capacity).

The step is planned with the run's parallelism fixed (tp1 pp1 fsdp=all, no accumulation) and assembled
whether or not narrowpipe's memory model fits it (MaxText ran it; ``fits`` says which).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import narrowpipe  # noqa: E402
from narrowpipe.costmodel.planner.assemble import assemble  # noqa: E402
from narrowpipe.costmodel.planner.planner import Planner  # noqa: E402
from narrowpipe.costmodel.planner.strategy import Parallel  # noqa: E402

from _common import RESULTS, env_header, environment, md_table, no_options, write_results  # noqa: E402

SEQ = 4096
FLOPS_PER_TOKEN = 323.173e12 * 8.409 / (8 * 4096)     # MaxText's count, from the v6e log line
RUNTIMES = ("maxtext", "maxtext-dropped")


@dataclass(frozen=True)
class Row:
    name: str
    target: str
    chips: int
    batch: int            # per chip
    tokens_per_chip: float
    mfu: float
    held_out: bool


ROWS = (
    Row("v6e-256", "tpu-v6e", 256, 8, 3896.752, 0.3523, False),
    Row("v5p-128", "tpu-v5p", 128, 8, 251.94e12 / FLOPS_PER_TOKEN, 0.5489, True),
    Row("v5p-256", "tpu-v5p", 256, 8, 2909.0, 0.5256, True),
)


def mixtral() -> narrowpipe.Graph:
    """Mixtral 8x7B (mistralai/Mixtral-8x7B-v0.1 config.json: 32 layers, hidden 4096, 32 heads, 8 KV
    heads, ffn 14336, 8 experts top-2, vocabulary 32000, untied)."""
    return narrowpipe.transformer(32, 4096, 32, 32000, ffn=14336, kv_heads=8, gated_mlp=True, experts=8, top_k=2,
                                  seq=SEQ, name="mixtral-8x7b")


def predict(model: narrowpipe.Graph, row: Row, runtime: str) -> narrowpipe.Plan:
    gb = row.batch * row.chips
    planner = Planner(model, row.target, row.chips, global_batch=gb, seq=SEQ, runtime=runtime)
    p = Parallel(tp=1, pp=1, dp=row.chips, zero=3, recompute="full", microbatch=row.batch, global_batch=gb)
    return assemble(planner, planner.evaluate(p))


def main() -> None:
    no_options(__doc__)
    env = environment()
    model = mixtral()
    t0 = time.perf_counter()
    out: list[dict[str, Any]] = []
    for row in ROWS:
        for rt in RUNTIMES:
            plan = predict(model, row, rt)
            tok = plan.tokens_per_s / row.chips
            out.append({"row": row.name, "runtime": rt, "held_out": row.held_out, "fits": plan.fits,
                        "published_tokens_per_chip": row.tokens_per_chip, "published_mfu": row.mfu,
                        "predicted_tokens_per_chip": tok, "error": tok / row.tokens_per_chip - 1,
                        "step_s": plan.step_time_s, "plan_mfu": plan.mfu,
                        "hw_tflops_per_device": plan.hw_tflops_per_device,
                        "breakdown": plan.breakdown})
    wall = time.perf_counter() - t0
    table = md_table(
        ["row", "runtime", "published tok/s/chip", "predicted tok/s/chip", "error", "step (s)",
         "MaxText-convention MFU pred / pub", "plan MFU", "fits"],
        [[r["row"] + (" (held out)" if r["held_out"] else ""), r["runtime"], f"{r['published_tokens_per_chip']:,.0f}",
          f"{r['predicted_tokens_per_chip']:,.0f}", f"{r['error']:+.1%}", f"{r['step_s']:.2f}",
          f"{r['predicted_tokens_per_chip'] / r['published_tokens_per_chip'] * r['published_mfu']:.1%} / "
          f"{r['published_mfu']:.2%}", f"{r['plan_mfu']:.1%}", "yes" if r["fits"] else "no"] for r in out],
        "ll")
    md = (f"# Mixtral 8x7B on TPUs: dropless vs capacity-factor MoE against MaxText's published runs\n\n"
          f"{env_header(env)}- command (from the repository root): `python benchmarks/maxtext_moe_validate.py`\n"
          f"- {len(out)} plans in {wall:.0f} s\n\n"
          f"{(__doc__ or '').strip()}\n\n{table}\n")
    write_results(RESULTS, "maxtext_moe_validate", md, {"environment": env, "rows": out, "wall_s": wall})


if __name__ == "__main__":
    main()
