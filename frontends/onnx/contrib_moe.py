"""onnxruntime's mixture-of-experts contrib ops (``com.microsoft::MoE`` and ``QMoE``) as canonical IR.

One fused op routes and runs every token (onnxruntime's schema: input ``[T, H]`` or ``[B, S, H]``,
router logits ``[T, E]``, ``fc1`` experts ``[E, f*I, H]`` with ``f = 2`` when the SwiGLU gate and up
projections are fused, ``fc2`` ``[E, H, I]``, an optional separate ``fc3`` (up) ``[E, I, H]``, biases
``[E, out]``, attribute ``k``; with ``fc3`` the activated ``fc1`` is gated by it, as a fused SwiGLU's
first half is by its second). It becomes what it computes, the same block the model builder and the
torch exports give: softmax and top-k over the router logits (renormalized with
``normalize_routing_weights``), a gather of the ``k x T`` routed rows, grouped GEMMs
(:attr:`Op.GROUPED_DOT`) through the experts with the activation between them, and the weighted sum of
each token's ``k`` rows. ``QMoE``'s packed weights are dequantized to the input's dtype first (a kernel
dequantizes as it loads, so that reads every expert's packed weights, an upper bound at decode).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...ir import DType, Op, Value
from .contrib_shapes import MS
from .node import NodeCx
from .shapes import OutSpec
from .symdims import dim_floordiv, dim_mul, to_dim

__all__ = ["MOE_LOWERINGS", "MOE_SHAPE_RULES"]

#: input slots (fc1, fc1 bias, fc2, fc2 bias, fc3, fc3 bias) and the per-weight scale slots of QMoE
_MOE_SLOTS = (2, 3, 4, 5, 6, 7)
_QMOE_SLOTS = (2, 4, 5, 7, 8, 10)
_QMOE_SCALES = {2: 3, 5: 6, 8: 9}
#: activation_type -> (op, attrs, gated): gated activations multiply the activated gate by the up half
_ACTIVATIONS: dict[str, tuple[Op | None, dict[str, Any], bool]] = {
    "relu": (Op.RELU, {}, False), "gelu": (Op.GELU, {}, False), "silu": (Op.SILU, {}, False),
    "identity": (None, {}, False), "swiglu": (Op.SILU, {}, True), "geglu": (Op.GELU, {"approximate": "tanh"}, True),
    "relu2": (Op.RELU, {"squared": True}, False),
}


def _moe(quantized: bool) -> Callable[[NodeCx], None]:
    def fn(cx: NodeCx) -> None:
        x, logits = cx.input(0), cx.input(1)
        if x is None or logits is None:
            raise cx.error("MoE needs its input and router_probs")
        kind = str(cx.attr("activation_type", "relu")).lower()
        if kind not in _ACTIVATIONS:
            raise cx.error(f"unknown activation_type {kind!r}")
        op, act_attrs, gated = _ACTIVATIONS[kind]
        k = int(cx.attr("k", 1))
        hidden = x.type.shape[-1]
        tokens = to_dim(dim_mul(*x.type.shape[:-1])) if x.type.rank > 2 else x.type.shape[0]
        experts = logits.type.shape[-1]
        if not isinstance(experts, int) or not 0 < k <= experts:
            raise cx.error(f"k={k} must be in 1..experts ({experts})")
        slots = _QMOE_SLOTS if quantized else _MOE_SLOTS
        fc1, b1, fc2, b2, fc3, b3 = (cx.input(i) for i in slots)
        if fc1 is None or fc2 is None:
            raise cx.error("MoE needs fc1_experts_weights and fc2_experts_weights")
        fused = gated and fc3 is None
        gated = gated or fc3 is not None   # a separate up projection gates the activated fc1 (silu -> SwiGLU)
        inter = to_dim(dim_floordiv(fc1.type.shape[1], 2)) if fused else fc1.type.shape[1]
        if quantized:
            fc1 = _dequantize(cx, fc1, slots[0], (experts, fc1.type.shape[1], hidden), x.type.dtype, "fc1")
            fc2 = _dequantize(cx, fc2, slots[2], (experts, hidden, inter), x.type.dtype, "fc2")
            if fc3 is not None:
                fc3 = _dequantize(cx, fc3, slots[4], (experts, inter, hidden), x.type.dtype, "fc3")
        flat = _emit(cx, Op.RESHAPE, [x], (tokens, hidden), x.type.dtype, "flatten")
        weights, index = _route(cx, logits, tokens, k, experts)
        routed = to_dim(dim_mul(tokens, k))
        dt = x.type.dtype
        idx_flat = _emit(cx, Op.RESHAPE, [index], (routed,), DType.INT64, "index_flat")
        rows = _emit(cx, Op.GATHER, [flat, idx_flat], (routed, hidden), dt, "dispatch", {"axis": 0})
        h = _expert_linear(cx, rows, fc1, b1, k, "fc1")
        if gated:
            if fused:
                gate = _emit(cx, Op.SLICE, [h], (routed, inter), dt, "gate", {"axis": 1, "part": "first_half"})
                up = _emit(cx, Op.SLICE, [h], (routed, inter), dt, "up", {"axis": 1, "part": "second_half"})
            else:
                assert fc3 is not None
                gate, up = h, _expert_linear(cx, rows, fc3, b3, k, "fc3")
            if op is not None:
                gate = _emit(cx, op, [gate], (routed, inter), dt, kind, act_attrs)
            h = _emit(cx, Op.MUL, [gate, up], (routed, inter), dt, "gate_mul")
        elif op is not None:
            h = _emit(cx, op, [h], (routed, inter), dt, kind)
            if act_attrs.get("squared"):
                h = _emit(cx, Op.MUL, [h, h], (routed, inter), dt, "square")
        y = _expert_linear(cx, h, fc2, b2, k, "fc2")
        w_flat = _emit(cx, Op.RESHAPE, [weights], (routed, 1), weights.type.dtype, "weights_flat")
        scaled = _emit(cx, Op.MUL, [y, w_flat], (routed, hidden), dt, "routing_weight")
        per_token = _emit(cx, Op.RESHAPE, [scaled], (tokens, k, hidden), dt, "per_token")
        summed = _emit(cx, Op.REDUCE_SUM, [per_token], (tokens, hidden), dt, "combine",
                       {"axes": (1,), "keepdims": False})
        cx.emit(Op.RESHAPE, [summed])
    return fn


def _route(cx: NodeCx, logits: Value, tokens: Any, k: int, experts: int) -> tuple[Value, Value]:
    """Softmax over the experts, top-k, and (``normalize_routing_weights``) the top-k renormalized."""
    flat = _emit(cx, Op.RESHAPE, [logits], (tokens, experts), logits.type.dtype, "router_flat")
    probs = _emit(cx, Op.SOFTMAX, [flat], (tokens, experts), logits.type.dtype, "router_softmax", {"axis": 1})
    node = cx.emit(Op.TOPK, [probs], {"k": k, "axis": 1}, bind=False, suffix="router_topk",
                   types=[cx.tensor(logits.type.dtype, (tokens, k)), cx.tensor(DType.INT64, (tokens, k))])
    top, index = node.outputs
    if int(cx.attr("normalize_routing_weights", 0)):
        total = _emit(cx, Op.REDUCE_SUM, [top], (tokens, 1), top.type.dtype, "router_sum",
                      {"axes": (1,), "keepdims": True})
        top = _emit(cx, Op.DIV, [top, total], (tokens, k), top.type.dtype, "router_renormalize")
    return top, index


def _expert_linear(cx: NodeCx, rows: Value, w: Value, bias: Value | None, k: int, name: str) -> Value:
    """Rows through their experts' ``[E, out, in]`` weights, plus the expert's bias row (read by position)."""
    out = (rows.type.shape[0], w.type.shape[1])
    y = _emit(cx, Op.GROUPED_DOT, [rows, w], out, rows.type.dtype, name, {"rhs_contract": 2, "top_k": k})
    if bias is not None:
        y = _emit(cx, Op.ADD, [y, bias], out, rows.type.dtype, f"{name}_bias", {"role": "bias", "lookup_operands": 1})
    return y


def _dequantize(cx: NodeCx, w: Value, slot: int, shape: tuple[Any, ...], dtype: DType, name: str) -> Value:
    """QMoE's packed experts as ``dtype`` weights: their scales (and zero points) applied on load."""
    bits = int(cx.attr(f"{name}_expert_weight_bits", cx.attr("expert_weight_bits", 4)))
    scales = cx.input(_QMOE_SCALES[slot])
    return _emit(cx, Op.DEQUANTIZE, [w, scales], shape, dtype, f"{name}_dequant",
                 {"bits": bits, "block_size": int(cx.attr("block_size", 0) or 0)})


def _emit(cx: NodeCx, op: Op, inputs: list[Value | None], shape: tuple[Any, ...], dtype: DType, suffix: str,
          attrs: dict[str, Any] | None = None) -> Value:
    return cx.emit(op, inputs, attrs, types=[cx.tensor(dtype, shape)], bind=False, suffix=suffix).outputs[0]


def _same_as_input(cx: NodeCx) -> list[OutSpec | None]:
    return [(cx.dtype(0), cx.shape(0))] if cx.shape(0) is not None else [None]


MOE_LOWERINGS: dict[str, Callable[[NodeCx], None]] = {MS + "MoE": _moe(False), MS + "QMoE": _moe(True)}
MOE_SHAPE_RULES: dict[str, Callable[[NodeCx], list[OutSpec | None]]] = {
    MS + "MoE": _same_as_input, MS + "QMoE": _same_as_input}
