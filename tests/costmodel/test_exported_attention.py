"""Eager attention as torch's ONNX exporters write it: ``(Q * c) @ (Transpose(K) * c)``, a mask
add, ``Softmax``, the NaN guard ``Where(IsNaN(p), 0, p)`` and ``P @ V`` (legacy exporter, opset 14+),
with K and V repeated to the query heads by ``repeat_kv``. Hand-counted on a tiny graph."""

from __future__ import annotations

from narrowpipe.costmodel.eager_attention import attention_from_eager
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.kernels import fuse
from narrowpipe.costmodel.serving.inplace import fold_repeat_kv
from narrowpipe.ir import CAUSAL, DType, Graph, Op, TensorType, verify

B, H, HK, S, SK, D = 2, 4, 2, 3, 10, 8
F32 = DType.FP32


def _t(*shape: int, dtype: DType = F32) -> TensorType:
    return TensorType(dtype, shape)


def exported_attention() -> Graph:
    g = Graph("exported_attention")
    q = g.add_input("q", _t(B, H, S, D))
    kv = [g.add_input(n, _t(B, HK, SK, D)) for n in ("k", "v")]
    mask = g.add_input("mask", _t(B, 1, S, SK))
    c = g.add_input("c", _t())
    zero = g.add_input("zero", _t(1))
    k, v = (g.add_node(Op.RESHAPE, [g.add_node(Op.EXPAND, [g.add_node(Op.RESHAPE, [x], [_t(B, HK, 1, SK, D)])
                                                          .outputs[0]], [_t(B, HK, H // HK, SK, D)]).outputs[0]],
                       [_t(B, H, SK, D)]).outputs[0] for x in kv)                    # repeat_kv
    kt = g.add_node(Op.PERMUTE, [k], [_t(B, H, D, SK)], {"perm": (0, 1, 3, 2)}).outputs[0]
    qs = g.add_node(Op.MUL, [q, c], [_t(B, H, S, D)]).outputs[0]
    ks = g.add_node(Op.MUL, [kt, c], [_t(B, H, D, SK)]).outputs[0]
    dims = {"lhs_contract": (3,), "rhs_contract": (2,), "lhs_batch": (0, 1), "rhs_batch": (0, 1)}
    s = g.add_node(Op.DOT, [qs, ks], [_t(B, H, S, SK)], dims).outputs[0]
    s = g.add_node(Op.ADD, [s, mask], [_t(B, H, S, SK)]).outputs[0]
    p = g.add_node(Op.SOFTMAX, [s], [_t(B, H, S, SK)], {"axis": 3}).outputs[0]
    nan = g.add_node(Op.ISNAN, [p], [_t(B, H, S, SK, dtype=DType.BOOL)]).outputs[0]
    p = g.add_node(Op.WHERE, [nan, zero, p], [_t(B, H, S, SK)]).outputs[0]
    g.set_outputs(g.add_node(Op.DOT, [p, v], [_t(B, H, S, D)], dims).outputs)
    return g


def test_fusion_takes_the_nan_guard_and_the_operand_scales_into_one_attention_kernel() -> None:
    """Every node but the free views is one kernel: the scales and K's transpose are applied as the
    kernel loads Q and K, the guard on the probabilities it never writes."""
    table = interpret(exported_attention(), {})
    kernels = [k for k in fuse(table) if not k.is_free]
    assert [k.kind for k in kernels] == ["attention"]
    ops = sorted(n.op.value for n in kernels[0].nodes)
    assert ops == sorted(["permute", "mul", "mul", "dot", "add", "softmax", "isnan", "where", "dot"])
    # what it reads: q, K and V as repeat_kv hands them (4 heads: GQA is serving's fold), the mask,
    # the scale (once: the kernel loads an input both scaled operands share once) and the guard's
    # zero; it writes the output only
    read = 4 * (B * H * S * D + 2 * B * H * SK * D + B * S * SK + 1 + 1)
    assert kernels[0].cost.bytes_read == read
    assert kernels[0].cost.bytes_written == 4 * B * H * S * D


def test_the_rewrite_gives_one_attention_node_that_reads_each_kv_head_once() -> None:
    g = exported_attention()
    flops = interpret(g, {}).total().flops
    assert attention_from_eager(g) == 1
    assert fold_repeat_kv(g) == 1
    verify(g)
    assert [n.op for n in g.nodes if n.op not in (Op.RESHAPE, Op.EXPAND)] == [Op.ATTENTION]
    node = g.nodes[-1]
    assert [v.name for v in node.inputs] == ["q", "k", "v", "mask"]
    assert node.attrs["enable_gqa"] and node.attrs["layout"] == "bhsd"
    cost = interpret(g, {}).costs[node]
    # hand count: Q, K and V at 2 heads, the mask; two matmuls of 2 FLOPs per multiply-add
    assert cost.bytes_read == 4 * (B * H * S * D + 2 * B * HK * SK * D + B * S * SK)
    assert cost.flops == 2 * (2 * B * H * S * SK * D)
    # the unfused graph's matmuls are the same work; it also counted the scales, mask, guard and
    # softmax elementwise (torch's sdpa_flop_count counts neither)
    assert flops > cost.flops


def test_a_softmax_read_elsewhere_is_left_as_written() -> None:
    """Another reader of the probabilities (an attention-weights output) needs them written."""
    g = exported_attention()
    p = next(n for n in g.nodes if n.op is Op.SOFTMAX).outputs[0]
    g.set_outputs([*g.outputs, p])
    assert attention_from_eager(g) == 0


def test_a_mask_step_proven_causal_makes_the_attention_causal() -> None:
    """The ONNX frontend tags the add of a mask it proved causal; the fused node keeps that (so the
    kernel skips the blocks above the diagonal) and the mask, as the torch frontend does for SDPA."""
    g = exported_attention()
    add = next(n for n in g.nodes if n.op is Op.ADD)
    g.set_attr(add, CAUSAL, True)
    assert attention_from_eager(g) == 1
    node = next(n for n in g.nodes if n.op is Op.ATTENTION)
    assert node.attrs[CAUSAL] and node.attrs["causal_from"] == "mask"
    assert node.inputs[3] is not None and node.inputs[3].name == "mask"
