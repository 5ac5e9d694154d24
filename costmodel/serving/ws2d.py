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
   (``B/n`` sequences, every head) and attention reads only those sequences' cache (multi-query: one
   K/V head, so the cache is split by batch, not by head); the output goes **all-to-all** back;
4. **all-gather over x** to ``B x (F + H d)/yz``; the fused output matmul (down, o) to ``B x E/x``,
   partial over yz; **reduce-scatter over yz** back to ``B x E/n``; the residual add.

The head is one more all-gather and matmul over ``V/yz``. Each step's compute (per layer, built as an
IR graph with the per-chip shapes and timed by the TPU execution model, MXU padding and per-kernel
overhead included) and the collectives (timed on the system's torus by
:class:`~narrowpipe.costmodel.execution.collectives.Topology`: ``x`` along one axis, ``yz`` over two)
add up; nothing overlaps, a conservative reading of the paper, which overlaps some communication
with its "looped CollectiveEinsum" (section 3.5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ...backends import Target
from ...errors import NarrowpipeError
from ...ir import IN_PLACE, DType, Graph, Op
from ...models.graph_builder import GraphBuilder
from ...models.spec import TransformerSpec
from ..execution import DeviceGroup, TimingOptions
from ..execution.collectives import Topology
from ..interpreter import interpret
from ..timing import fused_program, time_program

__all__ = ["Ws2dStep", "ws2d_decode", "ws2d_axes"]


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


def _layer_graph(spec: TransformerSpec, b: int, ctx: int, x: int, yz: int, w: DType, a: DType,
                 kv: DType) -> Graph:
    """The compute of one layer on one chip (collective boundaries start new inputs)."""
    n = x * yz
    e, f, hd, d = spec.hidden, spec.ffn, spec.heads * spec.head_dim, spec.head_dim
    g = Graph("ws2d_layer")
    bld = GraphBuilder(g, a)
    with bld.scope("layer"):
        h = bld.input("h", (b, math.ceil(e / n)), a)
        gathered = bld.input("gathered_yz", (b, math.ceil(e / x)), a)
        norm_w = bld.weight("norm", (math.ceil(e / x),), dtype=w)
        normed = bld.emit(Op.LAYER_NORM if spec.norm == "layer" else Op.RMS_NORM, [gathered, norm_w],
                          gathered.shape, {"axis": 1, "eps": 1e-6}, name="norm")
        n_in = (2 if spec.gated_mlp else 1) * f + hd + 2 * spec.kv_heads * d
        w_in = bld.weight("w_in", (math.ceil(n_in / yz), math.ceil(e / x)), dtype=w)
        bld.dot(normed, w_in, name="w_in")
        part = bld.input("scattered_x", (b, math.ceil(f / n)), a)
        gate = bld.unary(Op.SILU, part, name="silu")
        bld.binary(Op.MUL, gate, bld.input("up", (b, math.ceil(f / n)), a), name="swiglu")
        bs = math.ceil(b / n)                           # batch-sharded multi-query attention
        q = bld.input("q", (bs, spec.heads, 1, d), a)
        new_k, new_v = (bld.input(f"new_{p}", (bs, spec.kv_heads, 1, d), kv) for p in ("k", "v"))
        kvs = []
        for p, new in (("k", new_k), ("v", new_v)):
            past = bld.input(f"cache_{p}", (bs, spec.kv_heads, ctx, d), kv)
            kvs.append(bld.emit(Op.CONCAT, [past, new], (bs, spec.kv_heads, ctx + 1, d), {"axis": 2, IN_PLACE: 0},
                                name=f"append_{p}", dtype=kv))
        bld.emit(Op.ATTENTION, [q, *kvs], (bs, spec.heads, 1, d),
                 {"layout": "bhsd", "causal": True, "scale": 1 / math.sqrt(d), "enable_gqa": True}, name="attention")
        back = bld.input("gathered_x", (b, math.ceil((f + hd) / yz)), a)
        w_out = bld.weight("w_out", (math.ceil(e / x), math.ceil((f + hd) / yz)), dtype=w)
        bld.dot(back, w_out, name="w_out")
        out = bld.input("scattered_yz", (b, math.ceil(e / n)), a)
        res = bld.binary(Op.ADD, h, out, name="residual")
    g.set_outputs([v for node in g.nodes for v in node.outputs if not any(True for _ in v.uses)] + [res])
    return g


def _head_graph(spec: TransformerSpec, b: int, x: int, yz: int, w: DType, a: DType) -> Graph:
    g = Graph("ws2d_head")
    bld = GraphBuilder(g, a)
    hid = bld.input("gathered", (b, math.ceil(spec.hidden / x)), a)
    head = bld.weight("lm_head", (math.ceil(spec.vocab / yz), math.ceil(spec.hidden / x)), dtype=w)
    g.set_outputs([bld.dot(hid, head, name="lm_head")])
    return g


def _kernels_s(graph: Graph, target: Target, options: TimingOptions) -> tuple[float, int]:
    program = fused_program(interpret(graph, {}), target, options)
    schedule = time_program(program, DeviceGroup(target, 1))
    return schedule.total_s, sum(1 for k in program.kernels if not k.is_free)


def ws2d_decode(spec: TransformerSpec, target: Target, topology: Topology, chips: int, *, batch: int,
                context: int, weights: DType | None = None, activations: DType | None = None,
                kv: DType | None = None, axes: tuple[int, int] | None = None,
                options: TimingOptions | None = None) -> Ws2dStep:
    """One decode step of ``batch`` sequences at ``context`` on ``chips`` chips (see the module doc)."""
    if target.family != "tpu":
        raise NarrowpipeError(f"the 2D weight-stationary layout is modelled for TPU tori, not {target.family}")
    x, yz = axes or ws2d_axes(chips, spec.hidden, spec.ffn)
    if x * yz != chips:
        raise NarrowpipeError(f"2D weight-stationary axes {x} x {yz} are not {chips} chips")
    w, a = weights or spec.dtype, activations or spec.dtype
    kvd = kv or a
    opts = options or TimingOptions()
    layer_s, layer_kernels = _kernels_s(_layer_graph(spec, batch, context, x, yz, w, a, kvd), target, opts)
    head_s, _ = _kernels_s(_head_graph(spec, batch, x, yz, w, a), target, opts)
    n = x * yz
    ab = a.nbytes(1000) / 1000
    e, f, hd, d = spec.hidden, spec.ffn, spec.heads * spec.head_dim, spec.head_dim
    n_in = (2 if spec.gated_mlp else 1) * f + hd + 2 * spec.kv_heads * d

    def coll(op: Op, elements: float, group: int) -> float:
        if group <= 1:
            return 0.0
        return topology.time(op, elements * ab, group).seconds + target.launch_overhead

    per_layer = {
        "kernels": layer_s,
        "all-gather yz (B x E/x)": coll(Op.ALL_GATHER, batch * e / x, yz),
        "all-reduce x (norm statistics)": topology.time(Op.ALL_REDUCE, batch * 2 * 4, x).seconds
        + target.launch_overhead if x > 1 else 0.0,
        "reduce-scatter x (B x in/yz)": coll(Op.REDUCE_SCATTER, batch * n_in / yz, x),
        "all-to-all q,k,v to batch": coll(Op.ALL_TO_ALL, batch * (hd + 2 * spec.kv_heads * d) / n, n),
        "all-to-all attention out": coll(Op.ALL_TO_ALL, batch * hd / n, n),
        "all-gather x (B x out/yz)": coll(Op.ALL_GATHER, batch * (f + hd) / yz, x),
        "reduce-scatter yz (B x E/x)": coll(Op.REDUCE_SCATTER, batch * e / x, yz),
    }
    comm_layer = sum(v for k, v in per_layer.items() if k != "kernels")
    head_comm = coll(Op.ALL_GATHER, batch * e / x, yz) + coll(Op.REDUCE_SCATTER, batch * spec.vocab / yz, x)
    compute = spec.layers * layer_s + head_s
    comm = spec.layers * comm_layer + head_comm
    per_chip_params = spec.layers * (e * n_in + e * (f + hd) + e) / n + spec.vocab * e / n
    notes = [f"2D weight-stationary on {x} x {yz} chips, {layer_kernels} kernels per layer, "
             f"attention batch-sharded ({math.ceil(batch / n)} sequence(s) per chip)"]
    return Ws2dStep(compute + comm, compute, comm, per_layer, x, yz, w.nbytes(round(per_chip_params)), notes)
