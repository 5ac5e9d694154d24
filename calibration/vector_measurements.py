"""Per-kernel measurements of the non-GEMM classes (norms, elementwise, fused attention) as graphs.

Why its own module: a GEMM or convolution row is one op, but a measured norm or activation is
either one fused kernel (a hand-written Triton/CUDA kernel: Liger's, Apex's) or the sequence of
ATen kernels eager PyTorch launches for the same math (HF's ``LlamaRMSNorm`` is eight). The row's
``algo`` column says which, and the graph built here is that structure, timed by the same
execution model as any program:

* ``fused``: one kernel reading its inputs and writing its outputs once, whatever the fusion pass
  would make of the graph (:func:`one_kernel_program`: the row says the library ran one kernel);
* ``eager``: one kernel per ATen op (``fusion="none"``), each reading and writing its own operands;
* ``add+fused``: an eager residual add, the fused RMSNorm, then an eager scale by the weight
  (Liger's benchmark provider ``liger_rms_norm`` of its fused-add-RMSNorm benchmark).

Shapes (``key=value`` words of the ``shape`` column):

* ``rms_norm``, ``layer_norm``, ``add_rms_norm``, ``relu_squared``: ``m n`` (rows, hidden);
* ``group_norm``: ``n c hw g`` (batch, channels, positions, groups);
* ``rope``: ``b s hq hkv d`` (batch, positions, query and key heads, head dim): rotary embedding of
  q and k with cos and sin tables of ``s x d``;
* ``attention``: ``b h s d causal`` (batch, heads, sequence, head dim, 1 for a causal mask): one
  fused attention forward (FlashAttention style, ``fused``), the ``ATTENTION`` op the frontends emit.

The weights of the HF/Liger RMSNorm modules are fp32 parameters whatever the input dtype (the
benchmark builds them with ``torch.ones`` and never casts them), so the eager scale by the weight
promotes a bf16 input to an fp32 output, as torch's type promotion does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..costmodel.cost import Cost
from ..costmodel.execution import Program, TimingOptions
from ..costmodel.interpreter import CostTable
from ..costmodel.kernels import Kernel
from ..errors import NarrowpipeError
from ..ir import VIEW_OPS, DType, Graph, Op, OpGroup, TensorType, Value, ValueKind
from ..ir.attention import CAUSAL

if TYPE_CHECKING:
    from .kernel_measurements import KernelMeasurement

__all__ = ["VECTOR_KINDS", "SHAPE_KEYS", "STRUCTURES", "vector_graph", "fusion_mode", "check_vector_row",
           "one_kernel_program"]

SHAPE_KEYS: Mapping[str, tuple[str, ...]] = {
    "rms_norm": ("m", "n"), "layer_norm": ("m", "n"), "add_rms_norm": ("m", "n"), "relu_squared": ("m", "n"),
    "group_norm": ("n", "c", "hw", "g"), "rope": ("b", "s", "hq", "hkv", "d"),
    "attention": ("b", "h", "s", "d", "causal"),
}
VECTOR_KINDS = tuple(SHAPE_KEYS)
#: the kernel structures a row may name (``algo``), per kind
STRUCTURES: Mapping[str, tuple[str, ...]] = {
    "rms_norm": ("fused", "eager"), "layer_norm": ("fused",), "add_rms_norm": ("fused", "eager", "add+fused"),
    "relu_squared": ("fused", "eager"), "group_norm": ("fused", "eager"), "rope": ("fused", "eager"),
    "attention": ("fused",),
}
_FP32 = DType.FP32


def check_vector_row(kind: str, shape: Mapping[str, int], algo: str, where: str) -> None:
    """A clear error for a row whose structure or shape this module cannot build."""
    if algo not in STRUCTURES[kind]:
        raise NarrowpipeError(f"{where}: a {kind} row's algo must be one of {', '.join(STRUCTURES[kind])}, "
                              f"got {algo!r}")
    if kind == "attention" and shape["causal"] not in (0, 1):
        raise NarrowpipeError(f"{where}: attention's causal must be 0 or 1, got {shape['causal']}")
    if kind == "group_norm" and shape["c"] % shape["g"]:
        raise NarrowpipeError(f"{where}: {shape['c']} channels do not split into {shape['g']} groups")


def fusion_mode(m: KernelMeasurement) -> str | None:
    """``none`` for the eager structures (one kernel per op), ``one`` for a fused row (one kernel:
    :func:`one_kernel_program`), else None (the family's default)."""
    if m.kind not in SHAPE_KEYS or m.kind == "attention":   # attention: the GPU model's fused kernel
        return None
    return "one" if m.algo == "fused" else "none"


def one_kernel_program(table: CostTable, options: TimingOptions) -> Program:
    """The whole graph as one kernel: its work summed, its traffic the graph's inputs and weights
    read once and its outputs written once (a hand-written kernel keeps everything else on chip)."""
    graph = table.graph
    nodes = [n for n in graph.nodes if n.op not in VIEW_OPS]
    work = Cost()
    for n in nodes:
        work = work + table.costs[n]
    read = sum(v.type.dtype.nbytes(math.prod(table.shapes[v])) for v in [*graph.inputs, *graph.weights])
    written = sum(v.type.dtype.nbytes(math.prod(table.shapes[v])) for v in graph.outputs)
    anchor = next((n for n in nodes if n.group is OpGroup.NORMALIZATION), nodes[0])
    kind = "normalization" if anchor.group is OpGroup.NORMALIZATION else "elementwise"
    kernel = Kernel(anchor.name, kind, nodes, anchor, Cost(work.flops, work.transcendentals, read, written),
                    [*graph.inputs, *graph.weights], list(graph.outputs))
    return Program([kernel], table, options)


def vector_graph(m: KernelMeasurement, dtype: DType) -> Graph:
    """The graph of a measured norm or elementwise kernel (or eager kernel sequence)."""
    g = Graph(f"{m.kind} {m.algo} {m.shape_text}")
    s = m.shape
    outs = _BUILDERS[m.kind](g, s, dtype, m.algo)
    g.set_outputs(outs)
    return g


def _rms_chain(g: Graph, x: Value, w: Value, dt: DType, rows: int, n: int) -> list[Value]:
    """HF's ``LlamaRMSNorm.forward`` op by op: to fp32, pow 2, mean, + eps, rsqrt, multiply, back to
    the input dtype, times the fp32 weight (an fp32 result)."""
    h = x
    if dt != _FP32:
        h = g.add_node(Op.CAST, [x], [TensorType(_FP32, (rows, n))], {"dtype": _FP32}).outputs[0]
    sq = g.add_node(Op.SQUARE, [h], [TensorType(_FP32, (rows, n))]).outputs[0]
    var = g.add_node(Op.REDUCE_MEAN, [sq], [TensorType(_FP32, (rows, 1))], {"axes": (1,), "keepdims": True}).outputs[0]
    var = g.add_node(Op.ADD, [var, None], [TensorType(_FP32, (rows, 1))]).outputs[0]
    r = g.add_node(Op.RSQRT, [var], [TensorType(_FP32, (rows, 1))]).outputs[0]
    y = g.add_node(Op.MUL, [h, r], [TensorType(_FP32, (rows, n))]).outputs[0]
    if dt != _FP32:
        y = g.add_node(Op.CAST, [y], [TensorType(dt, (rows, n))], {"dtype": dt}).outputs[0]
    return g.add_node(Op.MUL, [y, w], [TensorType(_FP32, (rows, n))]).outputs


def _fused_rms(g: Graph, x: Value, w: Value, dt: DType, rows: int, n: int) -> list[Value]:
    """Liger's RMSNorm kernel: reads x and the weight, writes y (the input dtype) and 1/rms per row."""
    node = g.add_node(Op.RMS_NORM, [x, w], [TensorType(dt, (rows, n)), TensorType(_FP32, (rows,))],
                      {"axis": 1, "eps": 1e-6})
    return list(node.outputs)


def _rms_norm(g: Graph, s: Mapping[str, int], dt: DType, algo: str) -> list[Value]:
    rows, n = s["m"], s["n"]
    x = g.add_input("x", TensorType(dt, (rows, n)))
    w = g.add_input("weight", TensorType(_FP32, (n,)), ValueKind.PARAM)
    return _fused_rms(g, x, w, dt, rows, n) if algo == "fused" else _rms_chain(g, x, w, dt, rows, n)


def _add_rms_norm(g: Graph, s: Mapping[str, int], dt: DType, algo: str) -> list[Value]:
    """Residual add then RMSNorm; the sum is returned too (the next block's residual)."""
    rows, n = s["m"], s["n"]
    x = g.add_input("x", TensorType(dt, (rows, n)))
    res = g.add_input("residual", TensorType(dt, (rows, n)))
    w = g.add_input("weight", TensorType(_FP32, (n,)), ValueKind.PARAM)
    h = g.add_node(Op.ADD, [x, res], [TensorType(dt, (rows, n))]).outputs[0]
    if algo == "eager":
        return [h, *_rms_chain(g, h, w, dt, rows, n)]
    if algo == "fused":
        return [h, *_fused_rms(g, h, w, dt, rows, n)]
    ones = g.add_input("liger_weight", TensorType(_FP32, (n,)), ValueKind.PARAM)
    y = _fused_rms(g, h, ones, dt, rows, n)[0]
    return [h, g.add_node(Op.MUL, [y, w], [TensorType(_FP32, (rows, n))]).outputs[0]]


def _layer_norm(g: Graph, s: Mapping[str, int], dt: DType, algo: str) -> list[Value]:
    """One kernel (Liger's, and ATen's ``native_layer_norm``): y, and the mean and 1/std per row."""
    rows, n = s["m"], s["n"]
    x = g.add_input("x", TensorType(dt, (rows, n)))
    w = g.add_input("weight", TensorType(dt, (n,)), ValueKind.PARAM)
    b = g.add_input("bias", TensorType(dt, (n,)), ValueKind.PARAM)
    node = g.add_node(Op.LAYER_NORM, [x, w, b], [TensorType(dt, (rows, n)), TensorType(_FP32, (rows,)),
                                                  TensorType(_FP32, (rows,))], {"axis": 1, "eps": 1e-6})
    return list(node.outputs)


def _relu_squared(g: Graph, s: Mapping[str, int], dt: DType, algo: str) -> list[Value]:
    """relu then square: one kernel fused, two eager."""
    t = TensorType(dt, (s["m"], s["n"]))
    x = g.add_input("x", t)
    r = g.add_node(Op.RELU, [x], [t]).outputs[0]
    return g.add_node(Op.SQUARE, [r], [t]).outputs


def _group_norm(g: Graph, s: Mapping[str, int], dt: DType, algo: str) -> list[Value]:
    """Fused: one kernel per (sample, group) tile (Liger's). Eager: ATen's three kernels: the
    per-group moments (reads x), the per-channel scale and shift (tiny), and the normalize-and-affine
    pass (reads x again, writes y; its per-channel shift is 1/hw of the traffic and not counted)."""
    n, c, hw, groups = s["n"], s["c"], s["hw"], s["g"]
    t = TensorType(dt, (n, c, hw))
    x = g.add_input("x", t)
    w = g.add_input("weight", TensorType(dt, (c,)), ValueKind.PARAM)
    b = g.add_input("bias", TensorType(dt, (c,)), ValueKind.PARAM)
    if algo == "fused":
        node = g.add_node(Op.GROUP_NORM, [x, w, b], [t, TensorType(_FP32, (n, groups)), TensorType(_FP32, (n, groups))],
                          {"num_groups": groups, "eps": 1e-6})
        return list(node.outputs)
    xg = g.add_node(Op.RESHAPE, [x], [TensorType(dt, (n * groups, c // groups * hw))]).outputs[0]
    stats = g.add_node(Op.REDUCE_VAR, [xg], [TensorType(_FP32, (n * groups, 1))],
                       {"axes": (1,), "keepdims": True}).outputs[0]
    per_group = g.add_node(Op.RESHAPE, [stats], [TensorType(_FP32, (n, groups, 1))]).outputs[0]
    per_channel = g.add_node(Op.EXPAND, [per_group], [TensorType(_FP32, (n, groups, c // groups))]).outputs[0]
    per_channel = g.add_node(Op.RESHAPE, [per_channel], [TensorType(_FP32, (n, c, 1))]).outputs[0]
    wc = g.add_node(Op.RESHAPE, [w], [TensorType(dt, (c, 1))]).outputs[0]
    scale = g.add_node(Op.MUL, [per_channel, wc], [TensorType(_FP32, (n, c, 1))]).outputs[0]
    return g.add_node(Op.MUL, [x, scale], [t]).outputs


def _rope(g: Graph, s: Mapping[str, int], dt: DType, algo: str) -> list[Value]:
    """``q * cos + rotate_half(q) * sin`` for q and k. Eager (HF's ``apply_rotary_pos_emb``): per
    tensor a multiply, the negated upper half, the concatenation, a multiply and an add (five
    kernels). Fused (Liger's, one program per token over all q and k heads): q's and k's heads as one
    tensor, the half swap done in registers (no traffic of its own), so the kernel reads q, k, cos and
    sin once and writes q and k once."""
    b, seq, hq, hkv, d = (s[k] for k in ("b", "s", "hq", "hkv", "d"))
    cos = g.add_input("cos", TensorType(dt, (1, 1, seq, d)))
    sin = g.add_input("sin", TensorType(dt, (1, 1, seq, d)))
    if algo == "fused":
        t = TensorType(dt, (b, hq + hkv, seq, d))
        qk = g.add_input("qk", t)
        a = g.add_node(Op.MUL, [qk, cos], [t]).outputs[0]
        r = g.add_node(Op.MUL, [qk, sin], [t]).outputs[0]
        return g.add_node(Op.ADD, [a, r], [t]).outputs
    outs = []
    for name, heads in (("q", hq), ("k", hkv)):
        t, half = TensorType(dt, (b, heads, seq, d)), TensorType(dt, (b, heads, seq, d // 2))
        x = g.add_input(name, t)
        a = g.add_node(Op.MUL, [x, cos], [t]).outputs[0]
        x1 = g.add_node(Op.SLICE, [x], [half]).outputs[0]
        x2 = g.add_node(Op.SLICE, [x], [half]).outputs[0]
        neg = g.add_node(Op.NEG, [x2], [half]).outputs[0]
        rot = g.add_node(Op.CONCAT, [neg, x1], [t], {"axis": 3}).outputs[0]
        r = g.add_node(Op.MUL, [rot, sin], [t]).outputs[0]
        outs += g.add_node(Op.ADD, [a, r], [t]).outputs
    return outs


def _attention(g: Graph, s: Mapping[str, int], dt: DType, algo: str) -> list[Value]:
    """softmax(q k^T / sqrt(d)) v over ``[b, h, s, d]`` tensors, causal or not."""
    t = TensorType(dt, (s["b"], s["h"], s["s"], s["d"]))
    q, k, v = (g.add_input(name, t) for name in ("q", "k", "v"))
    attrs = {"layout": "bhsd", CAUSAL: bool(s["causal"]), "scale": s["d"] ** -0.5}
    return g.add_node(Op.ATTENTION, [q, k, v], [t], attrs).outputs


_BUILDERS = {"rms_norm": _rms_norm, "add_rms_norm": _add_rms_norm, "layer_norm": _layer_norm,
             "relu_squared": _relu_squared, "group_norm": _group_norm, "rope": _rope, "attention": _attention}
