"""Pope et al.'s 2D weight-stationary decode layout on a TPU torus (Efficiently Scaling Transformer
Inference, 2022, section 3.2.2 and figure 3), with multi-query attention sharded over the batch, on
the schedule of the paper's released code (google-research ``scaling_transformer_inference_efficiency``,
POPE-CODE in backends/catalog/SOURCES.toml).

``n = x * y * z`` chips hold every weight matrix as an ``E/x`` by ``F/yz`` block (E: d_model over the
``x`` axis; F: the MLP width, and the attention heads, over the ``y`` and ``z`` axes), so no chip ever
holds a whole row or column and the traffic per chip falls as ``1 / sqrt(n)``. The residual stream
is ``B/z x E/xy`` on each chip. One layer (:mod:`.ws2d_schedule` has the order and the released
functions each step comes from):

1. the residual **all-gathered over y**, the norm's statistic **all-reduced over x**, the norm on
   ``B/z`` rows, **all-gathered over z** to ``B x E/x``;
2. q, gate and up in one matmul whose **reduce-scatter over x runs inside it** (Looped
   CollectiveEinsum, :mod:`.ws2d_looped`); K and V in their own matmul on ``B/yz`` rows,
   **reduce-scattered over x** to the ``B/n`` sequences each chip attends;
3. q **all-to-all** from head- to batch-sharded, rotary embeddings on q and the new k (PaLM's RoPE,
   Chowdhery et al. 2022, section 2), attention over only those sequences' cache (multi-query: one
   K/V head, so the cache splits by batch), the output **all-to-all** back; SwiGLU on the ``F/n`` slice;
4. down and o in one matmul whose **all-gather over x runs inside it**; a **reduce-scatter over y**,
   one **over z**; the residual add.

A **prefill** (:func:`ws2d_prefill`, the paper's low-latency rows: batch 1, table 2) runs the same
layer over ``B x L`` token rows with attention **sharded over heads** (section 3.3): K and V on the
``B L / z`` rows are **all-reduced over x** and **all-gathered over z**, so every chip holds them,
each chip keeps its ``H/n`` query heads from the reduce-scatter; no all-to-alls; its looped
collectives take the one-way forms. A **serial** layer (``parallel_block=False``) runs two blocks,
each with its own norm, gathers and scatters, as ``layers_serial.py`` does: the layout Pope et al.
compare PaLM's parallel block against (section 4.3: 14% slower per decode step at batch 512).

Each step adds the stack outside the layers (the embedding lookup and its all-reduce, the final
norm, fp32 logits from a bf16 embedding table, the sampling of a decode step). Every compute term is
a per-chip IR graph timed by the TPU execution model (:mod:`.ws2d_graph`), every collective is timed
on the system's torus or mesh by :class:`~narrowpipe.costmodel.execution.collectives.Topology` (``x``,
``y``, ``z`` on whole torus axes, :func:`ws2d_torus_axes`); a chunk of a looped matmul and the
collective-permute beside it overlap, nothing else does. ``parts`` (all of :data:`RELEASED` by
default) switches each of the released schedule's four departures from the layout as first modelled
back off, for the ablation in ``benchmarks/pope_schedule.py``: ``split`` (one op over yz), ``kv`` (K/V
in the fused matmul and the all-to-all), ``looped`` (plain collectives), ``stack`` (the head alone).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from ...backends import Target
from ...errors import NarrowpipeError
from ...ir import DType
from ...models.spec import TransformerSpec
from ..execution import TimingOptions
from ..execution.collectives import Topology
from .ws2d_graph import Layout, blocks, kernels_s, layer_graph, matmul_graph, stack_graph
from .ws2d_schedule import Fabric, layer_terms, stack_terms

__all__ = ["Ws2dStep", "ws2d_decode", "ws2d_prefill", "ws2d_axes", "ws2d_torus_axes", "RELEASED"]

#: The released implementation's four departures from the layout as first modelled (module doc).
RELEASED = frozenset({"split", "kv", "looped", "stack"})


@dataclass(frozen=True)
class Ws2dStep:
    """One decode step (or prefill) in the 2D weight-stationary layout: times per part, whole model."""

    time_s: float
    compute_s: float              # the kernels, as the TPU model times them (memory-bound ones included)
    collectives_s: float          # the collectives' time not hidden under a looped matmul's chunks
    per_layer: dict[str, float]   # seconds per layer: the other kernels, each collective, each looped matmul
    x: int
    yz: int
    weight_bytes_per_chip: float
    notes: list[str] = field(default_factory=list)
    #: seconds per layer by kernel, each timed whole (a looped matmul's chunks are timed in its term)
    layer_kernels: dict[str, float] = field(default_factory=dict)
    #: each kernel's (compute, memory) seconds before the roofline takes their max: what an analysis
    #: of overlap needs (benchmarks/pope_pair.py)
    layer_terms: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: seconds per step outside the layers: the stack's kernels and its collectives
    per_step: dict[str, float] = field(default_factory=dict)
    y: int = 0
    z: int = 0
    #: the layer_kernels a looped term runs in chunks (not in ``per_layer["kernels"]``)
    looped_kernels: tuple[str, ...] = ()

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


def _fabric(topology: Topology, target: Target, x: int, yz: int) -> tuple[Fabric, int, int]:
    """The layout's spans on the slice and the sizes of y and z. ``y`` is the longest of the yz torus
    axes, ``z`` the rest (the released ``get_3d_mesh``: 16 chips as x, y, z = 2, 4, 2). Where the
    axes are not whole torus axes the y/z split is unknown: y is all of yz, z is 1."""
    split = ws2d_torus_axes(topology.scale_up.torus_dims, x, yz) if topology.torus else None
    groups = {"x": x, "yz": yz, "all": x * yz}
    if split is None:
        return Fabric(topology, target.launch_overhead, groups | {"y": yz, "z": 1}), yz, 1
    xa, yza = split
    ya = (max(yza),) if yza else ()
    za = tuple(yza[:yza.index(ya[0])] + yza[yza.index(ya[0]) + 1:]) if ya else ()
    y, z = math.prod(ya), math.prod(za)
    axes = {"x": xa, "y": ya, "z": za, "yz": yza, "all": topology.scale_up.torus_dims}
    return Fabric(topology, target.launch_overhead, groups | {"y": y, "z": z}, axes), y, z


def ws2d_decode(spec: TransformerSpec, target: Target, topology: Topology, chips: int, *, batch: int,
                context: int, weights: DType | None = None, activations: DType | None = None,
                kv: DType | None = None, axes: tuple[int, int] | None = None,
                options: TimingOptions | None = None, parts: frozenset[str] = RELEASED) -> Ws2dStep:
    """One decode step of ``batch`` sequences at ``context`` on ``chips`` chips (see the module doc)."""
    return _step(spec, target, topology, chips, batch, 1, context, weights, activations, kv, axes, options, parts)


def ws2d_prefill(spec: TransformerSpec, target: Target, topology: Topology, chips: int, *, batch: int,
                 seq: int, weights: DType | None = None, activations: DType | None = None,
                 kv: DType | None = None, axes: tuple[int, int] | None = None,
                 options: TimingOptions | None = None, parts: frozenset[str] = RELEASED) -> Ws2dStep:
    """The prefill of ``batch`` prompts of ``seq`` tokens, attention sharded over heads (module doc)."""
    if seq < 2:
        raise NarrowpipeError(f"a prefill needs prompts of 2 tokens or more, not {seq}")
    return _step(spec, target, topology, chips, batch, seq, 0, weights, activations, kv, axes, options, parts)


def _step(spec: TransformerSpec, target: Target, topology: Topology, chips: int, batch: int, seq: int,
          context: int, weights: DType | None, activations: DType | None, kv: DType | None,
          axes: tuple[int, int] | None, options: TimingOptions | None, parts: frozenset[str]) -> Ws2dStep:
    if target.family != "tpu":
        raise NarrowpipeError(f"the 2D weight-stationary layout is modelled for TPU tori, not {target.family}")
    unknown = set(parts) - RELEASED
    if unknown:
        raise NarrowpipeError(f"unknown parts of the released schedule: {sorted(unknown)} (known: {sorted(RELEASED)})")
    x, yz = axes or ws2d_axes(chips, spec.hidden, spec.ffn)
    if x * yz != chips:
        raise NarrowpipeError(f"2D weight-stationary axes {x} x {yz} are not {chips} chips")
    n = x * yz
    if seq > 1 and spec.heads % n:
        raise NarrowpipeError(f"head-sharded prefill attention needs the {spec.heads} heads to split over "
                              f"{n} chips (Pope et al. pad PaLM 540B's 48 heads to 64 for this)")
    fab, y, z = _fabric(topology, target, x, yz)
    w, a = weights or spec.dtype, activations or spec.dtype
    lay = Layout(spec, batch, seq, context, x, y, z, w, a, kv or a, frozenset(parts))
    opts = options or TimingOptions()
    _, layer_kernels, kernel_terms = kernels_s(layer_graph(lay), target, opts)

    @cache
    def matmul(rows: int, k: int, cols: int) -> float:
        return kernels_s(matmul_graph(rows, k, cols, w, a), target, opts)[0]

    layer = layer_terms(lay, fab, layer_kernels, matmul)
    stack = stack_terms(lay, fab, kernels_s(stack_graph(lay), target, opts)[0])
    layer_s, step_s = sum(layer.terms.values()), sum(stack.terms.values())
    compute = spec.layers * layer.compute_s + stack.compute_s
    total = spec.layers * layer_s + step_s
    return Ws2dStep(total, compute, total - compute, layer.terms, x, yz, _weight_bytes(lay),
                    _notes(lay, len(layer_kernels)), layer_kernels, kernel_terms, stack.terms, y, z,
                    tuple(layer.looped))


def _weight_bytes(lay: Layout) -> float:
    """Bytes of weights one chip holds: its ``E/x x F/yz`` blocks and a share of each norm, the K/V
    matrix whole over yz where it is apart (the released ``params.kv`` is split over x only), the
    embedding's ``V/yz x E/x`` slice (bf16 with the released stack, as ``checkpoint.py`` keeps it)."""
    spec, e = lay.spec, lay.spec.hidden
    per_layer = sum(e * (blk.n_in + blk.n_out + 1) for blk in blocks(spec, "kv" in lay.parts)) / lay.n
    layer_bytes = lay.w.nbytes(round(spec.layers * per_layer))
    if "kv" in lay.parts:
        layer_bytes += lay.w.nbytes(spec.layers * lay.ex * lay.kvd)
    table = (DType.BF16 if "stack" in lay.parts else lay.w).nbytes(round(spec.vocab * e / lay.n))
    return float(layer_bytes + table)


def _notes(lay: Layout, kernels: int) -> list[str]:
    spec = lay.spec
    attention = (f"attention batch-sharded ({math.ceil(lay.batch / lay.n)} sequence(s) per chip)" if lay.decode
                 else f"attention head-sharded ({spec.heads // lay.n} head(s) per chip, K/V gathered)")
    block = "parallel block" if spec.parallel_block else "serial attention and MLP blocks"
    schedule = ("the released schedule" if lay.parts == RELEASED
                else f"released parts: {', '.join(sorted(lay.parts)) or 'none'}")
    return [f"2D weight-stationary on {lay.x} x {lay.yz} chips (y {lay.y}, z {lay.z}), {block}, {kernels} kernels "
            f"per layer, {attention}, {schedule}"]
