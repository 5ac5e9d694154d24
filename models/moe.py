"""A mixture-of-experts MLP (Mixtral's sparse block) as canonical IR, with balanced routing.

The IR has no grouped-GEMM op, and which expert a token goes to is data, not shape. So the expert
GEMMs are modelled for *balanced* routing: the ``N = top_k * tokens`` routed rows are spread as
evenly as integers allow, ``r = N mod E`` experts take ``q + 1`` rows and ``E - r`` take ``q``, with
``q = N // E``. Each of the two groups is one batched ``DOT`` over its experts' slice of the stacked
weights, so the FLOPs are exactly ``top_k * tokens`` rows through one expert each (what any routing
costs, and what transformers' ``batched_mm`` and eager expert loops count), every expert's weights
are read once (what a grouped GEMM reads), and the node count does not grow with the number of
experts. ``r`` and ``q`` stay symbolic (``mod``/``floordiv`` of ``batch*seq``) until dims are bound.
What balanced routing cannot show: a skewed router's hot expert (its GEMM is longer than ``q + 1``
rows) and experts no token reaches, whose weights a real kernel does not read.

Dispatch is a ``GATHER`` of the routed rows; combine scales them by their routing weights and sums
the ``top_k`` rows of each token (the scatter back to token order is a permutation, left out).
"""

from __future__ import annotations

from ..ir import DType, Op, Value
from ..ir.dims import Dim, dim_floordiv, dim_mod, dim_mul, dim_sub
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
    """The expert MLPs over ``routed`` rows, as two balanced groups of batched GEMMs (module docstring)."""
    assert spec.experts is not None
    e, hidden, ffn = spec.experts, spec.hidden, spec.ffn
    up_rows = 2 * ffn if spec.gated_mlp else ffn
    up_w = b.weight("gate_up_proj" if spec.gated_mlp else "up_proj", (e, up_rows, hidden))
    down_w = b.weight("down_proj", (e, hidden, ffn))
    q = dim_floordiv(routed, e)
    r = dim_mod(routed, e)
    groups = (("long", r, q + 1), ("short", dim_sub(e, r), q))
    outs: list[Value] = []
    for label, count, length in groups:
        if isinstance(count, int) and count == 0:
            continue   # N divides evenly: every expert takes q rows
        n = dim_mul(count, length)
        chunk = b.emit(Op.SLICE, [rows], (n, hidden), {"axis": 0, "role": f"{label}_experts"},
                       name=f"{label}_rows", dtype=rows.dtype)
        x = b.reshape(chunk, (count, length, hidden), name=f"{label}_batch")
        w1 = b.emit(Op.SLICE, [up_w], (count, up_rows, hidden), {"axis": 0}, name=f"{label}_up_weights")
        w2 = b.emit(Op.SLICE, [down_w], (count, hidden, ffn), {"axis": 0}, name=f"{label}_down_weights")
        h = _batched_linear(b, x, w1, f"{label}_up")
        if spec.gated_mlp:
            gate = b.emit(Op.SLICE, [h], (count, length, ffn), {"axis": 2, "part": "first_half"},
                          name=f"{label}_gate")
            up = b.emit(Op.SLICE, [h], (count, length, ffn), {"axis": 2, "part": "second_half"},
                        name=f"{label}_up_half")
            h = b.binary(Op.MUL, activation(b, spec.activation, gate), up, name=f"{label}_gate_mul")
        else:
            h = activation(b, spec.activation, h)
        y = _batched_linear(b, h, w2, f"{label}_down")
        outs.append(b.reshape(y, (n, hidden), name=f"{label}_flat"))
    return b.emit(Op.CONCAT, outs, (routed, hidden), {"axis": 0}, name="concat_groups")


def _batched_linear(b: GraphBuilder, x: Value, w: Value, name: str) -> Value:
    """``[G, n, in] x [G, out, in] -> [G, n, out]``: one GEMM per expert of the group."""
    return b.emit(Op.DOT, [x, w], (x.shape[0], x.shape[1], w.shape[1]),
                  {"lhs_batch": (0,), "rhs_batch": (0,), "lhs_contract": (2,), "rhs_contract": (2,)}, name=name)
