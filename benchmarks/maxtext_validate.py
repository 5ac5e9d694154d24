"""Training-step predictions against MaxText's published TPU tables (v5p, v5e, v4 READMEs).

Why these tables: they are the one public set of TPU training runs with every parallel setting in a
script beside the number: dense decoders of 16B to 1T parameters, FSDP over the slice with tensor
parallelism where set, sequence 2048, bf16, synthetic data. Rows, scripts, models and MaxText's FLOP count:
benchmarks/maxtext_rows.py (the tables' own commit, 76bd53b0f, 2023-12-15; the snapshot e591f30's scripts
planned beside them).

    python benchmarks/maxtext_validate.py      # ~1 min; writes results/maxtext_validate.{md,json}

Each single-slice row is planned on its catalog chip (tpu-v5p, tpu-v5e, tpu-v4; the slice of that many
chips) with the run's parallelism fixed and nothing fitted to these rows:
- FSDP = ZeRO-3 over ``dp = chips / tp`` (``ici_fsdp_parallelism=-1`` takes the chips tensor parallelism
  leaves); ``tp`` = ``ici_tensor_parallelism``; no pipeline.
- batch: ``per_device_batch_size`` x chips sequences per step, all of a data-parallel rank's at once
  (``microbatch = per_device_batch_size x tp``: MaxText shards the batch over the fsdp axis only and
  runs no gradient accumulation in these scripts).
- tensor parallelism with the activations between layers sharded over tp (``activation_embed`` ->
  ``tensor`` in base.yml's rules): the plan's sequence-parallel form, all-gathers and reduce-scatters of
  the same bytes as all-reduces.
- runtime ``maxtext`` (costmodel/planner/runtime.py: flash attention, FSDP, XLA's async collectives as
  the scripts' LIBTPU_INIT_ARGS set them, tensor-parallel collectives exposed, each field sourced).
- remat: ``full`` (policy None: the layer's inputs saved, its forward run again) -> ``full``, exact;
  ``minimal`` (``checkpoint_dots_with_no_batch_dims``: the weight matmuls' outputs saved, attention,
  norms and activations recomputed) -> ``dots``, the same JAX policy, exact; ``qkv_proj_offloaded``
  (head only) -> ``full``, inexact (the q/k/v projections are kept in host memory, not recomputed).
  Until December 2026 the rows ran under ``megatron-core`` with ``minimal`` -> ``selective``, which
  keeps every activation but the attention core: most v5p rows read "does not fit" (124 GB of 98).

Same convention: the published MFU is MaxText's count (maxtext_rows.maxtext_flops_2023: 6N per token with
the tied embedding, causal attention) / (step x chip peak). The predicted MFU here divides the same count
by the predicted step; the plan's own MFU (3 x the forward graph's FLOPs, attention not halved) is shown
beside it, and the ratio of the two counts converts one into the other. Held out: the development of any
costmodel change looked at the v5p rows only; v5e and v4 are reported as held out.
Multi-slice rows need the DCN between slices: listed as not modelled.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from maxtext_rows import (  # noqa: E402
    MULTISLICE,
    PEAK,
    PUBLISHED_AT,
    ROWS,
    SEQ,
    SNAPSHOT,
    Row,
    maxtext_flops_2023,
    maxtext_flops_head,
    remat_option,
)

import narrowpipe  # noqa: E402
from narrowpipe.costmodel.planner.assemble import assemble  # noqa: E402
from narrowpipe.costmodel.planner.planner import Planner  # noqa: E402
from narrowpipe.costmodel.planner.strategy import Parallel  # noqa: E402

from _common import RESULTS, env_header, environment, md_table, no_options, write_results  # noqa: E402

#: JAX/XLA as MaxText runs it (costmodel/planner/runtime.py): its remat policies, FSDP, async collectives
RUNTIME = "maxtext"
TERMS = ("compute", "recompute", "tp_comm", "param_gather", "dp_comm", "optimizer")


def predict(row: Row, head: bool = False) -> narrowpipe.Plan:
    """The plan of ``row``'s run with its parallelism fixed, assembled whether or not the planner's
    memory model fits it (MaxText ran it; a plan that does not fit says so in ``fits``)."""
    dims, batch = (row.head_dims, row.head_batch) if head else (row.dims, row.batch)
    tp = row.tp_head if head else row.tp
    remat = row.head_remat if head else row.remat
    gb = batch * row.chips
    dp = row.chips // tp
    planner = Planner(dims.model(f"maxtext-{row.model}{'-head' if head else ''}"), row.target, row.chips,
                      global_batch=gb, seq=SEQ, runtime=RUNTIME)
    p = Parallel(tp=tp, pp=1, dp=dp, zero=3, recompute=remat_option(remat), microbatch=gb // dp, global_batch=gb,
                 sequence_parallel=tp > 1)
    return assemble(planner, planner.evaluate(p))


def predicted_mfu(row: Row, plan: narrowpipe.Plan, head: bool = False) -> float:
    """MaxText's FLOPs of the run per chip / predicted step / the chip's peak: the published convention."""
    flops = maxtext_flops_head(row.head_dims, row.head_batch) if head else maxtext_flops_2023(row.dims, row.batch)
    return flops / plan.step_time_s / PEAK[row.target]


def error(row: Row, plan: narrowpipe.Plan) -> float:
    """Signed error of the predicted MFU against the published one, relative."""
    return predicted_mfu(row, plan) / row.mfu - 1


def _stats(errs: list[float]) -> dict[str, float]:
    if not errs:
        return {}
    a = sorted(abs(e) for e in errs)
    p90 = a[min(len(a) - 1, int(round(0.9 * (len(a) - 1))))]
    return {"n": len(errs), "median_signed": statistics.median(errs), "median_abs": statistics.median(a),
            "p90_abs": p90, "max_abs": a[-1]}


def _fit_line(data: list[dict[str, Any]]) -> str:
    """Which rows the plan's memory model fits: MaxText ran every one of them."""
    out = []
    for remat in ("minimal", "full"):
        rows = [d for d in data if d["remat"] == remat]
        no = [d["row"] for d in rows if not d["fits"]]
        gb = [d["memory_per_device_gb"] for d in rows]
        out.append(f"{len(rows) - len(no)} of {len(rows)} rows with remat {remat} fit ({min(gb):.0f}-{max(gb):.0f} "
                   f"GB per chip)" + (f"; not: {', '.join(no)}" if no else ""))
    return ("Fit (MaxText ran every row): " + "; ".join(out) + ". The minimal rows are planned with JAX's policy "
            "(`dots`): q, k, v and the MLP's wi kept per layer, the branch outputs (out projection, wo) not, "
            "as only the residual sum reads them.\n")


def _analysis(data: list[dict[str, Any]]) -> str:
    """Where the errors come from, from the rows' own breakdowns."""
    def mean(rows: list[dict[str, Any]]) -> float:
        return sum(d["error"] for d in rows) / len(rows) if rows else float("nan")
    low = [d for d in data if d["tp"] < 16]
    high = [d for d in data if d["tp"] == 16]
    exposed = {d["row"]: d["breakdown"].get("tp_comm", 0.0) / d["predicted_step_s"] for d in high}
    twins = {d["row"]: d["published_mfu"] for d in data if d["row"].startswith("1024B")}
    tp1 = [d["implied_hw_utilization"] for d in data if d["tp"] == 1]
    plan_tp1 = [d["predicted_hw_utilization"] for d in data if d["tp"] == 1]
    return ("Where the errors come from (per-term breakdown): rows with tp <= 8 are predicted fast, mean "
            f"{mean(low):+.1%} ({len(low)} rows); the plan's matmuls run at ~89% of the MXU peak on every chip "
            "(the MXU fold model) and the rest of the step is the exposed tensor-parallel collectives; the "
            "tp=1 rows with full remat (v5e, v4), which have nothing but compute, show that a whole XLA step "
            f"sustains less than that: the FLOPs the plan executes (recomputation included) over the published "
            f"step are {min(tp1):.0%}-{max(tp1):.0%} of the peak, against the plan's {min(plan_tp1):.0%}-"
            f"{max(plan_tp1):.0%}. "
            f"Rows with tp = 16 are predicted slow, mean {mean(high):+.1%} ({len(high)} rows), where exposed "
            "tensor-parallel collectives are " + ", ".join(f"{v:.0%}" for v in exposed.values()) + " of the "
            "predicted step: XLA overlaps part of them (async collective fusion; the parallel block's "
            "attention and MLP branches are independent), which the plan's collectives, all exposed, do not "
            "model. The tables' own spread bounds any model: the 1024B model with the same per-chip work "
            "reads " + " and ".join(f"{v:.2%} ({k})" for k, v in twins.items()) + ".\n")


def main() -> None:
    env = environment()
    data: list[dict[str, Any]] = []
    table = []
    t0 = time.perf_counter()
    for row in ROWS:
        plan = predict(row)
        head = predict(row, head=True)
        mfu, err, mfu_head = predicted_mfu(row, plan), error(row, plan), predicted_mfu(row, head, True)
        b = plan.breakdown
        per_chip = maxtext_flops_2023(row.dims, row.batch)
        convert = plan.model_flops_per_step / row.chips / per_chip
        data.append({"row": row.name, "held_out": row.held_out, "source": row.source(),
                     "source_head": row.source(head=True), "target": row.target, "system": plan.system,
                     "chips": row.chips, "tp": row.tp, "dp": row.chips // row.tp, "per_device_batch": row.batch,
                     "remat": row.remat, "recompute": remat_option(row.remat), "dims": row.dims.__dict__,
                     "params": row.dims.params(), "published_tflops_per_chip": row.tflops, "published_mfu": row.mfu,
                     "maxtext_flops_per_chip_step": per_chip, "published_step_s": per_chip / (row.tflops * 1e12),
                     "predicted_step_s": plan.step_time_s, "predicted_mfu": mfu, "error": err,
                     "plan_mfu": plan.mfu, "plan_over_maxtext_flops": convert, "breakdown": b,
                     "implied_hw_utilization": plan.hw_flops_per_step / row.chips
                     / (per_chip / (row.tflops * 1e12)) / PEAK[row.target],
                     "predicted_hw_utilization": plan.hw_flops_per_step / row.chips / plan.step_time_s
                     / PEAK[row.target],
                     "hidden_comm": plan.hidden_comm, "fits": plan.fits,
                     "memory_per_device_gb": plan.memory_per_device["total"] / 1e9,
                     "head": {"dims": row.head_dims.__dict__, "per_device_batch": row.head_batch,
                              "remat": row.head_remat, "tp": row.tp_head, "predicted_step_s": head.step_time_s,
                              "predicted_mfu": mfu_head, "error": mfu_head / row.mfu - 1}})
        table.append([row.name + (" (held out)" if row.held_out else ""), plan.system,
                      f"tp{row.tp} fsdp{row.chips // row.tp} b{row.batch} {row.remat}",
                      f"{row.dims.params() / 1e9:.1f}", f"{row.mfu:.2%}", f"{mfu:.2%}", f"{err:+.1%}",
                      f"{plan.mfu:.1%} (x{convert:.3f})", f"{mfu_head:.1%} ({mfu_head / row.mfu - 1:+.1%})",
                      f"{per_chip / (row.tflops * 1e12):.2f}", f"{plan.step_time_s:.2f}",
                      " / ".join(f"{b.get(k, 0.0):.2f}" for k in TERMS),
                      f"{plan.memory_per_device['total'] / 1e9:.0f}" + ("" if plan.fits else " (no fit)")])
    elapsed = time.perf_counter() - t0
    dev = [d["error"] for d in data if not d["held_out"]]
    held = [d["error"] for d in data if d["held_out"]]
    stats = {"development (v5p)": _stats(dev), "held out (v5e, v4)": _stats(held),
             "all": _stats(dev + held), "head scripts, all": _stats([d["head"]["error"] for d in data])}
    summary = md_table(["rows", "n", "median signed", "median |error|", "p90 |error|", "max |error|"],
                       [[k, v["n"], f"{v['median_signed']:+.1%}", f"{v['median_abs']:.1%}", f"{v['p90_abs']:.1%}",
                         f"{v['max_abs']:.1%}"] for k, v in stats.items()], "l")
    md = ("# Training step vs MaxText's published TPU tables\n\n" + env_header(env)
          + f"- source: github.com/AI-Hypercomputer/maxtext, configs/{{v4,v5e,v5p}}/README.md and the .sh beside "
          f"them at the tables' commit {PUBLISHED_AT} (2023-12-15; unchanged in the snapshot {SNAPSHOT})\n"
          f"- {len(ROWS)} single-slice rows predicted in {elapsed:.1f} s\n\n"
          "MFU in MaxText's convention (2023: 6 N per token with the tied embedding, causal attention, over the "
          "chip's bf16 peak) for both columns: predicted = MaxText's FLOPs of the run / predicted step / peak. "
          "`plan MFU` is the plan's own (3 x forward graph, attention not halved); `(x r)` the ratio of its FLOP "
          "count to MaxText's, which converts one MFU into the other. `head scripts`: the same row planned with "
          "the snapshot's scripts and base.yml (Llama-2 block) and the head's FLOP count, against the same "
          "published number (the table predates them). Breakdown in seconds: compute / recomputation / exposed "
          "tensor-parallel collectives / exposed FSDP gathers / data-parallel reduction / optimizer.\n\n"
          + md_table(["row", "slice", "run", "params (B)", "published MFU", "predicted MFU", "error", "plan MFU",
                      "head scripts", "published step (s)", "predicted step (s)", "breakdown (s)", "GB/chip"],
                     table, "lll")
          + "\n" + summary
          + "\n" + _fit_line(data)
          + "\n" + _analysis(data)
          + "\nMulti-slice rows (not modelled: DCN between slices): " + "; ".join(f"{k}: {v}" for k, v in
                                                                              MULTISLICE.items()) + ".\n")
    write_results(RESULTS, "maxtext_validate", md, {"env": env, "source": PUBLISHED_AT, "snapshot": SNAPSHOT,
                                                   "rows": data, "stats": stats,
                                                   "multislice_not_modelled": MULTISLICE})
    print(md)


if __name__ == "__main__":
    no_options(__doc__)
    main()
