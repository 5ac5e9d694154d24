"""What one chip computes in the 2D weight-stationary layout: the per-chip kernels of one layer and of
the per-step stack, as IR graphs timed by the TPU execution model (MXU padding, per-kernel overhead).

Collective boundaries start new graph inputs, so a graph holds only one chip's compute. The shapes
follow the released layer (``layers/two_d_parallel_xmap.py``, ``layers/layers_serial.py`` in
POPE-CODE) where :class:`Layout` switches its parts on (``ws2d.RELEASED``), else the layout as
first modelled (the ablation in ``benchmarks/pope_schedule.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...backends import Target
from ...ir import IN_PLACE, DType, Graph, Op, Value
from ...models.blocks import activation, apply_rotary
from ...models.graph_builder import GraphBuilder
from ...models.spec import TransformerSpec
from ..execution import DeviceGroup, TimingOptions
from ..interpreter import interpret
from ..timing import fused_program, time_program

__all__ = ["Layout", "Block", "blocks", "layer_graph", "stack_graph", "matmul_graph", "kernels_s"]


@dataclass(frozen=True)
class Layout:
    """One step of the layout on ``x * y * z`` chips: ``x`` splits E, ``y`` and ``z`` (together yz)
    split F and the heads; ``b x seq`` token rows (``seq == 1``: a decode step against ``ctx`` cached
    tokens); ``parts``: which of the released schedule's parts apply."""

    spec: TransformerSpec
    batch: int
    seq: int
    ctx: int
    x: int
    y: int
    z: int
    w: DType
    a: DType
    kv: DType
    parts: frozenset[str]

    @property
    def yz(self) -> int:
        return self.y * self.z

    @property
    def n(self) -> int:
        return self.x * self.y * self.z

    @property
    def t(self) -> int:
        return self.batch * self.seq

    @property
    def decode(self) -> bool:
        return self.seq == 1

    @property
    def ab(self) -> float:
        return self.a.nbytes(1000) / 1000

    @property
    def ex(self) -> int:
        return math.ceil(self.spec.hidden / self.x)

    @property
    def kvd(self) -> int:
        return 2 * self.spec.kv_heads * self.spec.head_dim

    @property
    def stats(self) -> int:
        """fp32 statistics per row a norm all-reduces over x: mean and mean square for a layer norm,
        the mean square alone for an RMS norm (the released ``allgather_layernorm``)."""
        return 2 if self.spec.norm == "layer" else 1

    def norm_rows(self) -> int:
        """Rows the norm runs on: ``B/z`` once the yz gather is split (the released layer normalises
        between its y and z gathers), else all ``B``."""
        return math.ceil(self.t / self.z) if "split" in self.parts else self.t

    def kv_rows(self) -> int:
        """Rows of the separate K/V matmul: the ``B/yz`` sequences the batch-sharded attention of a
        decode step needs (``xnorm`` sliced by the yz index), the ``B L / z`` rows of ``xnorm_z`` in
        a prefill."""
        return math.ceil(self.t / self.yz) if self.decode else math.ceil(self.t / self.z)


@dataclass(frozen=True)
class Block:
    """One weight-stationary block: norm, input matmul, its middle, output matmul, residual. PaLM's
    parallel layer is one block (attention and MLP share the norm and the fused matmuls, Pope et al.
    section 3.4); a serial layer is two, each with its own gathers and scatters."""

    name: str         # prefix of its terms: "" for a parallel layer, "attention " / "mlp " for a serial one
    n_in: int         # columns of the input matmul, before the yz split
    n_out: int        # rows of the output matmul
    attention: bool
    mlp: bool

    @property
    def key(self) -> str:
        """Its kernels' prefix: "" or "attention_" / "mlp_"."""
        return self.name.strip().replace(" ", "_") + "_" if self.name else ""


def blocks(spec: TransformerSpec, kv_apart: bool) -> list[Block]:
    """The layer's blocks; ``kv_apart``: K and V have their own matmul (the released layer's
    ``params.kv``), not columns of the fused input matmul."""
    hd = spec.heads * spec.head_dim
    kvd = 0 if kv_apart else 2 * spec.kv_heads * spec.head_dim
    f_in = (2 if spec.gated_mlp else 1) * spec.ffn
    if spec.parallel_block:
        return [Block("", f_in + hd + kvd, spec.ffn + hd, True, True)]
    return [Block("attention ", hd + kvd, hd, True, False), Block("mlp ", f_in, spec.ffn, False, True)]


def layer_graph(lay: Layout) -> Graph:
    """The compute of one layer on one chip; every matmul whole (the looped terms time their chunks)."""
    g = Graph("ws2d_layer")
    bld = GraphBuilder(g, lay.a)
    spec = lay.spec
    with bld.scope("layer"):
        h = bld.input("h", (lay.t, math.ceil(spec.hidden / lay.n)), lay.a)
        # the step's rotary tables (its seq new positions), computed once for every layer
        rope = ((bld.input("rope_cos", (lay.seq, spec.head_dim), lay.a),
                 bld.input("rope_sin", (lay.seq, spec.head_dim), lay.a)) if spec.positions == "rotary" else None)
        for blk in blocks(spec, "kv" in lay.parts):
            h = _block(bld, lay, blk, h, rope)
    g.set_outputs([v for node in g.nodes for v in node.outputs if not any(True for _ in v.uses)] + [h])
    return g


def _block(bld: GraphBuilder, lay: Layout, blk: Block, h: Value, rope: tuple[Value, Value] | None) -> Value:
    spec, a, w = lay.spec, lay.a, lay.w
    t, n, ex = lay.t, lay.n, lay.ex
    p = blk.key
    gathered = bld.input(p + "gathered", (lay.norm_rows(), ex), a)
    norm_w = bld.weight(p + "norm", (ex,), dtype=w)
    normed = bld.emit(Op.LAYER_NORM if spec.norm == "layer" else Op.RMS_NORM, [gathered, norm_w],
                      gathered.shape, {"axis": 1, "eps": 1e-6}, name=p + "norm")
    x_in = bld.input(p + "gathered_z", (t, ex), a) if "split" in lay.parts else normed
    bld.dot(x_in, bld.weight(p + "w_in", (math.ceil(blk.n_in / lay.yz), ex), dtype=w), name=p + "w_in")
    if blk.attention and "kv" in lay.parts:
        # K and V on their own rows (released: einsum of xnorm_sliced / xnorm_z with params.kv)
        rows = lay.kv_rows()
        kv_in = normed if not lay.decode and "split" in lay.parts else bld.input(p + "kv_rows", (rows, ex), a)
        bld.dot(kv_in, bld.weight(p + "w_kv", (lay.kvd, ex), dtype=w), name=p + "kv")
    if blk.mlp:
        part = bld.input(p + "scattered_x", (t, math.ceil(spec.ffn / n)), a)
        act = activation(bld, spec.activation, part)
        if spec.gated_mlp:
            bld.binary(Op.MUL, act, bld.input(p + "up", (t, math.ceil(spec.ffn / n)), a), name=p + "glu")
    if blk.attention:
        _attention(bld, lay, p, rope)
    back = bld.input(p + "gathered_x", (t, math.ceil(blk.n_out / lay.yz)), a)
    bld.dot(back, bld.weight(p + "w_out", (ex, math.ceil(blk.n_out / lay.yz)), dtype=w), name=p + "w_out")
    out = bld.input(p + "scattered_yz", (t, math.ceil(spec.hidden / n)), a)
    return bld.binary(Op.ADD, h, out, name=p + "residual")


def _attention(bld: GraphBuilder, lay: Layout, p: str, rope: tuple[Value, Value] | None) -> None:
    spec, a, kv = lay.spec, lay.a, lay.kv
    b, seq, ctx, n, d = lay.batch, lay.seq, lay.ctx, lay.n, spec.head_dim
    attn = {"layout": "bhsd", "causal": True, "scale": 1 / math.sqrt(d), "enable_gqa": True}
    if lay.decode:
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


def matmul_graph(rows: int, k: int, n: int, w: DType, a: DType, name: str = "chunk") -> Graph:
    """One ``rows x k`` by ``k x n`` matmul on one chip: a chunk of a looped collective matmul."""
    g = Graph("ws2d_matmul")
    bld = GraphBuilder(g, a)
    g.set_outputs([bld.dot(bld.input("lhs", (rows, k), a), bld.weight("w", (n, k), dtype=w), name=name)])
    return g


def stack_graph(lay: Layout) -> Graph:
    """The per-step compute outside the layers, on one chip. Released (``embed_unembed_topp`` in
    ``usage/benchmarks.py``): the embedding rows looked up in the chip's ``V/yz x E/x`` slice of the
    table, the final norm, the logits from the table (bf16 whatever the layers' format: int8
    checkpoints keep the embedding in bf16, ``checkpoint.py``) written in fp32, and for a decode
    step the sampling: Gumbel noise added to the chip's rows of logits over the whole vocabulary and
    their argmax (``jax.random.categorical``; the noise's generation not costed). Otherwise the head
    alone: one matmul of the last tokens against the ``V/yz`` slice in the layers' format."""
    spec, a = lay.spec, lay.a
    g = Graph("ws2d_stack")
    bld = GraphBuilder(g, a)
    b, ex, vyz = lay.batch, lay.ex, math.ceil(spec.vocab / lay.yz)
    outs: list[Value] = []
    if "stack" not in lay.parts:
        hid = bld.input("gathered", (b, ex), a)
        g.set_outputs([bld.dot(hid, bld.weight("lm_head", (vyz, ex), dtype=lay.w), name="lm_head")])
        return g
    table = bld.weight("embedding", (vyz, ex), dtype=DType.BF16)
    ids = bld.input("tokens", (lay.t,), DType.INT32)
    outs.append(bld.emit(Op.GATHER, [table, ids], (lay.t, ex), {"axis": 0}, name="embedding"))
    h = bld.input("final", (b, ex), a)                  # the last token of each sequence
    normed = bld.emit(Op.LAYER_NORM if spec.norm == "layer" else Op.RMS_NORM, [h, bld.weight("norm", (ex,))],
                      h.shape, {"axis": 1, "eps": 1e-6}, name="final_norm")
    outs.append(bld.emit(Op.DOT, [normed, table], (b, vyz), {"lhs_contract": (1,), "rhs_contract": (1,),
                                                             "lhs_batch": (), "rhs_batch": ()},
                         name="logits", dtype=DType.FP32))
    if lay.decode:
        rows = max(math.ceil(b / lay.n), 1)             # after the logits' all-to-all over yz
        logits = bld.input("logits_batch", (rows, spec.vocab), DType.FP32)
        noisy = bld.binary(Op.ADD, logits, bld.input("gumbel", (rows, spec.vocab), DType.FP32), name="gumbel")
        outs.append(bld.emit(Op.ARGMAX, [noisy], (rows,), {"axis": 1}, name="sample", dtype=DType.INT32))
    g.set_outputs(outs)
    return g


def kernels_s(graph: Graph, target: Target, options: TimingOptions
              ) -> tuple[float, dict[str, float], dict[str, tuple[float, float]]]:
    """Total seconds of the graph's kernels on one chip, each launched kernel's seconds, and each
    one's (compute, memory) terms."""
    program = fused_program(interpret(graph, {}), target, options)
    schedule = time_program(program, DeviceGroup(target, 1))
    launched = [(k.name, kt) for k, kt in zip(program.kernels, schedule.times) if not k.is_free]
    return (schedule.total_s, {n: kt.time_s for n, kt in launched},
            {n: (kt.compute_s, kt.memory_s) for n, kt in launched})
