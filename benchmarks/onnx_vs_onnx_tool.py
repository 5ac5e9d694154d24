"""ONNX frontend vs the torch path and vs onnx-tool, on full-size transformers models.

For each model (GPT-2 small, BERT-base, a Llama-3.2-1B-style model with grouped-query attention,
ResNet-50, ViT-B/16; random weights, nothing downloaded) and each exporter (dynamo, legacy):

* the torch path (``narrowpipe.from_torch`` + ``analyze``) gives the reference contraction +
  convolution + attention FLOPs and ``sum(p.numel() for p in model.parameters())``;
* the exported ``.onnx`` goes through ``narrowpipe.load`` + ``narrowpipe.analyze`` (timed);
* onnx-tool profiles the same file (``Model`` + ``shape_infer`` + ``profile``, timed): its MACs of
  the matmul/conv ops (x2 for FLOPs) and of all ops, and its parameter count.

Results go to ``benchmarks/results/onnx_vs_onnx_tool.{md,json}``.

    python benchmarks/onnx_vs_onnx_tool.py                    # all five, full size (slow: exports)
    python benchmarks/onnx_vs_onnx_tool.py gpt2 bert --size tiny
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import narrowpipe  # noqa: E402
from narrowpipe.ir import ValueKind  # noqa: E402

import onnx_models  # noqa: E402
from _common import RESULTS, SCRATCH, env_header, environment, fmt_g, fmt_s, md_table, write_results  # noqa: E402

BATCH, SEQ = 1, 128
#: onnx-tool op types that are contractions or convolutions (what modeled FLOPs covers).
MATMUL_OPS = {"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "MatMulInteger", "QLinearMatMul", "QLinearConv"}


def _best(fn: Any, repeat: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def _ours(path: str, dims: dict[str, int], repeat: int) -> dict[str, Any]:
    def run() -> Any:
        graph = narrowpipe.load(path)
        return graph, narrowpipe.analyze(graph, dims=dims)
    seconds, (graph, report) = _best(run, repeat)
    bindings = report.dims
    weights: dict[str, int] = {"tied": 0, "buffer": 0, "const": 0}
    for v in graph.weights:
        n = v.type.numel(bindings)
        if "tied to" in v.source_name:
            weights["tied"] += n
        elif v.kind is ValueKind.BUFFER:
            weights["buffer"] += n
        elif v.kind is ValueKind.CONST and n > 1:
            weights["const"] += n
    bias = sum(r.flops for r in report.ops if r.op == "add" and r.source_op.split("::")[-1] in ("Gemm", "Conv"))
    import onnx
    initializers = sum(int(np.prod(t.dims)) for t in onnx.load(path, load_external_data=False).graph.initializer)
    return {"seconds": seconds, "modeled_flops": report.modeled_flops, "flops": report.flops,
            "params": report.params, "unmodeled": [u.op for u in report.unmodeled], "nodes": len(graph.nodes),
            "non_param_weights": weights, "gemm_conv_bias_flops": bias, "initializer_elements": initializers}


#: onnx-tool runs in a child process under this address-space limit: it copies every weight, and
#: on the 1B Llama it would otherwise take the whole machine down with it.
TOOL_MEMORY_LIMIT = 16 << 30


def _onnx_tool(path: str, name: str, size: str, repeat: int) -> dict[str, Any]:
    """onnx-tool's profile of the file, run in a memory-limited child process."""
    import resource
    import subprocess

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (TOOL_MEMORY_LIMIT, TOOL_MEMORY_LIMIT))

    cmd = [sys.executable, os.path.abspath(__file__), "--tool-child", path, name, size, str(repeat)]
    done = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=limit, timeout=3600)
    if done.returncode != 0 or not done.stdout.strip():
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        oom = "MemoryError" in done.stderr or done.returncode in (-9, 137)
        reason = f"out of memory under a {TOOL_MEMORY_LIMIT >> 30} GB limit" if oom else tail[:200]
        return {"error": reason}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _tool_child(path: str, name: str, size: str, repeat: int) -> dict[str, Any]:
    import onnx_tool
    names = ["pixel_values"] if onnx_models.MODELS[name].family == "vision" else ["input_ids", "attention_mask"]
    inputs = {k: np.zeros(v.shape, dtype=v.numpy().dtype)
              for k, v in zip(names, onnx_models.example_inputs(name, size, BATCH, SEQ))}

    def run() -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = onnx_tool.Model(path, {"verbose": False})
            g = m.graph
            g.graph_reorder_nodes()
            g.shape_infer(inputs)
            g.profile()
        return g
    try:
        seconds, g = _best(run, repeat)
    except Exception as exc:  # onnx-tool fails on some exports: record why
        return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    matmul = sum(n.macs[0] for n in g.nodemap.values() if n.op_type in MATMUL_OPS)
    by_op: dict[str, float] = {}
    for n in g.nodemap.values():
        by_op[n.op_type] = by_op.get(n.op_type, 0.0) + n.macs[0]
    return {"seconds": seconds, "macs": int(g.macs[0]), "matmul_macs": int(matmul), "params": int(g.params),
            "macs_by_op": {k: int(v) for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])[:8]}}


def bench(name: str, size: str, exporters: list[str], repeat: int, directory: str) -> list[dict[str, Any]]:
    """Export with every exporter first, then free the model before measuring (the 1B Llama's
    weights, an export and onnx-tool's copy of them would not fit in memory together)."""
    import torch
    model = onnx_models.build(name, size)
    dims = onnx_models.dims_for(name, BATCH, SEQ)
    with torch.no_grad():
        t = time.perf_counter()
        ref = onnx_models.torch_reference(model, name, size, BATCH, SEQ)
        ref["seconds"] = time.perf_counter() - t
    exported: dict[str, tuple[str, float]] = {}
    for exporter in exporters:
        sub = os.path.join(directory, f"{name}_{exporter}")
        os.makedirs(sub, exist_ok=True)
        path = os.path.join(sub, "model.onnx")
        exported[exporter] = (path, onnx_models.export(model, name, path, exporter, size))
        gc.collect()
    del model
    gc.collect()
    rows = []
    for exporter, (path, export_s) in exported.items():
        sub = os.path.dirname(path)
        ours = _ours(path, dims, repeat)
        tool = _onnx_tool(path, name, size, repeat)
        gc.collect()
        size_mb = sum(os.path.getsize(os.path.join(sub, f)) for f in os.listdir(sub)) / 1e6
        rows.append({"model": name, "size": size, "exporter": exporter, "export_s": round(export_s, 1),
                     "torch": ref, "narrowpipe": ours, "onnx_tool": tool, "files_mb": round(size_mb, 1)})
        shutil.rmtree(sub)
        print(_line(rows[-1]), flush=True)
    return rows


def _line(r: dict[str, Any]) -> str:
    ours, ref, tool = r["narrowpipe"], r["torch"], r["onnx_tool"]
    ratio = ours["modeled_flops"] / ref["modeled_flops"] if ref["modeled_flops"] else float("nan")
    tool_flops = 2 * tool["matmul_macs"] if "matmul_macs" in tool else None
    speed = tool["seconds"] / ours["seconds"] if "seconds" in tool else None
    return (f"{r['model']:>6} {r['exporter']:>6}  torch {ref['modeled_flops']:.4e}  onnx {ours['modeled_flops']:.4e} "
            f"({ratio:.5f})  params {ours['params']} vs {ref['params']}  onnx-tool 2*MACs(mm) "
            f"{tool_flops if tool_flops is None else f'{tool_flops:.4e}'}  time {ours['seconds']:.2f}s vs "
            f"{tool.get('seconds', float('nan')):.2f}s (onnx-tool/ours {speed if speed is None else f'{speed:.1f}'}x)")


def _why(r: dict[str, Any]) -> str:
    """The differences between onnx-tool's numbers and ours, accounted for from our own graph."""
    ours, tool = r["narrowpipe"], r["onnx_tool"]
    if "error" in tool and "MemoryError" in tool["error"]:
        return (f"onnx-tool runs out of memory under a {TOOL_MEMORY_LIMIT >> 30} GB limit: it loads every weight "
                f"({r.get('files_mb', 0) / 1e3:.1f} GB here) and copies it into numpy arrays")
    if "error" in tool:
        return f"onnx-tool fails on this export ({tool['error'][:70]})"
    notes = []
    gap = 2 * tool["matmul_macs"] - ours["modeled_flops"]
    if gap:
        bias = ours["gemm_conv_bias_flops"]
        notes.append(f"FLOPs +{gap:,}: onnx-tool counts the bias of Gemm/Conv as one MAC per output "
                     f"({'exactly' if gap == 2 * bias else f'our bias adds: {2 * bias:,}'})")
    extra = tool["params"] - ours["params"]
    if extra:
        w = ours["non_param_weights"]
        parts = [f"{k} {v:,}" for k, v in (("a tied copy", w["tied"]), ("buffers", w["buffer"]),
                                          ("constants", w["const"])) if v]
        whole = "all of them" if tool["params"] == ours["initializer_elements"] else \
            f"file total {ours['initializer_elements']:,}"
        notes.append(f"params {extra:+,}: onnx-tool counts every initializer of the file ({whole}), "
                     f"which holds {', '.join(parts) or 'no non-parameters'} besides the parameters; "
                     f"narrowpipe counts parameters, including those the exporter merged behind Identity nodes")
    return "; ".join(notes) or "equal"


def write(rows: list[dict[str, Any]], size: str, env: dict[str, Any] | None = None) -> None:
    import onnx
    import onnx_tool
    import torch
    import transformers
    env = env or {**environment(), "onnx": onnx.__version__, "onnx_tool": getattr(onnx_tool, "VERSION", "?"),
                  "torch": torch.__version__, "transformers": transformers.__version__}
    header = ["model", "exporter", "torch path (GFLOP)", "ONNX (GFLOP)", "ratio", "params ONNX / torch",
              "onnx-tool matmul+conv x2 (GFLOP)", "onnx-tool all ops x2 (GFLOP)", "onnx-tool params",
              "narrowpipe load+analyze", "onnx-tool load+profile", "onnx-tool / narrowpipe", "why they differ"]
    table = []
    for r in rows:
        ours, ref, tool = r["narrowpipe"], r["torch"], r["onnx_tool"]
        ok = "error" not in tool
        table.append([r["model"], r["exporter"], fmt_g(ref["modeled_flops"]), fmt_g(ours["modeled_flops"]),
                      f"{ours['modeled_flops'] / ref['modeled_flops']:.5f}", f"{ours['params']:,} / {ref['params']:,}",
                      fmt_g(2 * tool["matmul_macs"]) if ok else "failed", fmt_g(2 * tool["macs"]) if ok else "-",
                      f"{tool['params']:,}" if ok else "-", fmt_s(ours["seconds"]),
                      fmt_s(tool["seconds"]) if ok else "-",
                      f"{tool['seconds'] / ours['seconds']:.1f}x" if ok else "-", _why(r)])
    text = (f"# ONNX frontend vs torch path vs onnx-tool ({size} models)\n\n" + env_header(env) +
            f"- also: onnx {env['onnx']}, onnx-tool {env['onnx_tool']}\n"
            f"- shapes: batch {BATCH}, sequence {SEQ} (images {224 if size == 'full' else 32}x"
            f"{224 if size == 'full' else 32}); times are the best of the repeats, one process, warm file cache\n\n" +
            md_table(header, table, "ll" + "r" * 10 + "l") +
            "\n" + _NOTES)
    directory = RESULTS if size == "full" else SCRATCH
    write_results(directory, "onnx_vs_onnx_tool" if size == "full" else f"onnx_vs_onnx_tool_{size}", text,
                  {"env": env, "rows": rows})


_NOTES = """**How to read it.** *torch path* is `narrowpipe.from_torch` + `analyze` on the same model
instance; *ONNX* is `narrowpipe.load` + `analyze` on its export; both are `Report.modeled_flops`
(contraction + convolution + attention, FlopCounterMode's convention) and `Report.params`. onnx-tool
reports MACs; they are doubled here. Its *matmul+conv* column sums MatMul, Gemm, Conv and Einsum
nodes, the counterpart of modeled FLOPs; *all ops* adds its counts for elementwise ops, norms and
softmax. Times: narrowpipe never reads weight payloads it does not need (external data is never
opened), onnx-tool loads every weight (`onnx.load_model`), then infers shapes and profiles. The
dynamo exporter keeps weights in an external `.data` file, which is why narrowpipe's times there
are a fraction of the legacy exporter's single-file models, where both tools parse the whole
protobuf.
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--tool-child":
        path, name, size, repeat = argv[1:5]
        print(json.dumps(_tool_child(path, name, size, int(repeat))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(onnx_models.MODELS))
    ap.add_argument("--size", default="full", choices=["tiny", "full"])
    ap.add_argument("--exporters", default="dynamo,legacy")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--merge", action="store_true", help="add to the existing results file instead of replacing it")
    ap.add_argument("--render", action="store_true", help="only rewrite the .md from the existing .json")
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    suffix = "" if args.size == "full" else f"_{args.size}"
    existing = os.path.join(RESULTS if args.size == "full" else SCRATCH, f"onnx_vs_onnx_tool{suffix}.json")
    if args.render:
        with open(existing) as fh:
            data = json.load(fh)
        write(data["rows"], args.size, data["env"])
        return 0
    if args.merge and os.path.exists(existing):
        with open(existing) as fh:
            rows = [r for r in json.load(fh)["rows"] if r["model"] not in args.models]
    with tempfile.TemporaryDirectory() as d:
        for name in args.models:
            rows.extend(bench(name, args.size, args.exporters.split(","), args.repeat, d))
            gc.collect()
            write(sorted(rows, key=lambda r: (list(onnx_models.MODELS).index(r["model"]), r["exporter"])), args.size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
