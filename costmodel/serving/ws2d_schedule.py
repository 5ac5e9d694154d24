"""The collectives of one 2D weight-stationary layer and of the per-step stack, in the order Pope et
al.'s released code runs them (POPE-CODE), each timed on the slice's torus.

Parallel layer (``layers/two_d_parallel_xmap.py``, ``_transformer_layer_weight_stationary`` with
``AttnAllToAll.AXES_YZX`` for a decode step, ``NONE`` for a prefill), one chip:

1. ``allgather_layernorm``: the ``B/z x E/xy`` residual **all-gathered over y**, the norm's statistic
   **all-reduced over x**, the norm on ``B/z`` rows, **all-gathered over z** to ``B x E/x``;
2. ``q_wi``: q, gate and up in one matmul with the **reduce-scatter over x looped inside it**
   (:mod:`.ws2d_looped`); ``kv``: K and V in their own matmul on the ``B/yz`` rows the batch-sharded
   attention needs, **reduce-scattered over x** (a prefill: on ``B L / z`` rows, **all-reduced over x**
   and **all-gathered over z**, every chip then holding the whole K/V);
3. ``attn``: q alone **all-to-all** over every chip to batch-sharded (a decode step), the attention,
   its output **all-to-all** back; SwiGLU;
4. ``o_wo``: down and o in one matmul with the **all-gather over x looped inside it**, then a
   **reduce-scatter over y** and one **over z**; the residual add.

Serial layer (``layers/layers_serial.py``, ``transformer_layer_weight_stationary_serial``): each block
gathers as in 1; the input matmul (q, or gate and up) reduce-scatters over x inside it; attention's
all-to-alls run over x, then over yz (and back in the other order); the output matmul's input is
**all-gathered over x** as a plain collective, the **reduce-scatter over y loops inside** the output
matmul, and the **reduce-scatter over z** is a ring of collective-permutes
(``collectives.reducescatter_latency``). The released serial layer cannot compute PaLM's multi-query
K/V as written: its K/V matmul reduce-scatters the one K/V head over x (``matmul_reducescatter`` with
``scatter_axis=1``, a dimension of 1, which the latency form cuts into ``x // 2`` chunks of width 0)
and then reduce-scatters the result over x again; the parallel layer's K/V path (2 above) stands in
for it. Its other branch,
for fewer heads per yz group than x (``B > 1``), is not modelled.

Per step (``embed_unembed_topp`` in ``usage/benchmarks.py``, what ``usage/run_benchmark.py`` adds to
118 x the layer time): the embedding lookup **all-reduced over yz**, the final norm's statistic
**all-reduced over x**, the fp32 logits **reduce-scattered over x**, and for a decode step the
sampling: the logits **all-to-all over yz** (batch padded to ``yz`` rows) and the sampled tokens
**all-gathered over every chip**. One departure: a prefill's final norm and logits run on each
sequence's last token (``B`` rows), what a served prefill needs; the released harness times them on
every prompt token (``run_embed_unembed_topp(h, batch, input_length)`` in ``run_benchmark.py``,
``infer``'s per-token logits), which for PaLM 540B's 2048-token prefill adds a 2048-row fp32 logits
matmul and its reduce-scatter over x (131 MB). The released benchmark harness times the generate stack without
sampling (``sample=False``); ``run_embed_unembed_sweep`` times it with, as a generated token needs.

Decode steps take the looped collectives' latency forms (``latency_collectives=True`` in
``run_benchmark.py`` and the benchmark sweeps). A parallel layer's prefill takes the one-way forms:
with ``latency_collectives=False`` ``two_d_parallel_xmap.py`` always calls
``matmul_reducescatter_oneway`` and ``allgather_matmul_one_way`` (its throughput forms are commented
out; no device-count branch). The branch on ``len(jax.local_devices()) <= 32`` (one-way, else
throughput) is the serial layer's (``layers_serial.py``); ``run_benchmark.py`` asserts 64 local
devices, so a serial prefill takes the throughput forms, as here. Without a part in
``Layout.parts`` a term takes the form the model first had: one op over yz (``split``), K/V columns in
the fused matmul and the all-to-all (``kv``), plain collectives beside the matmuls (``looped``), the head
alone (``stack``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ...ir import Op
from ..execution.collectives import Topology
from .ws2d_graph import Block, Layout, blocks
from .ws2d_looped import (
    Form,
    all_gather_matmul,
    all_gather_permute_bytes,
    loop_steps,
    reduce_scatter_matmul,
    reduce_scatter_permute_bytes,
    ring_reduce_scatter,
)

__all__ = ["Fabric", "Terms", "layer_terms", "stack_terms"]

#: seconds of one ``rows x k`` by ``k x n`` matmul kernel (a looped matmul's chunk)
Matmul = Callable[[int, int, int], float]


@dataclass(frozen=True)
class Fabric:
    """The slice's collectives for a layout: each span (``x``, ``y``, ``z``, ``yz``, ``all``) with its
    device count and, where the layout's axes are whole torus axes, those axes."""

    topology: Topology
    launch: float                                   # one XLA op's fixed cost, paid by every collective
    groups: dict[str, int]
    axes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def coll(self, op: Op, nbytes: float, span: str) -> float:
        group = self.groups[span]
        if group <= 1 or nbytes <= 0:
            return 0.0
        return self.topology.time(op, nbytes, group, axes=self.axes.get(span)).seconds + self.launch

    def permute(self, nbytes: float, span: str) -> float:
        """One collective-permute of ``nbytes`` to the next chip along the span (its own launch)."""
        return self.coll(Op.COLLECTIVE_PERMUTE, nbytes, span)

    def pair(self, nbytes: float, span: str) -> float:
        """Two permutes of ``nbytes`` at once, shifting opposite ways (a bidirectional form's loop
        step): on a torus each runs on its own links, in one permute's time; on a line without
        wraparound every link direction carries a buffer of each (one shift's neighbour send, the
        other's buffer walking back to the far end), so the pair moves twice the bytes per link. A span
        on part of a torus axis is such a line too (:meth:`Topology.wraps`)."""
        wraps = self.topology.wraps(self.groups[span], axes=self.axes.get(span))
        return self.permute(nbytes if wraps else 2 * nbytes, span)


@dataclass
class Terms:
    """Seconds per layer (or per step) by term, and how much of them is kernels (the rest is
    collectives not hidden under a kernel)."""

    terms: dict[str, float] = field(default_factory=dict)
    compute_s: float = 0.0
    looped: list[str] = field(default_factory=list)     # kernels timed in chunks inside a looped term


def layer_terms(lay: Layout, fab: Fabric, kernels: dict[str, float], matmul: Matmul) -> Terms:
    """Every term of one layer: ``kernels`` (the layer graph's kernels outside the looped matmuls),
    then each collective or looped matmul in the order the layer runs them."""
    out = Terms()
    looped = out.looped
    for blk in blocks(lay.spec, "kv" in lay.parts):
        _gathers(lay, fab, blk, out)
        _input_matmul(lay, fab, blk, out, matmul, looped)
        if blk.attention:
            _attention(lay, fab, blk, out)
        _output_side(lay, fab, blk, out, matmul, looped)
    missing = [k for k in looped if k not in kernels]
    assert not missing, f"looped matmuls {missing} are not kernels of the layer graph ({sorted(kernels)})"
    rest = sum(v for k, v in kernels.items() if k not in looped)
    out.terms = {"kernels": rest, **out.terms}
    out.compute_s += rest
    return out


def _form(lay: Layout) -> Form:
    if lay.decode:
        return "latency"
    return "oneway" if lay.spec.parallel_block else "throughput"


def _gathers(lay: Layout, fab: Fabric, blk: Block, out: Terms) -> None:
    p, t, row = blk.name, lay.t, lay.ex * lay.ab
    if "split" in lay.parts:
        out.terms[p + "all-gather y (B/z x E/x)"] = fab.coll(Op.ALL_GATHER, t / lay.z * row, "y")
        out.terms[p + "all-reduce x (norm statistic, B/z rows)"] = fab.coll(
            Op.ALL_REDUCE, t / lay.z * lay.stats * 4, "x")
        out.terms[p + "all-gather z (B x E/x)"] = fab.coll(Op.ALL_GATHER, t * row, "z")
    else:
        out.terms[p + "all-gather yz (B x E/x)"] = fab.coll(Op.ALL_GATHER, t * row, "yz")
        out.terms[p + "all-reduce x (norm statistics)"] = fab.coll(Op.ALL_REDUCE, t * lay.stats * 4, "x")


def _input_matmul(lay: Layout, fab: Fabric, blk: Block, out: Terms, matmul: Matmul, looped: list[str]) -> None:
    cols = math.ceil(blk.n_in / lay.yz)
    nbytes = lay.t * cols * lay.ab
    if "looped" not in lay.parts:
        out.terms[blk.name + "reduce-scatter x (B x in/yz)"] = fab.coll(Op.REDUCE_SCATTER, nbytes, "x")
        return
    form = _form(lay)
    steps = loop_steps(form, lay.x)
    chunk = matmul(lay.t, lay.ex, math.ceil(cols / steps))
    perm_bytes = reduce_scatter_permute_bytes(form, nbytes, lay.x)
    out.terms[blk.name + "w_in, reduce-scatter x looped"] = reduce_scatter_matmul(
        form, chunk, fab.permute(perm_bytes, "x"), lay.x, fab.pair(perm_bytes, "x"))
    out.compute_s += steps * chunk
    looped.append(f"layer_{blk.key}w_in")


def _attention(lay: Layout, fab: Fabric, blk: Block, out: Terms) -> None:
    p, t, ab, kvd = blk.name, lay.t, lay.ab, lay.kvd
    hd = lay.spec.heads * lay.spec.head_dim
    kv_apart = "kv" in lay.parts
    if not lay.decode:
        if kv_apart:
            out.terms[p + "all-reduce x (k, v of B L/z rows)"] = fab.coll(Op.ALL_REDUCE, t / lay.z * kvd * ab, "x")
            out.terms[p + "all-gather z (k, v: B L x 2d)"] = fab.coll(Op.ALL_GATHER, t * kvd * ab, "z")
        else:
            out.terms[p + "all-gather k,v (B L x 2d)"] = fab.coll(Op.ALL_GATHER, t * kvd * ab, "all")
        return
    if kv_apart:
        out.terms[p + "reduce-scatter x (k, v of B/yz rows)"] = fab.coll(
            Op.REDUCE_SCATTER, lay.kv_rows() * kvd * ab, "x")
    q = t * (hd + (0 if kv_apart else kvd)) / lay.n * ab
    o = t * hd / lay.n * ab
    what = "q" if kv_apart else "q,k,v"
    if not lay.spec.parallel_block and "split" in lay.parts:     # layers_serial: over x, then over yz
        out.terms[p + f"all-to-all x ({what} to batch)"] = fab.coll(Op.ALL_TO_ALL, q, "x")
        out.terms[p + f"all-to-all yz ({what} to batch)"] = fab.coll(Op.ALL_TO_ALL, q, "yz")
        out.terms[p + "all-to-all yz (attention out)"] = fab.coll(Op.ALL_TO_ALL, o, "yz")
        out.terms[p + "all-to-all x (attention out)"] = fab.coll(Op.ALL_TO_ALL, o, "x")
    else:
        out.terms[p + f"all-to-all {what} to batch"] = fab.coll(Op.ALL_TO_ALL, q, "all")
        out.terms[p + "all-to-all attention out"] = fab.coll(Op.ALL_TO_ALL, o, "all")


def _output_side(lay: Layout, fab: Fabric, blk: Block, out: Terms, matmul: Matmul, looped: list[str]) -> None:
    p, t, ab, ex = blk.name, lay.t, lay.ab, lay.ex
    k = math.ceil(blk.n_out / lay.yz)
    form = _form(lay)
    serial = not lay.spec.parallel_block
    if "looped" in lay.parts and not serial:
        steps = loop_steps(form, lay.x)
        chunk = matmul(t, math.ceil(k / steps), ex)
        perm_bytes = all_gather_permute_bytes(form, t * math.ceil(blk.n_out / lay.n) * ab)
        out.terms[p + "w_out, all-gather x looped"] = all_gather_matmul(
            form, chunk, fab.permute(perm_bytes, "x"), lay.x, fab.pair(perm_bytes, "x"))
        out.compute_s += steps * chunk
        looped.append(f"layer_{blk.key}w_out")
    else:
        out.terms[p + "all-gather x (B x out/yz)"] = fab.coll(Op.ALL_GATHER, t * k * ab, "x")
    if "split" not in lay.parts:
        out.terms[p + "reduce-scatter yz (B x E/x)"] = fab.coll(Op.REDUCE_SCATTER, t * ex * ab, "yz")
        return
    if "looped" in lay.parts and serial:
        steps = loop_steps(form, lay.y)
        chunk = matmul(t, k, math.ceil(ex / steps))
        perm_bytes = reduce_scatter_permute_bytes(form, t * ex * ab, lay.y)
        out.terms[p + "w_out, reduce-scatter y looped"] = reduce_scatter_matmul(
            form, chunk, fab.permute(perm_bytes, "y"), lay.y, fab.pair(perm_bytes, "y"))
        out.compute_s += steps * chunk
        looped.append(f"layer_{blk.key}w_out")
        z_bytes = reduce_scatter_permute_bytes(form, t * ex / lay.y * ab, lay.z)
        out.terms[p + "reduce-scatter z (B x E/xy, permutes)"] = ring_reduce_scatter(
            form, fab.permute(z_bytes, "z"), lay.z, fab.pair(z_bytes, "z"))
        return
    out.terms[p + "reduce-scatter y (B x E/x)"] = fab.coll(Op.REDUCE_SCATTER, t * ex * ab, "y")
    out.terms[p + "reduce-scatter z (B x E/xy)"] = fab.coll(Op.REDUCE_SCATTER, t * ex / lay.y * ab, "z")


def stack_terms(lay: Layout, fab: Fabric, kernels_s: float) -> Terms:
    """The per-step terms outside the layers: the stack graph's kernels and the collectives around them."""
    b, ab, ex = lay.batch, lay.ab, lay.ex
    vyz = math.ceil(lay.spec.vocab / lay.yz)
    out = Terms({"kernels": kernels_s}, kernels_s)
    if "stack" not in lay.parts:
        out.terms["head: all-gather yz (B x E/x)"] = fab.coll(Op.ALL_GATHER, b * ex * ab, "yz")
        out.terms["head: reduce-scatter x (logits)"] = fab.coll(Op.REDUCE_SCATTER, b * vyz * ab, "x")
        return out
    out.terms["embedding: all-reduce yz (B x E/x)"] = fab.coll(Op.ALL_REDUCE, lay.t * ex * ab, "yz")
    out.terms["final norm: all-reduce x (statistic)"] = fab.coll(Op.ALL_REDUCE, b * lay.stats * 4, "x")
    out.terms["logits: reduce-scatter x (fp32)"] = fab.coll(Op.REDUCE_SCATTER, b * vyz * 4, "x")
    if lay.decode:
        rows = max(math.ceil(b / lay.x), lay.yz)        # padded to one row per yz chip
        out.terms["sampling: all-to-all yz (logits)"] = fab.coll(Op.ALL_TO_ALL, rows * vyz * 4, "yz")
        out.terms["sampling: all-gather tokens"] = fab.coll(Op.ALL_GATHER, b * 4, "all")
    return out
