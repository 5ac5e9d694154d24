"""How fast the planner searches, and what it finds where a published plan exists.

Why: a planner is only useful if it answers in seconds for real device counts, which it can only do
by costing each distinct (layer, sharding) once and combining the rest by arithmetic. This measures
both halves on a 100-layer transformer (Llama-3-70B-like widths: hidden 8192, 64 heads, 8 KV heads,
gated FFN 28672, seq 4096) on 512 H100s: the block costing (cold, once per sharding) and the rate of
candidate evaluations from cached costs (warm, one core; bar: 10,000 candidates/s). Then it searches
the SC'21 145.6B GPT on 1536 A100s with nothing fixed, under the same 2021 runtime, and compares with
the paper's own configuration (tp8 pp8, full recomputation).

    python benchmarks/planner_search.py       # ~1 min; writes results/planner_search.{md,json}
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import megatron_validate as mv  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.costmodel.planner.planner import Planner  # noqa: E402
from narrowpipe.costmodel.planner.search import candidates, search  # noqa: E402

from _common import RESULTS, env_header, environment, md_table, no_options, write_results  # noqa: E402


def speed() -> dict[str, float]:
    g = narrowpipe.transformer(100, 8192, 64, 128256, ffn=28672, kv_heads=8, gated_mlp=True, seq=4096,
                               name="transformer-100l")
    planner = Planner(g, "dgx-h100", 512, global_batch=1024)
    t0 = time.perf_counter()
    cands = list(candidates(planner, {}))
    enum_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for p in cands:
        planner.costs(p)
    costing_s = time.perf_counter() - t0
    for p in cands:                                # layouts built once per (sharding, pp, v)
        planner.evaluate(p)
    rates = []
    for _ in range(5):
        t0 = time.perf_counter()
        for p in cands:
            planner.evaluate(p)
        rates.append(len(cands) / (time.perf_counter() - t0))
    t0 = time.perf_counter()
    result = search(Planner(g, "dgx-h100", 512, global_batch=1024), {})
    search_s = time.perf_counter() - t0
    return {"layers": 100, "candidates": len(cands), "enumerate_s": enum_s, "block_costs": planner.cached_costs,
            "costing_s": costing_s, "candidates_per_s": statistics.median(rates), "candidates_per_s_min": min(rates),
            "search_s": search_s, "best": result.best.parallel.describe(), "best_step_s": result.best.step.total_s}


def megatron_145b() -> dict[str, object]:
    row = next(r for r in mv.ROWS if r.name == "145.6B")
    paper = mv.predict(row)
    t0 = time.perf_counter()
    found = narrowpipe.plan(mv.model(row), "dgx-a100", row.gpus, global_batch=row.batch, seq=mv.SEQ,
                            runtime="megatron-lm-2021")
    search_s = time.perf_counter() - t0
    return {"paper": paper.parallel.describe(), "paper_step_s": paper.step_time_s,
            "paper_memory_gb": paper.memory_per_device["total"] / 1e9, "published_step_s": row.measured_step_s,
            "found": found.parallel.describe(), "found_step_s": found.step_time_s,
            "found_memory_gb": found.memory_per_device["total"] / 1e9, "search_s": search_s,
            "found_breakdown": found.breakdown, "paper_breakdown": paper.breakdown,
            "runners_up": [(r.parallel.describe(), r.step_time_s, r.why) for r in found.runners_up],
            "notes": found.notes}


def main() -> None:
    env = environment()
    s = speed()
    m = megatron_145b()
    md = ("# Planner search speed and the 145.6B search\n\n" + env_header(env) + "\n## Speed (100-layer transformer, "
          "512 x H100 in DGX H100 nodes, global batch 1024, seq 4096)\n\n"
          + md_table(["what", "value"], [
              ["strategies enumerated", f"{s['candidates']:,} in {s['enumerate_s'] * 1e3:.0f} ms"],
              ["distinct block costs (sharding x recompute x microbatch x block)",
               f"{s['block_costs']} in {s['costing_s']:.1f} s (cold)"],
              ["candidate evaluations from cached costs, one core",
               f"{s['candidates_per_s']:,.0f}/s median of 5 (min {s['candidates_per_s_min']:,.0f}/s; bar 10,000/s)"],
              ["whole search, cold (costing + evaluation + runners-up)", f"{s['search_s']:.1f} s"],
              ["best", f"{s['best']}: {s['best_step_s']:.2f} s per step"]], "ll")
          + "\n## 145.6B GPT on 1536 A100 (SC'21 Table 1), nothing fixed, runtime `megatron-lm-2021`\n\n"
          + md_table(["plan", "strategy", "predicted step (s)", "GB/GPU"], [
              ["the paper's (fixed)", m["paper"], f"{m['paper_step_s']:.2f}", f"{m['paper_memory_gb']:.0f}"],
              ["found by the search", m["found"], f"{m['found_step_s']:.2f}", f"{m['found_memory_gb']:.0f}"]],
              "lll")
          + f"\nPublished step of the paper's configuration: {m['published_step_s']:.2f} s. Search time "
          f"{m['search_s']:.1f} s. The search stays within what the 2021 runtime offers (no sequence "
          "parallelism, no ZeRO, full recomputation or none: `Runtime.sequence_parallel`, `zero_stages`, "
          "`recompute_modes`); unfused attention and gradients reduced after the backward, as in the paper."
          "\n\nRunners-up:\n\n"
          + md_table(["strategy", "step (s)", "why it lost"],
                     [[d, f"{t:.2f}" if t is not None else "-", w] for d, t, w in m["runners_up"]], "lrl"))
    write_results(RESULTS, "planner_search", md, {"env": env, "speed": s, "megatron_145b": m})
    print(md)


if __name__ == "__main__":
    no_options(__doc__)
    main()
