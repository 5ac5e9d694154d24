"""What narrowpipe adds on top of torch.export for a 70B model, in time and memory.

The ``llama-3-70b`` example (80 layers, hidden 8192, GQA 64/8 heads, bf16) is instantiated on the
meta device and exported exactly as ``models/examples.py::build_example`` does (SDPA attention,
batch and seq symbolic). Timed separately: ``torch.export`` alone, then narrowpipe's lowering
(``from_exported_program``) and ``analyze`` on that program, then ``analyze`` rebound to other
batch and sequence sizes (the export is not repeated). Peak RSS covers the whole process.

Acceptance (printed as PASS/FAIL, exit status 1 on a FAIL):
  * lowering + analyze adds at most 20% to torch.export's own time (medians);
  * the process's peak RSS stays under 4 GB.

Cross-checks (reported, not part of the acceptance): FlopCounterMode run over the exported
module on meta tensors (it counts shapes, nothing executes) must equal ``modeled_flops`` at each
binding, and the example shipped pre-lowered in ``models/data`` must give the same counts.

    python benchmarks/export_70b.py            # writes benchmarks/results/export_70b.{md,json}
    python benchmarks/export_70b.py --quick    # 1 repeat, no cross-checks, writes benchmarks/out/
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import transformers  # noqa: E402
from torch.export import Dim  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.frontends.torch.frontend import from_exported_program  # noqa: E402
from narrowpipe.models.examples import EXAMPLES, load_example  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, SCRATCH, env_header, environment, fmt_flops, fmt_s, md_table, median, timed, write_results  # noqa: E402

MAX_OVERHEAD = 0.20              # lowering + analyze, as a fraction of torch.export's time
MAX_RSS_BYTES = 4 * 10**9        # 4 GB
BINDINGS = [(1, 2048), (1, 8192), (32, 2048), (32, 8192)]
DIM_NAMES = {("input_ids", 0): "batch", ("input_ids", 1): "seq"}


def rss() -> dict[str, int]:
    """Current and peak resident set size of this process, in bytes (Linux /proc, else getrusage)."""
    out = {"peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out["current" if line.startswith("VmRSS") else "peak"] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return out


def gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def tflop(n: int) -> str:
    return f"{n / 1e12:,.1f}"


def meta_model(name: str) -> tuple[torch.nn.Module, dict[str, Any], dict[str, Any]]:
    """The example on the meta device with build_example's export inputs and dynamic shapes."""
    ex = EXAMPLES[name]
    config = ex.config()
    config._attn_implementation = "sdpa"              # build_example's default
    with torch.device("meta"):
        model = getattr(transformers, ex.model_class)(config).to(getattr(torch, ex.dtype)).eval()
    ids = torch.zeros(ex.export_dims.get("batch", 2), ex.export_dims["seq"], dtype=torch.long, device="meta")
    dyn = {"input_ids": {0: Dim("batch", min=1, max=4096), 1: Dim("seq", min=2, max=ex.max_dims.get("seq", 8192))},
           "use_cache": None}
    return model, {"input_ids": ids, "use_cache": False}, dyn


def export(model: torch.nn.Module, kwargs: dict[str, Any], dyn: dict[str, Any]) -> torch.export.ExportedProgram:
    return torch.export.export(model, (), kwargs, dynamic_shapes=dyn, strict=False)


def lower(ep: torch.export.ExportedProgram, name: str) -> narrowpipe.Graph:
    return from_exported_program(ep, name=name, dim_names=DIM_NAMES)


def warm_up() -> None:
    """Pay torch.export's and narrowpipe's one-time costs (imports, caches) on a 2-layer Llama."""
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=100)
    cfg._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.zeros(2, 16, dtype=torch.long, device="meta")
    dyn = {"input_ids": {0: Dim("batch", min=1, max=4096), 1: Dim("seq", min=2, max=8192)}, "use_cache": None}
    narrowpipe.analyze(lower(export(model, {"input_ids": ids, "use_cache": False}, dyn), "warm-up"), batch=1, seq=64)


def flop_counter_on_exported(ep: torch.export.ExportedProgram, batch: int, seq: int) -> tuple[float, int]:
    """FlopCounterMode over the exported module with meta inputs: shapes only, nothing runs.

    (FlopCounterMode cannot run the meta-device HF model itself: its Python code calls
    ``Tensor.item()``; the exported graph no longer does.) On meta tensors SDPA takes the math
    path, so its matmuls are counted; on a real CPU FlopCounterMode would count 0 for them.
    """
    from torch.utils.flop_counter import FlopCounterMode
    module = ep.module()
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")

    def go() -> int:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            module(input_ids=ids, use_cache=False)
        return int(counter.get_total_flops())
    return timed(go)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="1 repeat, no cross-checks, no tracemalloc; writes to benchmarks/out/")
    p.add_argument("--example", default="llama-3-70b", choices=sorted(EXAMPLES), help="which causal-LM example")
    p.add_argument("--repeat", type=int, default=None, help="export + lowering repeats, median reported (default 3)")
    p.add_argument("--out", type=Path, default=None, help="results directory")
    args = p.parse_args(argv)
    if EXAMPLES[args.example].family != "causal-lm":
        p.error("--example must be a causal-LM example (input_ids with batch and seq dims)")
    args.repeat = args.repeat or (1 if args.quick else 3)
    out_dir = args.out or (SCRATCH if args.quick else RESULTS)
    warnings.filterwarnings("ignore")
    say = lambda msg: print(f"[export_70b] {msg}", file=sys.stderr, flush=True)  # noqa: E731

    phases: dict[str, dict[str, int]] = {"start": rss()}
    warm_s, _ = timed(warm_up)
    phases["after warm-up"] = rss()
    build_s, (model, kwargs, dyn) = timed(lambda: meta_model(args.example))
    phases["after meta build"] = rss()
    n_params = sum(p.numel() for p in model.parameters())
    say(f"built {args.example} on meta in {fmt_s(build_s)}; {n_params / 1e9:.2f}B params")

    runs: list[dict[str, float]] = []
    base_b, base_s = BINDINGS[0]
    ep = graph = report = None
    for i in range(args.repeat):
        ep = graph = report = None
        gc.collect()
        export_s, ep = timed(lambda: export(model, kwargs, dyn))
        lower_s, graph = timed(lambda ep=ep: lower(ep, args.example))
        analyze_s, report = timed(lambda graph=graph: narrowpipe.analyze(graph, batch=base_b, seq=base_s))
        runs.append({"export": export_s, "lower": lower_s, "analyze": analyze_s})
        say(f"run {i + 1}: export {fmt_s(export_s)}, lower {fmt_s(lower_s)}, analyze {fmt_s(analyze_s)}")
    phases["after export + lowering + analyze"] = rss()
    med = {k: median([r[k] for r in runs]) for k in ("export", "lower", "analyze")}
    overhead = (med["lower"] + med["analyze"]) / med["export"]

    rebinding = []
    for b, s in BINDINGS:
        times = []
        for _ in range(5):
            t, r = timed(lambda b=b, s=s: narrowpipe.analyze(graph, batch=b, seq=s))
            times.append(t)
        rebinding.append({"batch": b, "seq": s, "analyze_seconds": median(times), "runs_seconds": times,
                          "modeled_flops": r.modeled_flops, "flops": r.flops, "bytes": r.bytes,
                          "peak_activation_bytes": r.peak_activation_bytes})
    phases["after rebinding"] = rss()

    checks: dict[str, Any] = {}
    if not args.quick:
        say("cross-checks: FlopCounterMode over the exported module (meta), shipped example")
        for row in rebinding:
            fcm_s, fcm = flop_counter_on_exported(ep, row["batch"], row["seq"])
            row["flop_counter_mode"], row["flop_counter_mode_seconds"] = fcm, fcm_s
        try:
            shipped = load_example(args.example)
            for row in rebinding:
                r = narrowpipe.analyze(shipped, batch=row["batch"], seq=row["seq"])
                row["shipped_modeled_flops"], row["shipped_flops"] = r.modeled_flops, r.flops
        except Exception as exc:  # the shipped file is a convenience; report, do not fail the benchmark
            checks["shipped_error"] = f"{type(exc).__name__}: {exc}"
        phases["after cross-checks"] = rss()
        gc.collect()
        tracemalloc.start()
        g2 = lower(ep, args.example)
        narrowpipe.analyze(g2, batch=base_b, seq=base_s)
        checks["tracemalloc_peak_lower_analyze_bytes"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        del g2

    peak = rss()["peak"]
    acceptance = {
        "overhead": {"value": overhead, "limit": MAX_OVERHEAD, "pass": overhead <= MAX_OVERHEAD},
        "peak_rss": {"value": peak, "limit": MAX_RSS_BYTES, "pass": peak < MAX_RSS_BYTES},
    }
    env = environment()
    data = {"benchmark": "export_70b", "example": args.example, "env": env,
            "settings": {"quick": args.quick, "repeat": args.repeat, "attn_implementation": "sdpa",
                         "export_inputs": list(kwargs["input_ids"].shape), "dynamic": ["batch", "seq"]},
            "params": report.params, "graph_nodes": len(graph.nodes), "fx_nodes": len(ep.graph.nodes),
            "warm_up_seconds": warm_s, "build_seconds": build_s, "runs_seconds": runs, "median_seconds": med,
            "overhead_fraction": overhead, "rebinding": rebinding, "rss_bytes_by_phase": phases,
            "peak_rss_bytes": peak, "checks": checks, "acceptance": acceptance}
    text = render(data)
    print(text)
    write_results(out_dir, "export_70b", text, data)
    say(f"wrote {out_dir}/export_70b.md and .json")
    return 0 if all(a["pass"] for a in acceptance.values()) else 1


def render(d: dict[str, Any]) -> str:
    med, acc = d["median_seconds"], d["acceptance"]
    verdict = lambda a: "PASS" if a["pass"] else "FAIL"  # noqa: E731
    lines = [f"# torch.export vs narrowpipe on {d['example']} (meta device)\n\n{env_header(d['env'])}",
             f"- model: {d['params'] / 1e9:.2f}B params (bf16, meta: no weights), SDPA attention, exported with "
             f"input_ids {d['settings']['export_inputs']} and batch, seq symbolic; {d['fx_nodes']} fx nodes -> "
             f"{d['graph_nodes']} IR nodes\n",
             f"- median of {d['settings']['repeat']} run(s), after a warm-up export of a 2-layer Llama\n\n",
             "## Acceptance\n\n",
             md_table(["check", "measured", "limit", "result"], [
                 ["lowering + analyze, as a share of torch.export's time", f"{acc['overhead']['value']:.1%}",
                  f"<= {MAX_OVERHEAD:.0%}", verdict(acc["overhead"])],
                 ["peak RSS of the whole process (ru_maxrss)", gb(acc["peak_rss"]["value"]),
                  f"< {gb(MAX_RSS_BYTES)}", verdict(acc["peak_rss"])]], "l"),
             "\n## Time (median)\n\n",
             md_table(["step", "time", "share of export"], [
                 ["torch.export (non-strict, dynamic batch and seq)", fmt_s(med["export"]), "100%"],
                 ["narrowpipe lowering (`from_exported_program`)", fmt_s(med["lower"]),
                  f"{med['lower'] / med['export']:.1%}"],
                 ["narrowpipe `analyze` (batch 1, seq 2048)", fmt_s(med["analyze"]),
                  f"{med['analyze'] / med['export']:.1%}"],
             ], "l"),
             "\n## Rebinding the symbolic dims (analyze only; same graph, no re-export)\n\n"]
    rows = []
    for r in d["rebinding"]:
        fcm = r.get("flop_counter_mode")
        agree = "-" if fcm is None else ("equal" if fcm == r["modeled_flops"]
                                         else f"differs by {fmt_flops(r['modeled_flops'] - fcm)}")
        shipped = r.get("shipped_flops")
        ship = "-" if shipped is None else (
            "equal" if (shipped, r["shipped_modeled_flops"]) == (r["flops"], r["modeled_flops"])
            else f"differs: {fmt_flops(r['flops'] - shipped)}")
        rows.append([r["batch"], r["seq"], fmt_s(r["analyze_seconds"]), tflop(r["modeled_flops"]), tflop(r["flops"]),
                     gb(r["peak_activation_bytes"]), agree, ship])
    lines.append(md_table(["batch", "seq", "analyze", "modeled TFLOP", "all TFLOP", "peak activations",
                           "FlopCounterMode (meta, exported module)", "shipped example"], rows))
    lines.append("\n## Memory\n\n")
    lines.append(md_table(["after", "RSS", "peak RSS so far"],
                          [[k, gb(v.get("current", 0)), gb(v["peak"])] for k, v in d["rss_bytes_by_phase"].items()],
                          "l"))
    c = d["checks"]
    if "tracemalloc_peak_lower_analyze_bytes" in c:
        lines.append(f"\nPython heap peak of one lowering + analyze (tracemalloc, separate untimed pass): "
                     f"{c['tracemalloc_peak_lower_analyze_bytes'] / 1e6:.1f} MB.\n")
    if "shipped_error" in c:
        lines.append(f"\nShipped example could not be compared: {c['shipped_error']}\n")
    return "".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
