"""Pope et al.'s released implementation, step by step, timed with the model's own costs: a reading set
beside the model (``serving_validate.py`` reports it), not the model.

The paper's code is public (google-research/google-research, ``scaling_transformer_inference_efficiency``,
``layers/two_d_parallel_xmap.py``, ``collectives.py``, ``usage/benchmarks.py``, ``usage/run_benchmark.py``;
POPE-CODE in backends/catalog/SOURCES.toml, with the file versions read). Its 2D weight-stationary layer
runs the layout's collectives differently from ``ws2d.py`` in four ways, each a switch here:

* ``split``: the yz collectives are two ops, one torus axis each: an all-gather over y, the norm's
  statistic (one fp32 mean of squares per row of ``B/z`` rows) all-reduced over x, an all-gather over z
  (``allgather_layernorm``); after the output matmul a reduce-scatter over y, then one over z.
* ``kv``: K and V have their own matmul on the ``B/yz`` rows the batch-sharded attention needs and
  their own reduce-scatter over x (``AttnAllToAll.AXES_YZX``); only q takes the all-to-all. A prefill
  (head-sharded, ``AttnAllToAll.NONE``) all-reduces k, v over x and gathers them over z.
* ``looped``: the reduce-scatter over x runs inside the input matmul and the all-gather over x inside
  the output matmul (Wang et al.'s Looped CollectiveEinsum): decode uses the "latency" forms (``x // 2``
  matmul chunks, half of each partial sum sent each way round the ring, one collective-permute left after
  the last chunk; the gather sends the first shard before any chunk; ``run_benchmark.py`` asks for them),
  prefill the one-way forms (``x`` chunks, each permute under the next chunk: the layer's choice without
  latency collectives when a host sees at most 32 devices, as a TPU v4 host's 4 chips). A chunk and a
  permute run at the same time.
* ``stack``: once per step, what ``embed_unembed_topp`` times: the embedding lookup all-reduced over
  yz, the final norm's statistic over x, logits in fp32 reduce-scattered over x, the embedding table in
  bf16 whatever the layers' format, and for a decode step the sampling (logits all-to-all over yz,
  Gumbel-max on the VPU, tokens gathered over every chip). ``run_benchmark.py`` adds this to 118 x the
  layer time (an 8-layer benchmark) to get the step.

A collective-permute is one hop over one link: the op's launch, the link latency, its bytes at the link
rate (``Topology``'s figures). Every other cost is the model's: kernel times from the TPU execution model,
collectives from ``Topology.time``. The serial check applies the same schedule to each block of a serial
layer; the implementation's serial layer (``layers/layers_serial.py``) is another program (its output
projections reduce over y inside collective matmuls), so that check is approximate.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from narrowpipe.backends import Target, get_system, get_target
from narrowpipe.costmodel.execution import TimingOptions
from narrowpipe.costmodel.execution.collectives import Topology
from narrowpipe.costmodel.serving.ws2d import Ws2dStep, _blocks, _kernels_s, ws2d_decode, ws2d_torus_axes
from narrowpipe.ir import DType, Graph, Op
from narrowpipe.models.graph_builder import GraphBuilder
from narrowpipe.models.spec import TransformerSpec

PARTS = ("split", "kv", "looped", "stack")


def _kernel_s(target: Target, build: Any) -> float:
    g = Graph("pope_schedule")
    bld = GraphBuilder(g, DType.BF16)
    g.set_outputs([build(bld)])
    return _kernels_s(g, target, TimingOptions())[0]


def looped_reduce_scatter(chunk_s: float, permute_s: float, steps: int, latency_form: bool) -> float:
    """A matmul whose output is reduce-scattered in ``steps`` chunks: the latency form sends the last
    partial sums after the last chunk; the one-way form's last permute runs under the last chunk."""
    if latency_form:
        return chunk_s + (steps - 1) * max(chunk_s, permute_s) + permute_s
    return chunk_s + (steps - 1) * max(chunk_s, permute_s)


def looped_all_gather(chunk_s: float, permute_s: float, steps: int, latency_form: bool) -> float:
    """A matmul whose input is all-gathered in ``steps`` chunks: the latency form first sends the
    neighbour's shard (the first chunk needs it), then each permute runs under a chunk."""
    return (permute_s if latency_form else 0.0) + (steps - 1) * max(chunk_s, permute_s) + chunk_s


def reading(spec: TransformerSpec, step: Ws2dStep, system: str, batch: int, seq: int, weights: DType,
            parts: tuple[str, ...] = PARTS) -> tuple[float, dict[str, float], dict[str, float]]:
    """The step's seconds with ``parts`` of the implementation's schedule in place of ws2d's, the
    per-layer terms that changed (new value less the one it replaces) and the per-step ones."""
    target = get_target("tpu-v4")
    topo = Topology.of_system(get_system(system))
    lo = target.launch_overhead
    x, yz = step.x, step.yz
    n = x * yz
    split = ws2d_torus_axes(topo.scale_up.torus_dims, x, yz)
    assert split is not None, "the implementation's x, y, z are whole torus axes"
    xa, yza = split
    y = max(yza)                                  # get_3d_mesh: 16 chips are x, y, z = 2, 4, 2
    z = math.prod(yza) // y
    cube = topo.scale_up.torus_dims
    e, d, v = spec.hidden, spec.head_dim, spec.vocab
    hd = spec.heads * d
    ab, t, prefill = 2, batch * seq, seq > 1
    ex = math.ceil(e / x)

    def coll(op: Op, nbytes: float, axes: tuple[int, ...]) -> float:
        axes = tuple(k for k in axes if k > 1)
        if not axes or nbytes <= 0:
            return 0.0
        return topo.time(op, nbytes, math.prod(axes), axes=axes).seconds + lo

    def permute(nbytes: float) -> float:
        return lo + topo.scale_up.latency + nbytes / topo.scale_up.link_bandwidth

    pl = step.per_layer
    layer: dict[str, float] = {}
    for blk in _blocks(spec):
        p, k = blk.name, (blk.name.strip().replace(" ", "_") + "_" if blk.name else "")
        if "split" in parts:
            layer[p + "all-gather y, z (was yz)"] = (coll(Op.ALL_GATHER, t / z * e / x * ab, (y,))
                                                     + coll(Op.ALL_GATHER, t * e / x * ab, (z,))
                                                     - pl[p + "all-gather yz (B x E/x)"])
            layer[p + "all-reduce x, one statistic of B/z rows"] = (coll(Op.ALL_REDUCE, t / z * 4, xa)
                                                                    - pl[p + "all-reduce x (norm statistics)"])
            layer[p + "reduce-scatter y, z (was yz)"] = (coll(Op.REDUCE_SCATTER, t * e / x * ab, (y,))
                                                         + coll(Op.REDUCE_SCATTER, t * e / x / y * ab, (z,))
                                                         - pl[p + "reduce-scatter yz (B x E/x)"])
        if "kv" in parts and blk.attention:
            rows = t / z if prefill else math.ceil(t / yz)
            kv_s = _kernel_s(target, lambda b, m=int(rows): b.dot(b.input("xnorm", (m, ex), DType.BF16),
                                                                 b.weight("kv", (2 * d, ex), dtype=weights)))
            if prefill:
                new = (kv_s + coll(Op.ALL_REDUCE, rows * 2 * d * ab, xa) + coll(Op.ALL_GATHER, t * 2 * d * ab, (z,))
                       - pl[p + "all-gather k,v (B L x 2d)"])
            else:
                new = (kv_s + coll(Op.REDUCE_SCATTER, rows * 2 * d * ab, xa)
                       + coll(Op.ALL_TO_ALL, t * hd / n * ab, cube) - pl[p + "all-to-all q,k,v to batch"])
            layer[p + "k, v: own matmul and reduce-scatter x"] = new
        if "looped" in parts:
            steps = max(x // 2, 1) if not prefill else x
            w_in, w_out = step.layer_kernels[f"layer_{k}w_in"], step.layer_kernels[f"layer_{k}w_out"]
            out_in, lhs_out = t * blk.n_in / yz * ab, t * blk.n_out / n * ab
            rs = looped_reduce_scatter((w_in - lo) / steps + lo,
                                       permute(out_in / steps / (1 if prefill else 2)), steps, not prefill)
            ag = looped_all_gather((w_out - lo) / steps + lo, permute(lhs_out), steps, not prefill)
            layer[p + "w_in with reduce-scatter x looped"] = rs - w_in - pl[p + "reduce-scatter x (B x in/yz)"]
            layer[p + "w_out with all-gather x looped"] = ag - w_out - pl[p + "all-gather x (B x out/yz)"]
    stack: dict[str, float] = {}
    if "stack" in parts:
        stack["embedding lookup, all-reduce yz"] = lo + coll(Op.ALL_REDUCE, t * e / x * ab, yza)
        stack["final norm and its statistic over x"] = (
            _kernel_s(target, lambda b: b.emit(Op.RMS_NORM, [b.input("h", (batch, math.ceil(e / x)), DType.BF16),
                                                             b.weight("s", (math.ceil(e / x),), dtype=DType.BF16)],
                                               (batch, math.ceil(e / x)), {"axis": 1, "eps": 1e-6}, name="norm"))
            + coll(Op.ALL_REDUCE, batch * 4, xa))
        head = [_kernel_s(target, lambda b, w=w: b.dot(b.input("h", (batch, math.ceil(e / x)), DType.BF16),
                                                       b.weight("emb", (math.ceil(v / yz), math.ceil(e / x)), dtype=w)))
                for w in (DType.BF16, weights)]
        stack["embedding table in bf16 (was the layers' format)"] = head[0] - head[1]
        stack["logits in fp32: reduce-scatter x (was bf16, and the gather over yz)"] = (
            coll(Op.REDUCE_SCATTER, batch * v / yz * 4, xa) - coll(Op.REDUCE_SCATTER, batch * v / yz * ab, xa)
            - coll(Op.ALL_GATHER, batch * e / x * ab, yza))
        if not prefill:
            rows = max(math.ceil(batch / n), 1)
            stack["sampling: logits all-to-all yz, Gumbel-max, tokens gathered"] = (
                coll(Op.ALL_TO_ALL, max(batch // x, yz) * v / yz * 4, yza)
                + _kernel_s(target, lambda b: b.emit(Op.ARGMAX, [b.binary(
                    Op.ADD, b.input("logits", (rows, v), DType.FP32), b.input("gumbel", (rows, v), DType.FP32))],
                    (rows,), {"axis": 1}, name="sample", dtype=DType.INT32))
                + coll(Op.ALL_GATHER, batch * 4, cube))
    return step.time_s + spec.layers * sum(layer.values()) + sum(stack.values()), layer, stack


def attribution(rows: list[tuple[Any, Ws2dStep]], served: TransformerSpec, context: int) -> list[dict[str, Any]]:
    """Each part alone and all together, for every Pope row (``pope_steps``) and the serial check
    (section 4.3: 540B serial against parallel blocks, bf16, 64 chips, batch 512)."""
    t, topo = get_target("tpu-v4"), Topology.of_system(get_system("tpu-v4-4x4x4"))
    blocks = {p: replace(served, parallel_block=p) for p in (True, False)}
    serial = {p: ws2d_decode(spec, t, topo, 64, batch=512, context=context, weights=DType.BF16, axes=(4, 16))
              for p, spec in blocks.items()}
    out = []
    for r, s in rows:
        w = DType.parse(r.weights)
        entry = {"row": r.label, "batch": r.batch,
                 "published_ms": r.published_ms, "model_ms": s.time_s * 1e3}
        for part in (*PARTS, "all"):
            entry[part] = reading(r.served, s, r.system, r.batch, r.seq, w,
                                  PARTS if part == "all" else (part,))[0] * 1e3
        out.append(entry)
    sr = {}
    for part in (*PARTS, "all"):
        parts = PARTS if part == "all" else (part,)
        par, ser = (reading(blocks[p], serial[p], "tpu-v4-4x4x4", 512, 1, DType.BF16, parts)[0] for p in (True, False))
        sr[part] = ser / par - 1
    out.append({"row": "serial vs parallel (540B, batch 512)", "published": 0.14,
                "model": serial[False].time_s / serial[True].time_s - 1, **sr})
    return out


def schedule_md(table: list[dict[str, Any]]) -> str:
    head = ("| row | batch | published | model | + " + " | + ".join(PARTS) + " | all four |\n"
            "|---|--:|--:|--:|" + "--:|" * (len(PARTS) + 1) + "\n")
    body = ""
    for e in table[:-1]:
        pub = e["published_ms"]
        cells = [f"{e[p]:.1f} ({e[p] / pub - 1:+.1%})" for p in (*PARTS, "all")]
        body += (f"| {e['row']} | {e['batch']} | {pub:.1f} | {e['model_ms']:.1f} ({e['model_ms'] / pub - 1:+.1%}) | "
                 + " | ".join(cells) + " |\n")
    s = table[-1]
    body += (f"| {s['row']} | 512 | {s['published']:+.0%} | {s['model']:+.1%} | "
             + " | ".join(f"{s[p]:+.1%}" for p in (*PARTS, "all")) + " |\n")
    return head + body


def schedule_section(table: list[dict[str, Any]]) -> str:
    """The reading for serving_validate.md: what the released code runs, each part's effect, the verdict."""
    rows, serial = table[:-1], table[-1]
    within = sum(abs(e["all"] / e["published_ms"] - 1) <= 0.2 for e in rows)
    b16 = next(e for e in rows if e["row"] == "PaLM 540B bf16" and e["batch"] == 64)
    return (
        "\n### The released implementation's schedule, timed with the model's costs (`benchmarks/pope_schedule.py`)\n\n"
        "Pope et al.'s code is public (google-research `scaling_transformer_inference_efficiency`, POPE-CODE). Its "
        "parallel 2D weight-stationary layer runs the layout's collectives differently from `ws2d.py` in four "
        "ways (module doc): **split**, the yz gathers and scatters as two one-axis ops (y, then z); **kv**, K and V "
        "with their own matmul and reduce-scatter over x, only q in the all-to-all; **looped**, the x reduce-scatter "
        "and all-gather inside the two matmuls (Looped CollectiveEinsum: collective-permutes under matmul chunks); "
        "**stack**, the per-step embedding all-reduce, final norm, fp32 logits and sampling that `run_benchmark.py` "
        "adds to 118 layers. Each part alone and all four, nothing else changed (every cost the model's own):\n\n"
        + schedule_md(table)
        + f"\nAll four put {within} of {len(rows)} rows within 20% (bf16 batch 64: {b16['all']:.1f} ms, "
        f"{b16['all'] / b16['published_ms'] - 1:+.1%}), but the serial check goes from {serial['model']:+.1%} to "
        f"{serial['all']:+.1%} against the published {serial['published']:+.0%}: the split alone takes it to "
        f"{serial['split']:+.1%}, because at batch 512 a one-axis gather or scatter has half the links of the yz pair "
        "and the serial layer runs twice as many of them. The looped collectives alone make every row faster "
        "(the prefills most), so the model meets the prefill rows only because it overlaps nothing: the paper's "
        "1.4x from these low-level optimizations (section 3.5) says its naive schedule is slower still, i.e. the "
        "model's per-op costs are short across the board, not only at batch 64. The reading is not adopted: it "
        "fails the serial check, and the implementation's serial layer (`layers_serial.py`) is a different program "
        "whose multi-query K/V path cannot be read off the code (its latency-form reduce-scatter of the one K/V "
        "head raises). Sources, figures and what each rules in or out: "
        "[pope_sources.md](pope_sources.md).\n")
