"""narrowpipe against torch's FlopCounterMode and fvcore's FlopCountAnalysis: time and counts.

Each tool is timed on what it needs to produce a count for a model already in memory:

* narrowpipe: ``from_torch`` (torch.export + lowering to the IR) + ``analyze``; it never runs the
  model, so its time does not grow with the weights' FLOPs, only with the graph's size.
* FlopCounterMode: one forward pass under the mode; it *executes* the model on the CPU.
* fvcore: ``FlopCountAnalysis(model, inputs).total()``; it traces with ``torch.jit`` (which also
  executes the model once) and counts MACs, so its totals are doubled here to compare.

Models are built from transformers config classes with random weights (nothing is downloaded),
eager attention, batch 1. Run from the repository root::

    python benchmarks/counters.py            # full run, writes benchmarks/results/counters.{md,json}
    python benchmarks/counters.py --quick    # smoke run (2 layers, seq 32, 1 repeat) into benchmarks/out/
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import transformers  # noqa: E402
from fvcore.nn import FlopCountAnalysis  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import narrowpipe  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    RESULTS,
    SCRATCH,
    env_header,
    environment,
    fmt_flops,
    fmt_g,
    fmt_s,
    md_table,
    median,
    timed,
    write_results,
)

# fvcore's by_operator() names for contractions and convolutions (what FlopCounterMode counts)
FVCORE_MATMUL_CONV = {"addmm", "bmm", "mm", "matmul", "linear", "einsum", "conv"}


@dataclass(frozen=True)
class Case:
    name: str
    description: str
    make: Callable[[bool], torch.nn.Module]    # quick -> a 2-layer variant
    vision: bool = False
    causal: bool = False
    attn: str | None = "eager"                 # None: the model has no attention layers
    vocab: int = 0


def _gpt2(quick: bool) -> torch.nn.Module:
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2 if quick else 12))


def _bert(quick: bool) -> torch.nn.Module:
    return transformers.BertModel(transformers.BertConfig(num_hidden_layers=2 if quick else 12))


def _llama_1b(quick: bool) -> torch.nn.Module:
    """Llama-3.2-1B dimensions: GQA with 32 query heads on 8 KV heads, tied embeddings."""
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=2 if quick else 16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, vocab_size=128256, max_position_embeddings=8192,
        rope_theta=500000.0, tie_word_embeddings=True, rms_norm_eps=1e-5))


def _resnet50(quick: bool) -> torch.nn.Module:
    return transformers.ResNetForImageClassification(transformers.ResNetConfig(
        depths=[1, 1, 1, 1] if quick else [3, 4, 6, 3], hidden_sizes=[256, 512, 1024, 2048],
        layer_type="bottleneck", embedding_size=64, num_labels=1000))


def _vit(quick: bool) -> torch.nn.Module:
    return transformers.ViTForImageClassification(transformers.ViTConfig(
        num_hidden_layers=2 if quick else 12, num_labels=1000))  # ViT-B/16 at 224x224


CASES: dict[str, Case] = {c.name: c for c in (
    Case("gpt2", "GPT-2 small (124M)", _gpt2, causal=True, vocab=50257),
    Case("bert-base", "BERT-base (110M)", _bert, vocab=30522),
    Case("llama-3.2-1b", "Llama-3.2-1B dims, GQA 32/8 heads (1.24B)", _llama_1b, causal=True, vocab=128256),
    Case("resnet50", "ResNet-50 (25.6M), 224x224", _resnet50, vision=True, attn=None),
    Case("vit-base", "ViT-B/16 (86.6M), 224x224", _vit, vision=True),
    # the same GPT-2 with PyTorch's fused attention: shows how each counter treats SDPA
    Case("gpt2-sdpa", "GPT-2 small, SDPA attention", _gpt2, causal=True, vocab=50257, attn="sdpa"),
)}


class _TupleOut(torch.nn.Module):
    """fvcore passes inputs positionally and jit-traces: give it a forward that returns tensors.

    Every output tensor is returned, not just the first: the jit graph drops ops whose results are
    not returned (BERT's pooler would vanish from fvcore's count).
    """

    def __init__(self, model: torch.nn.Module, key: str, kwargs: dict[str, Any]) -> None:
        super().__init__()
        self.model, self.key, self.kwargs = model, key, kwargs

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(**{self.key: x}, **self.kwargs, return_dict=False)
        return tuple(t for t in out if isinstance(t, torch.Tensor))


def build(case: Case, quick: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    model = case.make(quick).eval()
    if case.attn is not None:
        model.config._attn_implementation = case.attn
    return model


def inputs(case: Case, seq: int) -> tuple[str, torch.Tensor, dict[str, Any]]:
    if case.vision:
        return "pixel_values", torch.randn(1, 3, 224, 224), {}
    ids = torch.randint(0, case.vocab, (1, seq), generator=torch.Generator().manual_seed(0))
    return "input_ids", ids, ({"use_cache": False} if case.causal else {})


# -- one measurement per tool ------------------------------------------------------------------

def run_forward(model: torch.nn.Module, key: str, x: torch.Tensor, kw: dict[str, Any]) -> dict[str, Any]:
    with torch.no_grad():
        seconds, _ = timed(lambda: model(**{key: x}, **kw))
    return {"seconds": seconds}


def run_narrowpipe(model: torch.nn.Module, key: str, x: torch.Tensor, kw: dict[str, Any]) -> dict[str, Any]:
    lower_s, graph = timed(lambda: narrowpipe.from_torch(model, (), {key: x, **kw}))
    analyze_s, report = timed(lambda: narrowpipe.analyze(graph))
    export_s = float(graph.meta["export_seconds"])
    return {"seconds": lower_s + analyze_s, "export_seconds": export_s, "lower_seconds": lower_s - export_s,
            "analyze_seconds": analyze_s, "modeled_flops": report.modeled_flops, "flops": report.flops,
            "flops_by_group": dict(report.flops_by_group), "params": report.params,
            "unmodeled": [f"{u.op} x{u.count}" for u in report.unmodeled], "nodes": len(graph.nodes)}


def run_flop_counter(model: torch.nn.Module, key: str, x: torch.Tensor, kw: dict[str, Any]) -> dict[str, Any]:
    def go() -> FlopCounterMode:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(**{key: x}, **kw)
        return counter
    seconds, counter = timed(go)
    by_op = {str(k): int(v) for k, v in counter.get_flop_counts().get("Global", {}).items()}
    return {"seconds": seconds, "flops": int(counter.get_total_flops()), "by_op": by_op}


def run_fvcore(model: torch.nn.Module, key: str, x: torch.Tensor, kw: dict[str, Any]) -> dict[str, Any]:
    wrapped = _TupleOut(model, key, kw)

    def go() -> FlopCountAnalysis:
        with torch.no_grad():
            analysis = FlopCountAnalysis(wrapped, (x,))
            analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
            analysis.total()
        return analysis
    seconds, analysis = timed(go)
    macs = {k: int(v) for k, v in analysis.by_operator().items()}
    skipped = Counter({k.removeprefix("aten::"): v for k, v in analysis.unsupported_ops().items()})
    return {"seconds": seconds, "macs": int(analysis.total()), "flops_x2": 2 * int(analysis.total()),
            "macs_by_op": macs, "skipped_ops": dict(skipped.most_common())}


TOOLS: dict[str, Callable[..., dict[str, Any]]] = {
    "forward": run_forward, "narrowpipe": run_narrowpipe, "flop_counter_mode": run_flop_counter,
    "fvcore": run_fvcore}


def measure(case: Case, quick: bool, seq: int, repeat: int) -> dict[str, Any]:
    model = build(case, quick)
    key, x, kw = inputs(case, seq)
    runs: dict[str, list[dict[str, Any]]] = {t: [] for t in TOOLS}
    for _ in range(repeat):          # interleaved, so drift on a shared machine hits all tools alike
        for tool, fn in TOOLS.items():
            gc.collect()
            runs[tool].append(fn(model, key, x, kw))
    last = {t: r[-1] for t, r in runs.items()}
    med = {t: median([r["seconds"] for r in rs]) for t, rs in runs.items()}
    npr = runs["narrowpipe"]
    split = {k: median([r[k] for r in npr]) for k in ("export_seconds", "lower_seconds", "analyze_seconds")}
    params = sum(p.numel() for p in model.parameters())
    counts = {"narrowpipe_modeled": last["narrowpipe"]["modeled_flops"], "narrowpipe_all": last["narrowpipe"]["flops"],
              "flop_counter_mode": last["flop_counter_mode"]["flops"], "fvcore_x2": last["fvcore"]["flops_x2"],
              "fvcore_matmul_conv_x2": 2 * sum(v for k, v in last["fvcore"]["macs_by_op"].items()
                                               if k in FVCORE_MATMUL_CONV)}
    result = {
        "model": case.name, "description": case.description, "input": _input_label(case, seq), "params": params,
        "attn_implementation": case.attn, "median_seconds": med, "narrowpipe_split_seconds": split,
        "ratios": {"narrowpipe/flop_counter_mode": med["narrowpipe"] / med["flop_counter_mode"],
                   "narrowpipe/fvcore": med["narrowpipe"] / med["fvcore"]},
        "counts": counts, "explanation": explain(counts, last, params),
        "details": {"narrowpipe": {k: last["narrowpipe"][k]
                                   for k in ("flops_by_group", "params", "unmodeled", "nodes")},
                    "flop_counter_mode_by_op": last["flop_counter_mode"]["by_op"],
                    "fvcore_macs_by_op": last["fvcore"]["macs_by_op"],
                    "fvcore_skipped_ops": last["fvcore"]["skipped_ops"]},
        "runs_seconds": {t: [r["seconds"] for r in rs] for t, rs in runs.items()},
    }
    del model
    gc.collect()
    return result


def _input_label(case: Case, seq: int) -> str:
    return "1x3x224x224" if case.vision else f"1x{seq} tokens"


def explain(counts: dict[str, int], last: dict[str, dict[str, Any]], params: int) -> str:
    """Why the columns differ, from what each tool reported on this model (not a canned sentence)."""
    parts: list[str] = []
    npm, fcm = counts["narrowpipe_modeled"], counts["flop_counter_mode"]
    attention = last["narrowpipe"]["flops_by_group"].get("attention", 0)
    if npm == fcm:
        parts.append("narrowpipe = FlopCounterMode exactly")
    elif attention and npm - fcm == attention:
        parts.append(f"FlopCounterMode counts 0 for the CPU fused SDPA kernel (no formula for "
                     f"_scaled_dot_product_flash_attention_for_cpu); narrowpipe counts its {fmt_flops(attention)}")
    else:
        parts.append(f"narrowpipe - FlopCounterMode = {fmt_flops(npm - fcm)}")
    fv_mm = counts["fvcore_matmul_conv_x2"]
    parts.append("fvcore matmul/conv x2 = FlopCounterMode" if fv_mm == fcm
                 else f"fvcore matmul/conv x2 - FlopCounterMode = {fmt_flops(fv_mm - fcm)}")
    extra = {k: 2 * v for k, v in last["fvcore"]["macs_by_op"].items() if k not in FVCORE_MATMUL_CONV and v}
    if extra:
        parts.append("fvcore also counts (x2) " + ", ".join(f"{k} {fmt_flops(v)}" for k, v in extra.items()))
    skipped = list(last["fvcore"]["skipped_ops"])
    if "scaled_dot_product_attention" in skipped:  # the one skip that loses matmul FLOPs: name it first
        skipped.remove("scaled_dot_product_attention")
        skipped.insert(0, "scaled_dot_product_attention (its matmuls uncounted)")
    if skipped:
        more = f" +{len(skipped) - 6} more" if len(skipped) > 6 else ""
        parts.append("fvcore skips " + ", ".join(skipped[:6]) + more)
    if last["narrowpipe"]["params"] != params:
        parts.append(f"narrowpipe params {last['narrowpipe']['params']:,} != model's {params:,}")
    if last["narrowpipe"]["unmodeled"]:
        parts.append("narrowpipe unmodeled: " + ", ".join(last["narrowpipe"]["unmodeled"]))
    return "; ".join(parts)


def warm_up() -> None:
    """First calls pay one-time costs (imports, dispatcher and tracer caches) that no model should carry."""
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=64, n_head=2, vocab_size=100)).eval()
    model.config._attn_implementation = "eager"
    x = torch.randint(0, 100, (1, 8))
    for fn in TOOLS.values():
        fn(model, "input_ids", x, {"use_cache": False})


# -- output ------------------------------------------------------------------------------------

def render(results: list[dict[str, Any]], env: dict[str, Any], args: argparse.Namespace) -> str:
    timing_rows, flop_rows = [], []
    for r in results:
        m, s = r["median_seconds"], r["narrowpipe_split_seconds"]
        timing_rows.append([
            r["model"], r["input"], f"{r['params'] / 1e6:,.1f}M", fmt_s(m["forward"]), fmt_s(m["narrowpipe"]),
            fmt_s(s["export_seconds"]), fmt_s(s["lower_seconds"] + s["analyze_seconds"]),
            fmt_s(m["flop_counter_mode"]), fmt_s(m["fvcore"]),
            f"{r['ratios']['narrowpipe/flop_counter_mode']:.2f}", f"{r['ratios']['narrowpipe/fvcore']:.2f}"])
        c = r["counts"]
        flop_rows.append([r["model"], fmt_g(c["narrowpipe_modeled"]), fmt_g(c["narrowpipe_all"]),
                          fmt_g(c["flop_counter_mode"]), fmt_g(c["fvcore_x2"]), fmt_g(c["fvcore_matmul_conv_x2"]),
                          r["explanation"]])
    mode = "quick smoke run (2 layers / ResNet depths 1,1,1,1)" if args.quick else "full-size models"
    out = [f"# FLOP counters: narrowpipe vs FlopCounterMode vs fvcore\n\n{env_header(env)}"
           f"- setup: {mode}, random weights, batch 1, text seq {args.seq}, eager attention unless named; "
           f"median of {args.repeat} interleaved run(s) per tool after a warm-up\n\n",
           "## Time to a count (median)\n\n",
           md_table(["model", "input", "params", "eager fwd", "narrowpipe", "np: export", "np: lower+analyze",
                     "FlopCounterMode", "fvcore", "np / FCM", "np / fvcore"], timing_rows, "ll"),
           "\n*eager fwd*: one plain `no_grad` forward, for scale. *narrowpipe* = `from_torch` (torch.export + "
           "lowering) + `analyze`, split into *export* and *lower+analyze*; it never runs the model. "
           "*FlopCounterMode* = one forward under the mode (executes the model). *fvcore* = "
           "`FlopCountAnalysis(model, inputs).total()` (traces with `torch.jit`, which executes the model). "
           "Ratios are narrowpipe time / other time: below 1, narrowpipe is faster.\n\n",
           "## FLOP counts (GFLOP, 1 multiply-add = 2 FLOPs)\n\n",
           md_table(["model", "narrowpipe modeled", "narrowpipe all ops", "FlopCounterMode", "fvcore x2",
                     "fvcore matmul+conv x2", "why they differ"], flop_rows, "lrrrrrl"),
           "\n*narrowpipe modeled* = `Report.modeled_flops` (contraction + convolution + attention, "
           "FlopCounterMode's convention); *narrowpipe all ops* = `Report.flops` (adds elementwise, "
           "reductions, normalizations). fvcore counts MACs (one per multiply-add), so its total is doubled "
           "here; it also counts norms and pooling with its own per-element formulas and skips ops it has "
           "no handle for (listed).\n"]
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 2-layer models, seq 32, 1 repeat, writes to benchmarks/out/")
    p.add_argument("--models", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}")
    p.add_argument("--seq", type=int, default=None, help="text sequence length (default 128, quick 32)")
    p.add_argument("--repeat", type=int, default=None, help="runs per tool, median reported (default 5, quick 1)")
    p.add_argument("--out", type=Path, default=None,
                   help="results directory (default benchmarks/results, quick benchmarks/out)")
    args = p.parse_args(argv)
    args.seq = args.seq or (32 if args.quick else 128)
    args.repeat = args.repeat or (1 if args.quick else 5)
    out_dir = args.out or (SCRATCH if args.quick else RESULTS)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")

    warnings.filterwarnings("ignore")          # jit TracerWarnings from transformers' code
    logging.getLogger("fvcore").setLevel(logging.ERROR)
    warm_up()
    results = []
    for name in names:
        print(f"[counters] {name} ...", file=sys.stderr, flush=True)
        r = measure(CASES[name], args.quick, args.seq, args.repeat)
        m = r["median_seconds"]
        print(f"[counters] {name}: narrowpipe {fmt_s(m['narrowpipe'])}, "
              f"FlopCounterMode {fmt_s(m['flop_counter_mode'])}, fvcore {fmt_s(m['fvcore'])}",
              file=sys.stderr, flush=True)
        results.append(r)
    env = environment()
    text = render(results, env, args)
    print(text)
    settings = {"quick": args.quick, "seq": args.seq, "repeat": args.repeat, "batch": 1}
    data = {"benchmark": "counters", "env": env, "settings": settings, "results": results}
    md, js = write_results(out_dir, "counters", text, data)
    print(f"wrote {md} and {js}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
