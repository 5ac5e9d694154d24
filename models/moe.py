"""A mixture-of-experts MLP (Mixtral's sparse block) as canonical IR: router, dispatch, two grouped GEMMs.

The experts are :attr:`~narrowpipe.ir.Op.GROUPED_DOT` nodes over the ``N = top_k * tokens`` routed rows
and the stacked expert weights, as transformers' default ``grouped_mm`` experts export: the FLOPs are
exactly ``top_k * tokens`` rows through one expert each (what any routing costs, and what
``batched_mm`` and the eager expert loop count), and how the rows spread over the experts (so which
experts' weights are read at all, and how each expert's GEMM pads) is the analysis' expert balance
(``narrowpipe.costmodel.experts``: balanced by default), not baked into the graph.

Dispatch is a ``GATHER`` of the routed rows; combine scales them by their routing weights and sums
the ``top_k`` rows of each token (the scatter back to token order is a permutation, left out).
"""

from __future__ import annotations

from ..ir import DType, Op, Value
from ..ir.dims import Dim, dim_mul
from .blocks import activation
from .graph_builder import GraphBuilder
from .spec import TransformerSpec

__all__ = ["moe"]


def moe(b: GraphBuilder, spec: TransformerSpec, x: Value) -> Value:
    """The sparse MoE block in module ``mlp``: router ``gate``, stacked experts ``experts``."""
    assert spec.experts is not None and spec.top_k is not None
    k, hidden = spec.top_k, spec.hidden
    batch, seq = x.shape[0], x.shape[1]
    tokens = dim_mul(batch, seq)
    routed = dim_mul(tokens, k)
    with b.scope("mlp"):
        flat = b.reshape(x, (tokens, hidden), name="flatten")
        weights, index = _router(b, spec, flat, tokens)
        with b.scope("experts"):
            rows = b.emit(Op.GATHER, [flat, b.reshape(index, (routed,), name="index_flat")], (routed, hidden),
                          {"axis": 0, "role": "dispatch"}, name="dispatch")
            out = _experts(b, spec, rows, routed)
            scaled = b.binary(Op.MUL, out, b.reshape(weights, (routed, 1), name="weights_flat"),
                              name="routing_weight")
            per_token = b.reshape(scaled, (tokens, k, hidden), name="per_token")
            summed = b.emit(Op.REDUCE_SUM, [per_token], (tokens, hidden), {"axes": (1,), "keepdims": False},
                            name="combine")
        return b.reshape(summed, (batch, seq, hidden), name="unflatten")


def _router(b: GraphBuilder, spec: TransformerSpec, flat: Value, tokens: Dim) -> tuple[Value, Value]:
    """Logits, softmax over experts, top-k (renormalized as Mixtral does); returns (weights, indices)."""
    assert spec.experts is not None and spec.top_k is not None
    e, k = spec.experts, spec.top_k
    with b.scope("gate"):
        w = b.weight("weight", (e, spec.hidden))
        probs = b.unary(Op.SOFTMAX, b.dot(flat, w), {"axis": 1}, name="softmax")
        top, index = b.emit_multi(Op.TOPK, [probs], [((tokens, k), None), ((tokens, k), DType.INT64)],
                                  {"k": k, "axis": 1}, name="topk")
        if spec.moe_renormalize:
            total = b.emit(Op.REDUCE_SUM, [top], (tokens, 1), {"axes": (1,), "keepdims": True}, name="sum")
            top = b.binary(Op.DIV, top, total, name="renormalize")
    return top, index


def _experts(b: GraphBuilder, spec: TransformerSpec, rows: Value, routed: Dim) -> Value:
    """The expert MLPs over ``routed`` rows: grouped up (gate and up) projection, activation, grouped down."""
    assert spec.experts is not None and spec.top_k is not None
    e, hidden, ffn = spec.experts, spec.hidden, spec.ffn
    up_rows = 2 * ffn if spec.gated_mlp else ffn
    up_w = b.weight("gate_up_proj" if spec.gated_mlp else "up_proj", (e, up_rows, hidden))
    down_w = b.weight("down_proj", (e, hidden, ffn))
    h = _grouped_linear(b, rows, up_w, spec.top_k, "up")
    if spec.gated_mlp:
        gate = b.emit(Op.SLICE, [h], (routed, ffn), {"axis": 1, "part": "first_half", "piece": 0},
                      name="gate")
        up = b.emit(Op.SLICE, [h], (routed, ffn), {"axis": 1, "part": "second_half", "piece": 1},
                    name="up_half")
        h = b.binary(Op.MUL, activation(b, spec.activation, gate), up, name="gate_mul")
    else:
        h = activation(b, spec.activation, h)
    return _grouped_linear(b, h, down_w, spec.top_k, "down")


def _grouped_linear(b: GraphBuilder, x: Value, w: Value, top_k: int, name: str) -> Value:
    """``x [N, in]`` by each row's expert of the stacked ``[E, out, in]`` weights (``rhs_contract=2``)."""
    return b.emit(Op.GROUPED_DOT, [x, w], (x.shape[0], w.shape[1]), {"rhs_contract": 2, "top_k": top_k}, name=name)
