"""What is left after the fit: the largest held-out errors with their predicted terms, grouped by
cause, and the bars per chip family.

Why: a median and a 90th percentile say how far off a chip is, not why; the worst rows with the
compute, memory and overhead terms of their prediction (and the algorithm the model picked) show
which mechanism is missing. The causes are rules on the shape and the error's sign, not a fit:
they name where to look (a first layer, a strided backward pass, a tiny kernel), and every row
they do not name is left to the library's per-shape kernel choice, by the sign of its error (or,
where the benchmark harness forced the algorithm, to that algorithm's modelled cost).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from typing import Any

#: Chip families the bars are also read per (vendor and execution-model family of the target).
FAMILY_OF = {"b200": "NVIDIA GPUs", "h100-sxm": "NVIDIA GPUs", "v100-sxm2": "NVIDIA GPUs", "t4": "NVIDIA GPUs",
             "p100-pcie": "NVIDIA GPUs", "mi25": "AMD GPUs", "mi300x": "AMD GPUs", "mi355x": "AMD GPUs",
             "tpu-v5e": "TPUs", "tpu-v6e": "TPUs", "tpu-v7-tensorcore": "TPUs"}
#: A held-out row counts as a miss beyond this |error| (the 90th-percentile bar).
MISS = 0.25


def _dims(shape: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", shape)}


def cause(r: dict[str, Any]) -> str:
    """The group a held-out miss falls in, from its shape, kind and the sign of its error."""
    d, over = _dims(r["shape"]), r["error"] > 0
    if r["kind"] != "gemm" and d["c"] <= 3:
        return "first layer (1-3 input channels)"
    if r["measured_s"] < 0.5 * r["compute_s"]:
        return "faster than the modelled algorithm's arithmetic allows (FFT, another unit)"
    if r["kind"] == "gemm":
        if d["k"] >= 100_000:
            return "K-heavy skinny GEMM (K >= 100k)"
        if min(d["m"], d["n"]) <= 64:
            return "skinny GEMM (M or N <= 64)"
        if over and r["measured_s"] < 20e-6:
            return "small kernel faster than the latency terms"
        if r["dtype"] == "tf32":
            return "fp32 GEMM as TF32/XF32 (library path)"
        return "GEMM: the library's pick is " + ("faster" if over else "slower") + " than the model's best tile"
    if r["kind"] == "conv_bwd_data" and max(d.get("sh", 1), d.get("sw", 1)) > 1:
        return "strided backward data"
    if r["kind"] == "conv_bwd_filter" and r["dtype"] == "fp16" and not over:
        return "fp16 weight gradient slower than the tensor cores allow"
    if over and r["measured_s"] < 30e-6:
        return "small kernel faster than the latency terms"
    if r.get("forced_algo"):       # the harness chose the algorithm (data/harness_conv.toml): no library pick
        return "convolution: the harness-forced algorithm runs " + ("faster" if over else "slower") + " than modelled"
    return "convolution: the library's pick is " + ("faster" if over else "slower") + " than the model's best plan"


Summary = Callable[[Sequence[dict[str, Any]]], dict[str, Any]]


def per_family(records: Sequence[dict[str, Any]], summary: Summary) -> dict[str, dict[str, Any]]:
    """Held-out ``summary`` per chip family (every held-out row of its chips pooled)."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r["held_out"]:
            groups[FAMILY_OF.get(r["chip"], "other")].append(r)
    return {f: summary(rs) for f, rs in sorted(groups.items())}


def misses_by_cause(records: Sequence[dict[str, Any]]) -> dict[str, Counter[str]]:
    """cause -> chip -> held-out rows beyond :data:`MISS`."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for r in records:
        if r["held_out"] and abs(r["error"]) > MISS:
            out[cause(r)][r["chip"]] += 1
    return dict(out)


def worst(records: Sequence[dict[str, Any]], n: int = 30) -> list[dict[str, Any]]:
    """The ``n`` held-out rows with the largest |error|."""
    return sorted((r for r in records if r["held_out"]), key=lambda r: -abs(r["error"]))[:n]


def markdown(records: Sequence[dict[str, Any]], summary: Summary, table: Callable[..., str],
             pct: Callable[[dict[str, Any], str], str], n: int = 30) -> str:
    """The family table, the misses per cause and the ``n`` worst rows, as markdown sections."""
    fam = per_family(records, summary)
    out = ["\n## Held out, per chip family (all rows of the family pooled)\n\n",
           table(["family", "held-out rows", "median abs", "p90 abs", "median signed"],
                 [[f, s["n"], pct(s, "median_abs"), pct(s, "p90_abs"), pct(s, "median_signed")]
                  for f, s in fam.items()], "l")]
    causes = misses_by_cause(records)
    chips = sorted({c for counts in causes.values() for c in counts})
    out += [f"\n## Held-out misses (|error| > {MISS:.0%}) by cause\n\n",
            table(["cause", *chips, "all"],
                  [[name, *(counts.get(c, 0) for c in chips), sum(counts.values())]
                   for name, counts in sorted(causes.items(), key=lambda kv: -sum(kv[1].values()))], "l")]
    rows = []
    for r in worst(records, n):
        rows.append([r["chip"], r["kind"], r["dtype"], r["shape"], f"{r['measured_s'] * 1e6:.1f}",
                     f"{r['predicted_s'] * 1e6:.1f}", f"{100 * r['error']:+.0f}%",
                     f"{r['compute_s'] * 1e6:.1f} / {r['memory_s'] * 1e6:.1f} / {r['overhead_s'] * 1e6:.1f}",
                     r["algorithm"] or "-", cause(r)])
    out += [f"\n## The {n} largest held-out errors, with the predicted terms\n\n",
            "Terms in microseconds: compute / memory / overhead (launch and latency floor) of the predicted "
            "kernel; algorithm: what the model ran (the library's forward choice in brackets where the source "
            "names one; \"forced\": the algorithm the benchmark harness forced, `data/harness_conv.toml`).\n\n",
            table(["chip", "kind", "dtype", "shape", "measured us", "predicted us", "error", "terms (us)",
                   "algorithm", "cause"], rows, "l")]
    return "".join(out)
