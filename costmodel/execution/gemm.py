"""Kernels seen as GEMMs: (batch, M, N, K) problems that tile, pad and wave-quantize.

Matmuls map directly from dot_general dims; convolutions as implicit GEMMs (M = output positions,
N = output channels per group, K = input channels per group x kernel, batch = groups); attention as
its two matmuls (QK^T and PV) per (batch x head); a grouped GEMM (MoE experts) as one problem of
``M = rows`` whose rows split over the experts as the analysis' expert balance says
(``group_rows``: each reached expert's rows, hottest first), so each family can pad and queue every
expert's share as its grouped kernels do.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from math import prod

from ...ir import OPERAND_MAJOR, DType, Node, Op, Value, attention_dims, attention_operands, attention_window, is_causal
from ..dequant_fusion import dequant_behind, fused_dequant, runs_in_gemm
from ..experts import node_expert_rows, node_reached_experts, node_received_rows
from ..interpreter import CostTable
from ..kernels import Kernel
from ..sizes import value_bytes

__all__ = ["Gemm", "kernel_gemms", "grouped_gemm", "attention_shape", "AttentionShape", "is_depthwise"]


@dataclass(frozen=True)
class Gemm:
    batch: int
    m: int
    n: int
    k: int
    dtype: DType               # the compute dtype (the wider of the two operands)
    a_bytes: int
    b_bytes: int
    c_bytes: int
    flops: int                 # the node's FLOPs, from its cost rule (rules.py holds the formula)
    group_rows: tuple[int, ...] = ()   # a grouped GEMM: the M rows of each expert some row reaches
    #: The rhs (weight) operand's type when it is narrower than the compute type: a weight-only
    #: quantized matmul, whose kernel dequantizes the weights before the matrix units use them.
    narrow_rhs: DType | None = None
    #: Whether A and B are stored with their contracted dim unit-stride ("K-major"), where the
    #: graph states it (the DOT's ``operand_major``); ``None``: unknown.
    k_major: tuple[bool, bool] | None = None


@dataclass(frozen=True)
class AttentionShape:
    batch_heads: int
    sq: int
    sk: int
    d: int
    dv: int
    causal: bool
    dtype: DType
    #: Query heads sharing one K/V head (grouped-query / multi-query attention read K/V once per KV
    #: head): decode kernels stack a group's query rows against the shared K/V (FlashDecoding's and
    #: FlashInfer's head-group packing, TPU ragged paged attention), so ``sq * group`` rows meet
    #: each K/V tile. 1 for multi-head attention and eager patterns.
    group: int = 1
    #: The backward kernel (``ATTENTION_BACKWARD``): per tile it recomputes the scores (a ``d``-deep
    #: matmul) and runs dV and dP (``dv``), dQ and dK (``d``): three QK^T-sized and two PV-sized
    #: matmuls against the forward's one of each (FlashAttention-2's backward; rules.py counts it so).
    backward: bool = False
    #: The sliding window (keys per query, its own included; the node's ``WINDOW``), None: every
    #: key handed is in reach. The kernel skips the key blocks outside it
    #: (:func:`.common.attention_block_fraction`).
    window: int | None = None

    @property
    def matmul_depth(self) -> int:
        """Contracted size per score of every matmul the kernel runs: ``d + dv`` forward, ``3d + 2dv`` backward."""
        return 3 * self.d + 2 * self.dv if self.backward else self.d + self.dv


def _wider(a: DType, b: DType) -> DType:
    return a if a.bits >= b.bits else b


def _shape(table: CostTable, node: Node, i: int) -> tuple[int, ...]:
    v = node.inputs[i]
    assert v is not None
    return table.shapes[v]


def _in_gemm(node: Node, fused: Collection[Node] | None) -> Collection[Node]:
    """``fused`` (a kernel's nodes), or where no kernel is given the dequantizations ``node`` runs in
    its operand load by :func:`~..dequant_fusion.runs_in_gemm` (a report's precision label)."""
    if fused is not None:
        return fused
    deqs = (dequant_behind(v) for v in node.inputs[:2])
    return {d for d in deqs if d is not None and runs_in_gemm(d, node)}


def _operand(table: CostTable, v: Value, fused: Collection[Node]) -> tuple[int, DType | None]:
    """What the kernel loads for operand ``v``: its bytes, and the stored type where a dequantization
    fused into the kernel produces it (the narrow weight with its scales and zero points)."""
    deq = fused_dequant(v, fused)
    if deq is None:
        return value_bytes(table, v), None
    first = deq.inputs[0]
    assert first is not None
    return sum(value_bytes(table, u) for u in deq.inputs if u is not None), first.type.dtype


def _compute_types(a: Value, b: Value, stored_a: DType | None, stored_b: DType | None) -> tuple[DType, DType | None]:
    """(the type the matrix units run, the narrow stored weight type of a weight-only GEMM): both operands
    stored as integers is an integer GEMM (QDQ); one stored narrow is weight-only at the other's rate."""
    if stored_a is not None and stored_b is not None:
        return _wider(stored_a, stored_b), None
    wide = _wider(a.type.dtype, b.type.dtype)
    narrow = stored_b or stored_a
    if narrow is None and b.type.dtype.bits < wide.bits:
        narrow = b.type.dtype
    return wide, narrow


def dot_gemm(table: CostTable, node: Node, fused: Collection[Node] | None = None) -> Gemm:
    """``node`` as a GEMM; ``fused``: the nodes of its kernel, whose fused dequantizations make an
    operand what is stored (:mod:`..dequant_fusion`: weight-only and QDQ integer GEMMs)."""
    lhs, rhs = node.inputs[0], node.inputs[1]
    assert lhs is not None and rhs is not None
    ls, rs = table.shapes[lhs], table.shapes[rhs]
    a = node.attrs
    lc, rc = tuple(a["lhs_contract"]), tuple(a["rhs_contract"])
    lb, rb = tuple(a.get("lhs_batch", ())), tuple(a.get("rhs_batch", ()))
    batch = prod(max(ls[i], rs[j]) for i, j in zip(lb, rb))
    k = prod(ls[i] for i in lc)
    m = prod(d for i, d in enumerate(ls) if i not in lc and i not in lb)
    n = prod(d for i, d in enumerate(rs) if i not in rc and i not in rb)
    out = node.outputs[0]
    fused = _in_gemm(node, fused)
    (a_bytes, stored_a), (b_bytes, stored_b) = _operand(table, lhs, fused), _operand(table, rhs, fused)
    wide, narrow = _compute_types(lhs, rhs, stored_a, stored_b)
    major = a.get(OPERAND_MAJOR)
    return Gemm(batch, m, n, k, wide, a_bytes, b_bytes, value_bytes(table, out),
                table.costs[node].flops, narrow_rhs=narrow,
                k_major=(major[0] == "k", major[1] == "k") if major is not None else None)


def grouped_gemm(table: CostTable, node: Node) -> Gemm:
    """A GROUPED_DOT as M = rows split over the reached experts; B's bytes are theirs only (the cost rule's).

    The weight gradient (``role="grad_weight"``) is one ``K x N`` GEMM per reached expert, contracted
    over that expert's rows: a batch of experts with the mean row count as depth (a skewed split
    moves depth between the experts of one grid; their output tiles and total work stay the same)."""
    x, w = node.inputs[0], node.inputs[1]
    assert x is not None and w is not None
    if node.attrs.get("role") == "grad_weight":
        return _grouped_grad_weight(table, node, x, w)
    (rows, k), ws = table.shapes[x], table.shapes[w]
    n = ws[3 - int(node.attrs["rhs_contract"])]
    split = tuple(r for r in node_expert_rows(node.attrs, rows, ws[0], table.expert_balance) if r)
    reached = node_reached_experts(node.attrs, rows, ws[0], table.expert_balance)   # the rule's: D under random
    b_bytes = round(w.type.dtype.nbytes(prod(ws[1:])) * reached)
    got = node_received_rows(node.attrs, rows)     # an expert-parallel serving shard: the group's share
    scale = got / rows if rows else 1.0
    return Gemm(1, got, n, k, _wider(x.type.dtype, w.type.dtype), round(value_bytes(table, x) * scale), b_bytes,
                round(value_bytes(table, node.outputs[0]) * scale), table.costs[node].flops, split)


def _grouped_grad_weight(table: CostTable, node: Node, x: Value, dy: Value) -> Gemm:
    (rows, k), n = table.shapes[x], table.shapes[dy][1]
    out = node.outputs[0]
    split = [r for r in node_expert_rows(node.attrs, rows, table.shapes[out][0], table.expert_balance) if r]
    reached = max(len(split), 1)
    return Gemm(reached, k, n, max(-(-rows // reached), 1), _wider(x.type.dtype, dy.type.dtype),
                value_bytes(table, x), value_bytes(table, dy), value_bytes(table, out), table.costs[node].flops)


def conv_gemm(table: CostTable, node: Node, fused: Collection[Node] | None = None) -> Gemm:
    x, w = _shape(table, node, 0), _shape(table, node, 1)
    out = table.shapes[node.outputs[0]]
    xv, wv = node.inputs[0], node.inputs[1]
    assert xv is not None and wv is not None
    fused = _in_gemm(node, fused)
    (x_bytes, stored_x), (w_bytes, stored_w) = _operand(table, xv, fused), _operand(table, wv, fused)
    dtype, narrow = _compute_types(xv, wv, stored_x, stored_w)
    groups = int(node.attrs.get("groups", 1))
    flops = table.costs[node].flops
    if node.attrs.get("role") == "grad_weight":
        m, n = out[0], prod(out[1:])
        k = max(flops // max(2 * m * n, 1), 1)
        batch = 1
    elif node.attrs.get("transposed"):
        batch, m, n, k = groups, x[0] * prod(x[2:]), w[1], (w[0] // groups) * prod(w[2:])
    else:
        batch, m, n, k = groups, x[0] * prod(out[2:]), w[0] // groups, w[1] * prod(w[2:])
    return Gemm(batch, m, n, k, dtype, x_bytes, w_bytes, value_bytes(table, node.outputs[0]), flops,
                narrow_rhs=narrow)


def is_depthwise(table: CostTable, node: Node) -> bool:
    """A forward convolution with one input channel per group over several groups (MobileNet's
    depthwise layers): a windowed per-channel sum, not a GEMM; libraries run it on the vector units."""
    w = node.inputs[1]
    if node.op is not Op.CONV or w is None or node.attrs.get("role") or node.attrs.get("transposed"):
        return False
    return int(node.attrs.get("groups", 1)) > 1 and table.shapes[w][1] == 1


def attention_shape(table: CostTable, kernel: Kernel) -> AttentionShape:
    """Dims of a fused attention kernel, from an ATTENTION node or an eager QK^T..PV pattern."""
    node = kernel.anchor
    if node.op in (Op.ATTENTION, Op.ATTENTION_BACKWARD):
        off = attention_operands(node)
        a = attention_dims(node.attrs, *(_shape(table, node, off + i) for i in range(3)))
        qv = node.inputs[off]
        assert qv is not None
        group = a.heads // a.kv_heads if 0 < a.kv_heads < a.heads and a.heads % a.kv_heads == 0 else 1
        return AttentionShape(a.batch * a.heads, a.sq, a.sk, a.d, a.dv, is_causal(node), qv.type.dtype, group,
                              node.op is Op.ATTENTION_BACKWARD, a.window)
    dots = [n for n in kernel.nodes if n.op is Op.DOT]
    g1, g2 = dot_gemm(table, dots[0]), dot_gemm(table, dots[-1])
    steps = [n for n in kernel.nodes if is_causal(n)]   # a mask step the frontend proved causal
    window = min((w for w in map(attention_window, steps) if w is not None), default=None)
    return AttentionShape(g1.batch, g1.m, g1.n, g1.k, g2.n, bool(steps), g1.dtype, window=window)


def kernel_gemms(table: CostTable, kernel: Kernel) -> list[Gemm]:
    """The GEMMs a matmul/conv kernel runs (empty for other kinds)."""
    node = kernel.anchor
    if node.op is Op.DOT and kernel.kind == "matmul":
        return [dot_gemm(table, node, kernel.nodes)]
    if node.op is Op.GROUPED_DOT:
        return [grouped_gemm(table, node)]
    if node.op is Op.CONV:
        return [conv_gemm(table, node, kernel.nodes)]
    return []
