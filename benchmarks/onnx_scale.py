"""How load + analyze time grows with graph size, against ONNX's own load + shape inference.

Synthetic ONNX graphs of 1k, 10k and 100k nodes repeat a transformer-like block (matmul, bias,
activation, reshape/transpose, softmax, residual add, layer norm) over a symbolic ``batch`` dim,
with distinct weights per block stored as external data that is never read (the ``.data`` file is
sparse). Per size, interleaved and repeated (medians; the machine is shared):

* reference: ``onnx.load(path, load_external_data=False)`` + ``onnx.shape_inference.infer_shapes``;
* narrowpipe: ``narrowpipe.load(path)`` then ``narrowpipe.analyze(graph, batch=8)``;
* re-bind: a second ``narrowpipe.analyze(graph, batch=16)`` on the same lowered graph.

It reports the two ratios the ONNX frontend is held to: load+analyze over the reference (bar: 3),
and re-bind over load (bar: 0.1).

    python benchmarks/onnx_scale.py                 # 1k, 10k, 100k nodes -> results/onnx_scale.{md,json}
    python benchmarks/onnx_scale.py --quick         # 1k and 10k, 1 run -> benchmarks/out/
    python benchmarks/onnx_scale.py --profile 100000
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import narrowpipe  # noqa: E402

from _common import RESULTS, SCRATCH, env_header, environment, fmt_s, md_table, write_results  # noqa: E402

HIDDEN = 64
HEADS = 4
#: Nodes per block (see :func:`_block`).
BLOCK_NODES = 12


def _external(name: str, dims: list[int], offset: int) -> TensorProto:
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "weights.data"), ("offset", str(offset)), ("length", str(4 * _numel(dims)))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def _numel(dims: list[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _block(i: int, x: str, inits: list[TensorProto], offset: int) -> tuple[list[onnx.NodeProto], str, int]:
    """One block: 12 nodes, 3 weights (two matmuls and a layer-norm scale)."""
    p = f"b{i}"
    w1, w2, g = f"{p}.w1", f"{p}.w2", f"{p}.ln"
    for name, dims in ((w1, [HIDDEN, HIDDEN]), (w2, [HIDDEN, HIDDEN]), (g, [HIDDEN])):
        inits.append(_external(name, dims, offset))
        offset += 4 * _numel(dims)
    nodes = [
        helper.make_node("MatMul", [x, w1], [f"{p}.h"], name=f"{p}/mm1"),
        helper.make_node("Add", [f"{p}.h", "bias"], [f"{p}.hb"], name=f"{p}/bias"),
        helper.make_node("Relu", [f"{p}.hb"], [f"{p}.a"], name=f"{p}/relu"),
        helper.make_node("Reshape", [f"{p}.a", "heads_shape"], [f"{p}.r"], name=f"{p}/split_heads"),
        helper.make_node("Transpose", [f"{p}.r"], [f"{p}.t"], perm=[0, 2, 1, 3], name=f"{p}/to_bhsd"),
        helper.make_node("Mul", [f"{p}.t", "scale"], [f"{p}.s"], name=f"{p}/scale"),
        helper.make_node("Softmax", [f"{p}.s"], [f"{p}.sm"], axis=-1, name=f"{p}/softmax"),
        helper.make_node("Transpose", [f"{p}.sm"], [f"{p}.u"], perm=[0, 2, 1, 3], name=f"{p}/to_bshd"),
        helper.make_node("Reshape", [f"{p}.u", "merge_shape"], [f"{p}.m"], name=f"{p}/merge_heads"),
        helper.make_node("MatMul", [f"{p}.m", w2], [f"{p}.o"], name=f"{p}/mm2"),
        helper.make_node("Add", [f"{p}.o", x], [f"{p}.res"], name=f"{p}/residual"),
        helper.make_node("LayerNormalization", [f"{p}.res", g], [f"{p}.y"], axis=-1, name=f"{p}/ln"),
    ]
    return nodes, f"{p}.y", offset


def build(n_nodes: int) -> onnx.ModelProto:
    blocks = max(n_nodes // BLOCK_NODES, 1)
    inits: list[TensorProto] = [
        helper.make_tensor("bias", TensorProto.FLOAT, [HIDDEN], [0.0] * HIDDEN),
        helper.make_tensor("scale", TensorProto.FLOAT, [], [0.125]),
        helper.make_tensor("heads_shape", TensorProto.INT64, [4], [0, 0, HEADS, HIDDEN // HEADS]),
        helper.make_tensor("merge_shape", TensorProto.INT64, [3], [0, 0, HIDDEN]),
    ]
    nodes: list[onnx.NodeProto] = []
    x, offset = "x", 0
    for i in range(blocks):
        block, x, offset = _block(i, x, inits, offset)
        nodes.extend(block)
    graph = helper.make_graph(nodes, f"synthetic_{len(nodes)}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 128, HIDDEN])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def measure(n_nodes: int, repeat: int = 5, profile: bool = False) -> dict[str, float | int]:
    """Medians over ``repeat`` interleaved rounds of: the reference, load, analyze, re-bind."""
    model = build(n_nodes)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "synthetic.onnx")
        onnx.save(model, path)
        with open(os.path.join(d, "weights.data"), "wb") as fh:  # sparse: declared, never read
            fh.truncate(sum(4 * _numel(list(t.dims)) for t in model.graph.initializer if t.data_location == 1))
        size = os.path.getsize(path)
        times: dict[str, list[float]] = {"onnx_s": [], "load_s": [], "analyze_s": [], "rebind_s": [], "rows_s": []}
        cpu: dict[str, list[float]] = {k: [] for k in times}
        for _ in range(repeat):
            c0, t0 = time.process_time(), time.perf_counter()
            onnx.shape_inference.infer_shapes(onnx.load(path, load_external_data=False))
            c1, t1 = time.process_time(), time.perf_counter()
            if profile:
                import cProfile
                import pstats
                prof = cProfile.Profile()
                prof.enable()
            graph = narrowpipe.load(path)
            c2, t2 = time.process_time(), time.perf_counter()
            report = narrowpipe.analyze(graph, batch=8)
            c3, t3 = time.process_time(), time.perf_counter()
            rebound = narrowpipe.analyze(graph, batch=16)
            c4, t4 = time.process_time(), time.perf_counter()
            len(rebound.ops)   # its rows, built on this first read (costmodel/lazy_rows.py)
            c5, t5 = time.process_time(), time.perf_counter()
            if profile:
                prof.disable()
                pstats.Stats(prof).sort_stats("cumulative").print_stats(35)
            for k, dt, dc in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4),
                                 (c1 - c0, c2 - c1, c3 - c2, c4 - c3, c5 - c4)):
                times[k].append(dt)
                cpu[k].append(dc)
            del graph
    med = {k: statistics.median(v) for k, v in times.items()}
    cmed = {k: statistics.median(v) for k, v in cpu.items()}
    total = med["load_s"] + med["analyze_s"]
    return {"nodes": len(model.graph.node), "file_mb": round(size / 1e6, 2),
            **{k: round(v, 4) for k, v in med.items()}, "total_s": round(total, 4),
            "us_per_node": round(1e6 * total / len(model.graph.node), 2),
            "ratio_vs_onnx": round(total / med["onnx_s"], 2),
            "rebind_vs_load": round(med["rebind_s"] / med["load_s"], 3),
            "cpu": {k: round(v, 4) for k, v in cmed.items()},
            "cpu_ratio_vs_onnx": round((cmed["load_s"] + cmed["analyze_s"]) / cmed["onnx_s"], 2),
            "flops": report.flops, "params": report.params,
            "runs": {k: [round(x, 4) for x in v] for k, v in times.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[1_000, 10_000, 100_000])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--quick", action="store_true", help="1k and 10k nodes, 1 repeat, written to benchmarks/out")
    args = ap.parse_args(argv)
    sizes = [1_000, 10_000] if args.quick else args.sizes
    repeat = 1 if args.quick or args.profile else args.repeat
    measure(10 * BLOCK_NODES, 1)   # warm-up: imports and one-time caches land on no measured size
    rows = [measure(n, repeat, args.profile) for n in sizes]
    header = ["nodes", "file", "onnx load + infer_shapes", "np load", "np analyze", "np load + analyze",
              "per node", "**np / onnx** (bar 3)", "re-bind analyze", "**re-bind / load** (bar 0.1)",
              "then reading its rows", "np / onnx, CPU time"]
    table = [[f"{r['nodes']:,}", f"{r['file_mb']} MB", fmt_s(r["onnx_s"]), fmt_s(r["load_s"]), fmt_s(r["analyze_s"]),
              fmt_s(r["total_s"]), f"{r['us_per_node']} us", f"{r['ratio_vs_onnx']:.2f}", fmt_s(r["rebind_s"]),
              f"{r['rebind_vs_load']:.3f}", fmt_s(r["rows_s"]), f"{r['cpu_ratio_vs_onnx']:.2f}"] for r in rows]
    print(md_table(header, table))
    if args.profile:
        return 0
    env = {**environment(), "onnx": onnx.__version__}
    text = ("# ONNX frontend: load + analyze time against graph size and against ONNX itself\n\n" + env_header(env) +
            f"- also: onnx {onnx.__version__}; median of {repeat} interleaved rounds per size, one process\n\n" +
            md_table(header, table) + "\n" + _NOTES)
    write_results(SCRATCH if args.quick else RESULTS, "onnx_scale", text, {"env": env, "rows": rows})
    return 0


_NOTES = f"""**What it measures.** A synthetic ONNX graph repeating a {BLOCK_NODES}-node transformer-like block
(two matmuls with distinct weights, bias, ReLU, head split/merge reshapes and transposes, a scale,
softmax, a residual add and a layer norm) over a symbolic `batch` dim (hidden {HIDDEN}, {HEADS} heads,
128 tokens); the weights are external data in a sparse file that is never read. Each round runs, in
this order: the reference, `onnx.load(path, load_external_data=False)` +
`onnx.shape_inference.infer_shapes(model)` (what reading and typing the file costs ONNX itself);
*np load*, `narrowpipe.load(path)` (read, checks, weight classes, typing, lowering to the IR);
*np analyze*, `narrowpipe.analyze(graph, batch=8)` (the first analysis of the graph, which also
indexes it); *re-bind*, `narrowpipe.analyze(graph, batch=16)` on the same graph; *then reading its
rows*, the first read of that report's per-node rows (`len(report.ops)`), which builds them. Medians
over the rounds. The last column is the same ratio in process CPU time (`time.process_time`), which other
jobs on a shared machine disturb much less than wall time.

**The two ratios.** *np / onnx*: narrowpipe's load + analyze over the reference (the target is at
most 3). *re-bind / load*: a second analysis with other dim values over lowering (the target is at
most 0.1): the graph is indexed once (`costmodel/costcache.py`: nodes in classes of equal op,
attrs, operand types and aliasing; distinct shapes; the liveness schedule), so a re-bind runs each
cost rule once per class and sums its totals class by class (count x cost). The report's
one-row-per-node list is built on its first read (`costmodel/lazy_rows.py`): totals, a sweep point or
a verdict never need it; a table, JSON or a timing does, and pays the last column once.

**How the load stays near ONNX's own cost.** This graph is a plain graph of tensors (no control
flow, no declared intermediate types, every op in the table), so the frontend types it node by
node instead of running ONNX's whole-model inference (`frontends/onnx/lazy_types.py`): ONNX's
inference of one node runs once per node signature (op, attributes, input types, known inputs),
about two dozen here, and the lowering of each signature is recorded once and stamped onto the
graph for every node that repeats it (`frontends/onnx/stamp.py`). Models this cannot type exactly
as whole-model inference would fall back to it; the two paths give identical graphs on the 2,048
models tried (ONNX's node tests and backend data models, 14 transformers exports;
`tests/frontends/onnx/test_lazy_types.py`).

**Where the time goes** (process CPU time, minimum of 6 loads at 100k nodes, 2026-12-03, on the
same shared machine, before the rows were made lazy): np load 1.24 s = reading each node's fields
once 0.21 s (2 us a node: five protobuf reads, two lists, its attributes), checks 0.05 s,
initializer fields and weight classes 0.19 s (25,000 initializers; a fifth of it reading
external-data locations to find tied copies), lowering 0.68 s (about 6 us a node: its operands, its
signature, the IR node, value and source; `Graph.add_node` 0.23 s of it). np analyze 0.42 s = the
per-graph index (classes, shapes, liveness in one walk) 0.20 s, one report row per node 0.12 s (now
deferred to the first read), costing each class, the cost table and the peak 0.05 s. ONNX's
reference is superlinear (about 3.7 us a node at 10k nodes, 5.5 us at 100k), so the ratio is higher
on the smaller graphs. A re-bind was 0.17 s, 0.1 s of it the 100,000 report rows; without them it
is the class walk, the size-limit check and the weight bytes (a profile: 0.06 s).
"""


if __name__ == "__main__":
    sys.exit(main())
