"""A mixture-of-experts MLP (Mixtral's sparse block) as canonical IR: router, dispatch, two grouped GEMMs.

The experts are :attr:`~narrowpipe.ir.Op.GROUPED_DOT` nodes over the ``N = top_k * tokens`` routed rows
and the stacked expert weights, as transformers' default ``grouped_mm`` experts export: the FLOPs are
exactly ``top_k * tokens`` rows through one expert each (what any routing costs, and what
``batched_mm`` and the eager expert loop count), and how the rows spread over the experts (so which
experts' weights are read at all, and how each expert's GEMM pads) is the analysis' expert balance
(``narrowpipe.costmodel.experts``: balanced by default), not baked into the graph.

Dispatch is a ``GATHER`` of the routed rows; combine scales them by their routing weights and sums
the ``top_k`` rows of each token (the scatter back to token order is a permutation, left out).

The families differ in the router and in what sits beside the experts, each as transformers writes it:
Mixtral and Qwen2-MoE take a softmax over the experts (renormalizing the top-k or not); DeepSeek-V3
a sigmoid per expert, a correction bias that steers the choice but not the weights, and a choice
limited to the best expert groups (V2 limits groups by their best softmax score); DeepSeek scales
the routing weights by ``routed_scale``. A shared expert (an MLP every token runs, DeepSeek's
``shared_experts``, Qwen2-MoE's ``shared_expert`` behind a sigmoid gate) is added to the routed sum.
Layers in ``dense_layers`` (DeepSeek's first ``first_k_dense_replace``) have a plain MLP instead.
"""

from __future__ import annotations

from ..ir import DType, Op, Value, ValueKind
from ..ir.dims import Dim, dim_mul
from .blocks import activation, mlp
from .graph_builder import GraphBuilder
from .spec import TransformerSpec

__all__ = ["moe"]


def moe(b: GraphBuilder, spec: TransformerSpec, x: Value) -> Value:
    """The sparse MoE block in module ``mlp``: router ``gate``, stacked experts ``experts``, shared expert."""
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
        if spec.shared_ffn is not None:
            summed = b.binary(Op.ADD, summed, _shared(b, spec, flat, tokens), name="add_shared")
        return b.reshape(summed, (batch, seq, hidden), name="unflatten")


def _shared(b: GraphBuilder, spec: TransformerSpec, flat: Value, tokens: Dim) -> Value:
    """The shared expert every token runs; Qwen2-MoE's is scaled by ``sigmoid(shared_expert_gate(x))``.
    Module names follow each family: DeepSeek's ``shared_experts``, Qwen2-MoE's gated ``shared_expert``."""
    out = mlp(b, spec, flat, spec.shared_ffn, "shared_expert" if spec.shared_gate else "shared_experts")
    if not spec.shared_gate:
        return out
    with b.scope("shared_expert_gate"):
        gate = b.unary(Op.SIGMOID, b.dot(flat, b.weight("weight", (1, spec.hidden))), name="sigmoid")
    return b.binary(Op.MUL, out, gate, name="shared_gate_mul")


def _router(b: GraphBuilder, spec: TransformerSpec, flat: Value, tokens: Dim) -> tuple[Value, Value]:
    """Logits, scores (softmax or sigmoid), top-k (group-limited when asked), weights; returns (weights, indices).

    DeepSeek keeps its router in fp32 (``router_fp32``: the weight and the logits; transformers
    keeps ``gate.weight`` out of any down-cast)."""
    assert spec.experts is not None and spec.top_k is not None
    e, k = spec.experts, spec.top_k
    with b.scope("gate"):
        dt = DType.FP32 if spec.router_fp32 else b.dtype
        w = b.weight("weight", (e, spec.hidden), dtype=dt)
        if dt is not flat.dtype:
            flat = b.emit(Op.CAST, [flat], flat.shape, {"to": dt.value}, name="to_fp32", dtype=dt)
        logits = b.emit(Op.DOT, [flat, w], (tokens, e),
                        {"lhs_contract": (1,), "rhs_contract": (1,), "lhs_batch": (), "rhs_batch": ()},
                        name="linear", dtype=dt)
        if spec.router == "sigmoid":
            scores = b.unary(Op.SIGMOID, logits, name="sigmoid")
            bias = b.weight("e_score_correction_bias", (e,), kind=ValueKind.BUFFER, dtype=DType.FP32)
            choice = b.binary(Op.ADD, scores, bias, name="biased")
        else:
            scores = choice = b.unary(Op.SOFTMAX, logits, {"axis": 1}, name="softmax")
        if spec.expert_groups is not None:
            choice = _group_limited(b, spec, choice, tokens)
        top, index = b.emit_multi(Op.TOPK, [choice], [((tokens, k), choice.dtype), ((tokens, k), DType.INT64)],
                                  {"k": k, "axis": 1}, name="topk")
        if choice is not scores:   # the choice was biased or masked: the weights are the plain scores
            top = b.emit(Op.GATHER_ELEMENTS, [scores, index], (tokens, k), {"axis": 1}, name="weights",
                         dtype=scores.dtype)
        if spec.moe_renormalize:
            total = b.emit(Op.REDUCE_SUM, [top], (tokens, 1), {"axes": (1,), "keepdims": True}, name="sum",
                           dtype=top.dtype)
            top = b.binary(Op.DIV, top, total, name="renormalize")
        if spec.routed_scale != 1.0:
            top = b.emit(Op.MUL, [top], top.shape, {"scalar": spec.routed_scale}, name="routed_scale",
                         dtype=top.dtype)
    return top, index


def _group_limited(b: GraphBuilder, spec: TransformerSpec, choice: Value, tokens: Dim) -> Value:
    """Keep the experts of the ``kept`` best groups (others masked): a group scores its best expert
    (DeepSeek-V2, softmax) or its best two summed (DeepSeek-V3, sigmoid)."""
    assert spec.expert_groups is not None and spec.experts is not None
    groups, kept = spec.expert_groups
    per = spec.experts // groups
    dt = choice.dtype
    grouped = b.reshape(choice, (tokens, groups, per), name="groups")
    if spec.router == "sigmoid":
        best2, _ = b.emit_multi(Op.TOPK, [grouped], [((tokens, groups, 2), dt), ((tokens, groups, 2), DType.INT64)],
                                {"k": 2, "axis": 2}, name="group_top2")
        score = b.emit(Op.REDUCE_SUM, [best2], (tokens, groups), {"axes": (2,), "keepdims": False},
                       name="group_score", dtype=dt)
    else:
        score = b.emit(Op.REDUCE_MAX, [grouped], (tokens, groups), {"axes": (2,), "keepdims": False},
                       name="group_score", dtype=dt)
    _, best = b.emit_multi(Op.TOPK, [score], [((tokens, kept), dt), ((tokens, kept), DType.INT64)],
                           {"k": kept, "axis": 1}, name="group_topk")
    zeros = b.emit(Op.FILL, [], (tokens, groups), {"value": 0}, name="group_zeros", dtype=dt)
    mask = b.emit(Op.SCATTER_ELEMENTS, [zeros, best], (tokens, groups), {"axis": 1}, name="group_mask", dtype=dt)
    mask = b.emit(Op.EXPAND, [b.reshape(mask, (tokens, groups, 1), name="group_mask_view")], (tokens, groups, per),
                  name="group_mask_expand", dtype=dt)
    mask = b.reshape(mask, (tokens, spec.experts), name="score_mask")
    return b.emit(Op.WHERE, [mask, choice], choice.shape, {"fill": "-inf" if spec.router == "sigmoid" else 0.0},
                  name="masked", dtype=dt)


def _experts(b: GraphBuilder, spec: TransformerSpec, rows: Value, routed: Dim) -> Value:
    """The expert MLPs over ``routed`` rows: grouped up (gate and up) projection, activation, grouped down."""
    assert spec.experts is not None and spec.top_k is not None
    ep = spec.expert_parallel
    e, hidden, ffn = spec.experts // (ep[0] if ep else 1), spec.hidden, spec.expert_ffn or spec.ffn
    up_rows = 2 * ffn if spec.gated_mlp else ffn
    up_w = b.weight("gate_up_proj" if spec.gated_mlp else "up_proj", (e, up_rows, hidden))
    down_w = b.weight("down_proj", (e, hidden, ffn))
    h = _grouped_linear(b, rows, up_w, spec.top_k, "up", ep)
    if spec.gated_mlp:
        gate = b.emit(Op.SLICE, [h], (routed, ffn), {"axis": 1, "part": "first_half", "piece": 0},
                      name="gate")
        up = b.emit(Op.SLICE, [h], (routed, ffn), {"axis": 1, "part": "second_half", "piece": 1},
                    name="up_half")
        h = b.binary(Op.MUL, activation(b, spec.activation, gate), up, name="gate_mul")
    else:
        h = activation(b, spec.activation, h)
    return _grouped_linear(b, h, down_w, spec.top_k, "down", ep)


def _grouped_linear(b: GraphBuilder, x: Value, w: Value, top_k: int, name: str,
                    ep: tuple[int, int] | None = None) -> Value:
    """``x [N, in]`` by each row's expert of the stacked ``[E, out, in]`` weights (``rhs_contract=2``). An
    expert-parallel shard holds ``E / ep`` experts and says so in ``expert_parallel`` (``(ep, dp)``): its
    experts take the rows the group routes to them, not its own (:func:`..costmodel.experts.node_expert_rows`)."""
    attrs: dict[str, object] = {"rhs_contract": 2, "top_k": top_k}
    if ep is not None:
        attrs["expert_parallel"] = ep
    return b.emit(Op.GROUPED_DOT, [x, w], (x.shape[0], w.shape[1]), attrs, name=name)
