"""Pope et al.'s 2D weight-stationary decode layout on a TPU torus (Efficiently Scaling Transformer
Inference, 2022, section 3.2.2 and figure 3), with multi-query attention sharded over the batch.

``n = x * yz`` chips hold every weight matrix as an ``E/x`` by ``F/yz`` block (E: d_model over the
``x`` axis; F: the MLP width, and the attention heads, over the ``yz`` axes), so no chip ever holds
a whole row or column and the traffic per chip falls as ``1 / sqrt(n)``. One layer of a decode step
for ``B`` sequences, each chip:

1. **all-gather over yz** of its ``B x E/n`` activations to ``B x E/x``; the norm's statistics
   (sum and sum of squares per row, fp32) **all-reduced over x**, the only chips holding the rest
   of each row; the norm;
2. the fused input matmul (gate, up, q, k, v: ``E/x -> (2F + H d + 2 d)/yz``), partial sums over
   x; **reduce-scatter over x** to ``B x .../n``;
3. SwiGLU on its ``F/n`` slice; q, k, v go **all-to-all** from head-sharded to batch-sharded
   (``B/n`` sequences, every head), rotary embeddings turn q and the new k (PaLM's RoPE, Chowdhery
   et al. 2022, section 2), and attention reads only those sequences' cache (multi-query: one K/V
   head, so the cache is split by batch, not by head); the output goes **all-to-all** back;
4. **all-gather over x** to ``B x (F + H d)/yz``; the fused output matmul (down, o) to ``B x E/x``,
   partial over yz; **reduce-scatter over yz** back to ``B x E/n``; the residual add.

A **prefill** (:func:`ws2d_prefill`, the paper's low-latency rows: batch 1, table 2) runs the same
layer over ``B x L`` token rows with attention **sharded over heads** instead (section 3.3: the
queries of many tokens share each K/V, so the cache is no longer the traffic): each chip keeps its
``H/n`` query heads from the reduce-scatter, the one K/V head is **all-gathered over every chip**
(``B L x 2 d``), causal attention runs locally, and its output is already in the place the
all-gather over x expects; no all-to-alls. The head computes the last token's logits only.

A **serial** layer (``parallel_block=False``: attention, then the MLP on its output) runs steps 1-4
twice, once per block, each with its own norm, gathers and scatters: the layout Pope et al. compare
PaLM's parallel block against (section 4.3: 14% slower per decode step at batch 512).

The head is one more all-gather and matmul over ``V/yz``. Each step's compute (per layer, built as an
IR graph with the per-chip shapes and timed by the TPU execution model, MXU padding and per-kernel
overhead included) and the collectives (timed on the system's torus or mesh by
:class:`~narrowpipe.costmodel.execution.collectives.Topology`: ``x`` on the leading torus axes, ``yz``
on the others, :func:`ws2d_torus_axes`) add up; nothing overlaps, a conservative reading of the paper,
which overlaps some communication with its "looped CollectiveEinsum" (section 3.5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ...backends import Target
from ...errors import NarrowpipeError
from ...ir import IN_PLACE, DType, Graph, Op, Value
from ...models.blocks import activation, apply_rotary
from ...models.graph_builder import GraphBuilder
from ...models.spec import TransformerSpec
from ..execution import DeviceGroup, TimingOptions
from ..execution.collectives import Topology
from ..interpreter import interpret
from ..timing import fused_program, time_program

__all__ = ["Ws2dStep", "ws2d_decode", "ws2d_prefill", "ws2d_axes", "ws2d_torus_axes"]


@dataclass(frozen=True)
class Ws2dStep:
    """One decode step in the 2D weight-stationary layout: times per part, for the whole model."""

    time_s: float
    compute_s: float              # the kernels, as the TPU model times them (memory-bound ones included)
    collectives_s: float
    per_layer: dict[str, float]   # seconds per layer: kernels and each collective
    x: int
    yz: int
    weight_bytes_per_chip: float
    notes: list[str] = field(default_factory=list)
    layer_kernels: dict[str, float] = field(default_factory=dict)   # seconds per layer, by kernel
    #: each kernel's (compute, memory) seconds before the roofline takes their max: what an analysis
    #: of overlap needs (benchmarks/pope_pair.py)
    layer_terms: dict[str, tuple[float, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def ws2d_axes(chips: int, hidden: int, ffn: int) -> tuple[int, int]:
    """``(x, yz)`` with ``x * yz = chips`` minimising the per-layer traffic
    ``2 E / x + 4 F / yz`` (the two E-sized and the F-sized gathers and scatters; x = sqrt(n E / 2F))."""
    best: tuple[float, int, int] | None = None
    for x in range(1, chips + 1):
        if chips % x:
            continue
        yz = chips // x
        cost = 2 * hidden / x + 4 * ffn / yz
        if best is None or cost < best[0]:
            best = (cost, x, yz)
    assert best is not None
    return best[1], best[2]


def ws2d_torus_axes(dims: tuple[int, ...], x: int, yz: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The torus axes ``x`` and ``yz`` span: ``x`` the leading axes whose product is ``x`` (one axis
    of a 4x4x4 cube for x = 4, the paper's layout), ``yz`` the rest. None when the torus is not
    exactly ``x * yz`` chips or no leading axes make ``x`` (the collectives then fill axes in order)."""
    if math.prod(dims) != x * yz:
        return None
    acc = 1
    for i, k in enumerate(dims):
        if acc == x:
            return tuple(dims[:i]), tuple(dims[i:])
        acc *= k
    return (tuple(dims), ()) if acc == x else None


@dataclass(frozen=True)
class _Block:
    """One weight-stationary block of a layer: norm, input matmul, its middle, output matmul, residual.
    PaLM's parallel layer is one block (attention and MLP share the norm and the fused matmuls, Pope
    et al. section 3.4); a serial layer is two, each with its own gathers and scatters."""

    name: str         # prefix of its nodes and collectives: "" for a parallel layer
    n_in: int         # columns of the fused input matmul, before the yz split
    n_out: int        # rows of the fused output matmul
    attention: bool
    mlp: bool


def _blocks(spec: TransformerSpec) -> list[_Block]:
    hd, kvd = spec.heads * spec.head_dim, 2 * spec.kv_heads * spec.head_dim
    f_in = (2 if spec.gated_mlp else 1) * spec.ffn
    if spec.parallel_block:
        return [_Block("", f_in + hd + kvd, spec.ffn + hd, True, True)]
    return [_Block("attention ", hd + kvd, hd, True, False), _Block("mlp ", f_in, spec.ffn, False, True)]


def _layer_graph(spec: TransformerSpec, b: int, seq: int, ctx: int, x: int, yz: int, w: DType, a: DType,
                 kv: DType) -> Graph:
    """The compute of one layer on one chip (collective boundaries start new inputs): ``b x seq``
    token rows; ``seq == 1`` a decode step against a cache of ``ctx``, else a prefill."""
    g = Graph("ws2d_layer")
    bld = GraphBuilder(g, a)
    with bld.scope("layer"):
        h = bld.input("h", (b * seq, math.ceil(spec.hidden / (x * yz))), a)
        # the step's rotary tables (its seq new positions), computed once for every layer
        rope = ((bld.input("rope_cos", (seq, spec.head_dim), a), bld.input("rope_sin", (seq, spec.head_dim), a))
                if spec.positions == "rotary" else None)
        for blk in _blocks(spec):
            h = _block(bld, spec, blk, h, b, seq, ctx, x, yz, w, a, kv, rope)
    g.set_outputs([v for node in g.nodes for v in node.outputs if not any(True for _ in v.uses)] + [h])
    return g


def _block(bld: GraphBuilder, spec: TransformerSpec, blk: _Block, h: Value, b: int, seq: int, ctx: int, x: int,
           yz: int, w: DType, a: DType, kv: DType, rope: tuple[Value, Value] | None) -> Value:
    n = x * yz
    e, f, d = spec.hidden, spec.ffn, spec.head_dim
    t = b * seq
    p = blk.name.strip().replace(" ", "_") + "_" if blk.name else ""
    gathered = bld.input(p + "gathered_yz", (t, math.ceil(e / x)), a)
    norm_w = bld.weight(p + "norm", (math.ceil(e / x),), dtype=w)
    normed = bld.emit(Op.LAYER_NORM if spec.norm == "layer" else Op.RMS_NORM, [gathered, norm_w],
                      gathered.shape, {"axis": 1, "eps": 1e-6}, name=p + "norm")
    w_in = bld.weight(p + "w_in", (math.ceil(blk.n_in / yz), math.ceil(e / x)), dtype=w)
    bld.dot(normed, w_in, name=p + "w_in")
    if blk.mlp:
        part = bld.input(p + "scattered_x", (t, math.ceil(f / n)), a)
        act = activation(bld, spec.activation, part)
        if spec.gated_mlp:
            bld.binary(Op.MUL, act, bld.input(p + "up", (t, math.ceil(f / n)), a), name=p + "glu")
    if blk.attention:
        attn = {"layout": "bhsd", "causal": True, "scale": 1 / math.sqrt(d), "enable_gqa": True}
        if seq == 1:
            bs = math.ceil(b / n)                           # batch-sharded multi-query attention
            q = bld.input(p + "q", (bs, spec.heads, 1, d), a)
            new_k, new_v = (bld.input(f"{p}new_{c}", (bs, spec.kv_heads, 1, d), kv) for c in ("k", "v"))
            if rope is not None:
                q, new_k = apply_rotary(bld, q, *rope, p + "q"), apply_rotary(bld, new_k, *rope, p + "k")
            kvs = []
            for c, new in (("k", new_k), ("v", new_v)):
                past = bld.input(f"{p}cache_{c}", (bs, spec.kv_heads, ctx, d), kv)
                kvs.append(bld.emit(Op.CONCAT, [past, new], (bs, spec.kv_heads, ctx + 1, d),
                                    {"axis": 2, IN_PLACE: 0}, name=f"{p}append_{c}", dtype=kv))
            bld.emit(Op.ATTENTION, [q, *kvs], (bs, spec.heads, 1, d), attn, name=p + "attention")
        else:
            hs = math.ceil(spec.heads / n)                  # head-sharded: K/V gathered onto every chip
            q = bld.input(p + "q", (b, hs, seq, d), a)
            k, v = (bld.input(p + c, (b, spec.kv_heads, seq, d), kv) for c in ("k", "v"))
            if rope is not None:
                q, k = apply_rotary(bld, q, *rope, p + "q"), apply_rotary(bld, k, *rope, p + "k")
            bld.emit(Op.ATTENTION, [q, k, v], (b, hs, seq, d), attn, name=p + "attention")
    back = bld.input(p + "gathered_x", (t, math.ceil(blk.n_out / yz)), a)
    w_out = bld.weight(p + "w_out", (math.ceil(e / x), math.ceil(blk.n_out / yz)), dtype=w)
    bld.dot(back, w_out, name=p + "w_out")
    out = bld.input(p + "scattered_yz", (t, math.ceil(e / n)), a)
    return bld.binary(Op.ADD, h, out, name=p + "residual")


def _head_graph(spec: TransformerSpec, b: int, x: int, yz: int, w: DType, a: DType) -> Graph:
    g = Graph("ws2d_head")
    bld = GraphBuilder(g, a)
    hid = bld.input("gathered", (b, math.ceil(spec.hidden / x)), a)
    head = bld.weight("lm_head", (math.ceil(spec.vocab / yz), math.ceil(spec.hidden / x)), dtype=w)
    g.set_outputs([bld.dot(hid, head, name="lm_head")])
    return g


def _kernels_s(graph: Graph, target: Target, options: TimingOptions
               ) -> tuple[float, dict[str, float], dict[str, tuple[float, float]]]:
    """Total seconds of the graph's kernels on one chip, each launched kernel's seconds, and each
    one's (compute, memory) terms."""
    program = fused_program(interpret(graph, {}), target, options)
    schedule = time_program(program, DeviceGroup(target, 1))
    launched = [(k.name, kt) for k, kt in zip(program.kernels, schedule.times) if not k.is_free]
    return (schedule.total_s, {n: kt.time_s for n, kt in launched},
            {n: (kt.compute_s, kt.memory_s) for n, kt in launched})


def ws2d_decode(spec: TransformerSpec, target: Target, topology: Topology, chips: int, *, batch: int,
                context: int, weights: DType | None = None, activations: DType | None = None,
                kv: DType | None = None, axes: tuple[int, int] | None = None,
                options: TimingOptions | None = None) -> Ws2dStep:
    """One decode step of ``batch`` sequences at ``context`` on ``chips`` chips (see the module doc)."""
    return _step(spec, target, topology, chips, batch, 1, context, weights, activations, kv, axes, options)


def ws2d_prefill(spec: TransformerSpec, target: Target, topology: Topology, chips: int, *, batch: int,
                 seq: int, weights: DType | None = None, activations: DType | None = None,
                 kv: DType | None = None, axes: tuple[int, int] | None = None,
                 options: TimingOptions | None = None) -> Ws2dStep:
    """The prefill of ``batch`` prompts of ``seq`` tokens, attention sharded over heads (module doc)."""
    if seq < 2:
        raise NarrowpipeError(f"a prefill needs prompts of 2 tokens or more, not {seq}")
    return _step(spec, target, topology, chips, batch, seq, 0, weights, activations, kv, axes, options)


def _step(spec: TransformerSpec, target: Target, topology: Topology, chips: int, batch: int, seq: int,
          context: int, weights: DType | None, activations: DType | None, kv: DType | None,
          axes: tuple[int, int] | None, options: TimingOptions | None) -> Ws2dStep:
    if target.family != "tpu":
        raise NarrowpipeError(f"the 2D weight-stationary layout is modelled for TPU tori, not {target.family}")
    x, yz = axes or ws2d_axes(chips, spec.hidden, spec.ffn)
    if x * yz != chips:
        raise NarrowpipeError(f"2D weight-stationary axes {x} x {yz} are not {chips} chips")
    n = x * yz
    if seq > 1 and spec.heads % n:
        raise NarrowpipeError(f"head-sharded prefill attention needs the {spec.heads} heads to split over "
                              f"{n} chips (Pope et al. pad PaLM 540B's 48 heads to 64 for this)")
    w, a = weights or spec.dtype, activations or spec.dtype
    kvd = kv or a
    opts = options or TimingOptions()
    graph = _layer_graph(spec, batch, seq, context, x, yz, w, a, kvd)
    layer_s, layer_kernels, layer_terms = _kernels_s(graph, target, opts)
    head_s, _, _ = _kernels_s(_head_graph(spec, batch, x, yz, w, a), target, opts)
    ab = a.nbytes(1000) / 1000
    e, hd, d = spec.hidden, spec.heads * spec.head_dim, spec.head_dim
    t = batch * seq

    split = ws2d_torus_axes(topology.scale_up.torus_dims, x, yz) if topology.torus else None
    spans = {"x": split[0], "yz": split[1], "all": topology.scale_up.torus_dims} if split else {}

    def coll(op: Op, nbytes: float, span: str) -> float:
        group = {"x": x, "yz": yz, "all": n}[span]
        if group <= 1:
            return 0.0
        return topology.time(op, nbytes, group, axes=spans.get(span)).seconds + target.launch_overhead

    per_layer = {"kernels": layer_s}
    for blk in _blocks(spec):
        p = blk.name
        per_layer[p + "all-gather yz (B x E/x)"] = coll(Op.ALL_GATHER, t * e / x * ab, "yz")
        per_layer[p + "all-reduce x (norm statistics)"] = coll(Op.ALL_REDUCE, t * 2 * 4, "x")
        per_layer[p + "reduce-scatter x (B x in/yz)"] = coll(Op.REDUCE_SCATTER, t * blk.n_in / yz * ab, "x")
        if blk.attention and seq == 1:
            per_layer[p + "all-to-all q,k,v to batch"] = coll(Op.ALL_TO_ALL,
                                                              t * (hd + 2 * spec.kv_heads * d) / n * ab, "all")
            per_layer[p + "all-to-all attention out"] = coll(Op.ALL_TO_ALL, t * hd / n * ab, "all")
        elif blk.attention:
            per_layer[p + "all-gather k,v (B L x 2d)"] = coll(Op.ALL_GATHER, t * 2 * spec.kv_heads * d * ab, "all")
        per_layer[p + "all-gather x (B x out/yz)"] = coll(Op.ALL_GATHER, t * blk.n_out / yz * ab, "x")
        per_layer[p + "reduce-scatter yz (B x E/x)"] = coll(Op.REDUCE_SCATTER, t * e / x * ab, "yz")
    comm_layer = sum(v for k, v in per_layer.items() if k != "kernels")
    head_comm = (coll(Op.ALL_GATHER, batch * e / x * ab, "yz")
                 + coll(Op.REDUCE_SCATTER, batch * spec.vocab / yz * ab, "x"))
    compute = spec.layers * layer_s + head_s
    comm = spec.layers * comm_layer + head_comm
    per_chip_params = (spec.layers * sum(e * (blk.n_in + blk.n_out + 1) for blk in _blocks(spec)) / n
                       + spec.vocab * e / n)
    attention = (f"attention batch-sharded ({math.ceil(batch / n)} sequence(s) per chip)" if seq == 1
                 else f"attention head-sharded ({spec.heads // n} head(s) per chip, K/V gathered)")
    block = "parallel block" if spec.parallel_block else "serial attention and MLP blocks"
    notes = [f"2D weight-stationary on {x} x {yz} chips, {block}, {len(layer_kernels)} kernels per layer, {attention}"]
    return Ws2dStep(compute + comm, compute, comm, per_layer, x, yz, w.nbytes(round(per_chip_params)), notes,
                    layer_kernels, layer_terms)
