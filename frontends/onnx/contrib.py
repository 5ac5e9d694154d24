"""The ``com.microsoft`` contrib ops that exporters and onnxruntime's optimizers emit.

Fused attention ops become their QKV projection (a dot_general, where the op includes it) plus one
:attr:`Op.ATTENTION` in the ``bsd`` layout with ``num_heads``/``kv_num_heads``; key/value caches
in ``[B, N, S, H]`` are read through free ``bsd`` views (cost-equivalent layout adapters, marked
``layout_adapter``); fused normalizations become the adds they fuse plus the norm. Their output
shapes are in :mod:`.contrib_shapes`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...ir import CAUSAL, WINDOW, Op, Value
from ..mask_pattern import band_attrs
from .contractions import conv_attrs, dot, matmul, unsqueeze_front
from .contrib_shapes import MS, fused_matmul_axes, gqa_geometry, heads
from .mask_hooks import attention_mask_band
from .nn import NN_LOWERINGS, attention_core
from .node import NodeCx
from .symdims import dim_add, dim_floordiv, dim_min, dim_mul, to_dim

__all__ = ["CONTRIB_LOWERINGS"]


def _split_qkv(cx: NodeCx, qkv: Value, sizes: list[Any]) -> list[Value]:
    """Q, K and V as slices (views) of a packed projection's last dim."""
    b, s = qkv.type.shape[0], qkv.type.shape[1]
    return [cx.emit(Op.SLICE, [qkv], {"axis": 2, "part": part}, types=[cx.tensor(qkv.type.dtype, (b, s, size))],
                    bind=False, suffix=part).outputs[0] for part, size in zip(("q", "k", "v"), sizes)]


def _attention_present(cx: NodeCx, qkv: Value, sizes: list[Any], n: int) -> tuple[Value, Value] | None:
    """com.microsoft Attention's ``present`` [2, B, N, P + S, H]: what onnxruntime's kernel does
    (``ConcatStateChunk``): copy the past keys/values and the new ones (the projection's K and V
    parts, viewed as [2, B, N, S, H]) into one buffer along the sequence, with their bytes. Returns
    the keys and values attention reads when there is a past: the present's halves as free ``bsd``
    views (None without a past: attention reads the new ones)."""
    if sizes[1] != sizes[2]:
        raise cx.error(f"Attention with past/present stacks keys and values into one [2, B, N, S, H] "
                       f"tensor, but qkv_hidden_sizes gives keys {sizes[1]} and values {sizes[2]}")
    b, s = qkv.type.shape[0], qkv.type.shape[1]
    dt, past = qkv.type.dtype, cx.input(4)
    head_dim = to_dim(dim_floordiv(sizes[1], n))
    kv_t = cx.tensor(dt, (b, s, to_dim(dim_add(sizes[1], sizes[2]))))
    kv = cx.emit(Op.SLICE, [qkv], {"axis": 2, "part": "kv"}, types=[kv_t], bind=False, suffix="kv").outputs[0]
    new = cx.emit(Op.RESHAPE, [kv], {"layout_adapter": "bsd->2bnsh"}, types=[cx.tensor(dt, (2, b, n, s, head_dim))],
                  bind=False, suffix="kv_2bnsh").outputs[0]
    total = dim_add(past.type.shape[3], s) if past is not None else s
    present_t = cx.out_type_at(1) or cx.tensor(dt, (2, b, n, to_dim(total), head_dim))
    if past is not None:
        present = cx.emit(Op.CONCAT, [past, new], {"axis": 3}, types=[present_t], bind=False,
                          suffix="present").outputs[0]
    else:
        present = cx.emit(Op.COPY, [new], types=[present_t], bind=False, suffix="present").outputs[0]
    if cx.has_output(1):
        cx.bind_at(1, present)
    if past is None:
        return None
    halves = []
    for i, part in enumerate(("k", "v")):
        half = cx.emit(Op.SLICE, [present], {"axis": 0, "part": part, "index": i},
                       types=[cx.tensor(dt, tuple(present_t.shape[1:]))], bind=False, suffix=f"{part}_all").outputs[0]
        halves.append(_as_bsd(cx, half, f"{part}_all_bsd"))
    return halves[0], halves[1]


def _ms_attention(cx: NodeCx) -> None:
    """com.microsoft Attention: the packed QKV projection (dot + bias), then attention."""
    x, w, bias = cx.input(0), cx.input(1), cx.input(2)
    assert x is not None and w is not None
    n = heads(cx)
    sizes = cx.attr("qkv_hidden_sizes") or [to_dim(dim_floordiv(w.type.shape[1], 3))] * 3
    proj_t = cx.tensor(x.type.dtype, (x.type.shape[0], x.type.shape[1], w.type.shape[1]))
    qkv = dot(cx, x, w, (2,), (0,), types=[proj_t], bind=False, suffix="qkv").outputs[0]
    if bias is not None:
        qkv = cx.emit(Op.ADD, [qkv, bias], {"role": "bias"}, types=[proj_t], bind=False, suffix="qkv_bias").outputs[0]
    q, k, v = _split_qkv(cx, qkv, sizes)
    if cx.input(4) is not None or cx.has_output(1):
        k, v = _attention_present(cx, qkv, sizes, n) or (k, v)
    attrs = {"layout": "bsd", "num_heads": n, "kv_num_heads": n, CAUSAL: bool(cx.attr("unidirectional", 0))}
    band = None if attrs[CAUSAL] else attention_mask_band(cx, 3, nonzero=True) or attention_mask_band(cx, 5)
    if band is not None:
        attrs.update({**band_attrs(band), "causal_from": "mask"})   # mask_index / attention_bias (.masks)
    if cx.attr("scale"):
        attrs["scale"] = float(cx.attr("scale"))
    mask = cx.input(3)
    attention_core(cx, q, k, v, mask, attrs, [cx.out_type(0)], bind_index=[0])


def _as_bsd(cx: NodeCx, t: Value, suffix: str) -> Value:
    """A [B, N, L, H] key/value as a free [B, L, N*H] view (a cost-equivalent layout adapter)."""
    if t.type.rank != 4:
        return t
    b, n, length, h = t.type.shape
    return cx.emit(Op.RESHAPE, [t], {"layout_adapter": "bnsh->bsd"},
                   types=[cx.tensor(t.type.dtype, (b, length, dim_mul(n, h)))], bind=False, suffix=suffix).outputs[0]


def _with_past(cx: NodeCx, new: Value, past_index: int, out_index: int, heads: int, what: str) -> Value:
    """Append new keys (bsd) to a [B, N, P, H] cache; bind the present output; return keys as bsd."""
    past = cx.input(past_index)
    present_t = cx.out_type_at(out_index)
    if past is None and present_t is None:
        return new
    b, length, hidden = new.type.shape
    head_dim = to_dim(dim_floordiv(hidden, heads))
    as4 = cx.emit(Op.RESHAPE, [new], {"layout_adapter": "bsd->bnsh"},
                  types=[cx.tensor(new.type.dtype, (b, heads, length, head_dim))], bind=False,
                  suffix=f"{what}_4d").outputs[0]
    if past is not None:
        total = past.type.shape[2] if present_t is None else present_t.shape[2]
        t = present_t or cx.tensor(new.type.dtype, (b, heads, dim_add(past.type.shape[2], length), head_dim))
        present = cx.emit(Op.CONCAT, [past, as4], {"axis": 2}, types=[t], bind=False,
                          suffix=f"present_{what}").outputs[0]
    else:
        present, total = as4, length
    if present_t is not None:
        cx.bind_at(out_index, present)
    if past is None:
        return new
    return cx.emit(Op.RESHAPE, [present], {"layout_adapter": "bnsh->bsd"},
                   types=[cx.tensor(new.type.dtype, (b, total, hidden))], bind=False, suffix=f"{what}_all").outputs[0]


def _unpack(cx: NodeCx, packed: Value, parts: tuple[str, ...]) -> list[Value]:
    """A packed [B, S, N, len(parts), H] input's parts as free [B, S, N*H] views."""
    b, s, n, _, h = packed.type.shape
    hidden = to_dim(dim_mul(n, h))
    dt = packed.type.dtype
    flat = cx.emit(Op.RESHAPE, [packed], types=[cx.tensor(dt, (b, s, to_dim(dim_mul(hidden, len(parts)))))],
                   bind=False, suffix="".join(parts)).outputs[0]
    return [cx.emit(Op.SLICE, [flat], {"axis": 2, "part": part}, types=[cx.tensor(dt, (b, s, hidden))],
                    bind=False, suffix=part).outputs[0] for part in parts]


def _add_bias(cx: NodeCx, t: Value, bias: Value, what: str) -> Value:
    """``t`` plus its part of a packed [D + D + Dv] bias (``bias[0:D]``, ``[D:2D]``, ``[2D:]``: a free
    view the width of ``t``'s hidden dim), as onnxruntime adds it."""
    hidden = t.type.shape[-1]
    part = cx.emit(Op.SLICE, [bias], {"axis": 0, "part": what}, types=[cx.tensor(bias.type.dtype, (hidden,))],
                   bind=False, suffix=f"{what}_bias_part").outputs[0]
    return cx.emit(Op.ADD, [t, part], {"role": "bias"}, types=[t.type], bind=False, suffix=f"{what}_bias").outputs[0]


def _ms_mha(cx: NodeCx) -> None:
    q, k, v = cx.input(0), cx.input(1), cx.input(2)
    assert q is not None
    n = heads(cx)
    if k is None:
        if q.type.rank != 5:
            raise cx.error("MultiHeadAttention without key/value needs packed QKV [B, S, N, 3, H]")
        q, k, v = _unpack(cx, q, ("q", "k", "v"))
    elif v is None:
        if k.type.rank != 5:
            raise cx.error("MultiHeadAttention without value needs packed KV [B, L, N, 2, H] as its key")
        k, v = _unpack(cx, k, ("k", "v"))
    bias = cx.input(10 if cx.op_type == "DecoderMaskedMultiHeadAttention" else 3)   # DMMHA's 3 is mask_index
    if bias is not None:   # [D + D + Dv]; a [B, N, L, H] key/value cache is already projected: no bias
        q = _add_bias(cx, q, bias, "q")
        if k.type.rank == 3:
            k, v = _add_bias(cx, k, bias, "k"), _add_bias(cx, v, bias, "v")
    if k.type.rank == 3:
        k = _with_past(cx, k, 6, 1, n, "key")
        v = _with_past(cx, v, 7, 2, n, "value")
    else:
        for out, t in ((1, k), (2, v)):
            if cx.has_output(out):
                cx.bind_at(out, cx.emit(Op.IDENTITY, [t], types=[cx.out_type(out)], bind=False,
                                        suffix=f"present{out}").outputs[0])
        k, v = _as_bsd(cx, k, "k_bsd"), _as_bsd(cx, v, "v_bsd")
    attrs = {"layout": "bsd", "num_heads": n, "kv_num_heads": n, CAUSAL: bool(cx.attr("unidirectional", 0))}
    band = None if attrs[CAUSAL] else attention_mask_band(cx, 4, nonzero=True) or attention_mask_band(cx, 5)
    if band is not None:
        attrs.update({**band_attrs(band), "causal_from": "mask"})   # key_padding_mask / attention_bias (.masks)
    if cx.attr("scale"):
        attrs["scale"] = float(cx.attr("scale"))
    mask = cx.input(4) or cx.input(5)
    idx = [0] + ([3] if cx.has_output(3) else [])
    attention_core(cx, q, k, v, mask, attrs, [cx.out_type(i) for i in idx], bind_index=idx)


def _gqa_window(cx: NodeCx) -> int | None:
    """The IR window (keys per query, its own included) of a GroupQueryAttention: onnxruntime's
    ``local_window_size`` is the left window, so ``local_window_size + 1`` keys (0: the query's own
    key only, as onnxruntime's CPU kernel masks it); a negative one (default -1) is no window."""
    lws = cx.attr("local_window_size", -1)
    if isinstance(lws, bool) or not isinstance(lws, int):
        raise cx.error(f"GroupQueryAttention attribute local_window_size={lws!r} must be an INT")
    return lws + 1 if lws >= 0 else None


def _window_keys(cx: NodeCx, keys: Value, new: Any, window: int, what: str) -> Value:
    """The last ``min(total, window - 1 + new)`` keys (a free view): all that ``new`` windowed queries
    reach, what a sliding-window kernel reads (as the model builder's windowed layers are handed a
    cache capped at ``window - 1`` plus the new tokens; the full buffer stays the present output)."""
    b, total, hidden = keys.type.shape
    keep = to_dim(dim_min(total, dim_add(window - 1, new)))
    if keep == total:
        return keys
    return cx.emit(Op.SLICE, [keys], {"axis": 1, "part": "window"},
                   types=[cx.tensor(keys.type.dtype, (b, keep, hidden))], bind=False,
                   suffix=f"{what}_window").outputs[0]


#: ``graph.meta`` key for the positions a model's rotary caches hold (``cos_cache`` rows), read by
#: :meth:`narrowpipe.costmodel.serving.prepare.ServingGraph.check_context` (which spells it too).
POSITIONS_META = "max_positions"


def _record_positions(cx: NodeCx, cos_index: int) -> None:
    """onnxruntime refuses a total length above ``cos_cache``'s rows ('cos_cache dimension 0 shall not be
    less than total_sequence_length'): record that limit (the smallest over nodes) for serving to refuse."""
    cos = cx.input(cos_index)
    rows = cos.type.shape[0] if cos is not None and cos.type.rank >= 1 else None
    if isinstance(rows, int) and rows > 0:
        held = cx.graph.meta.get(POSITIONS_META)
        cx.graph.meta[POSITIONS_META] = min(rows, int(held)) if held else rows


def _ms_gqa(cx: NodeCx) -> None:
    q = cx.input(0)
    assert q is not None
    b, s, hq, hk, hd, _total = gqa_geometry(cx)
    if cx.attr("do_rotary", 0):
        _record_positions(cx, 7)
    k, v = cx.input(1), cx.input(2)
    if k is None or v is None:
        sizes = [to_dim(dim_mul(hq, hd)), to_dim(dim_mul(hk, hd)), to_dim(dim_mul(hk, hd))]
        q, k, v = _split_qkv(cx, q, sizes)
    if cx.attr("do_rotary", 0):
        q = cx.emit(Op.MUL, [q], {"role": "rotary"}, types=[q.type], bind=False, suffix="q_rotary").outputs[0]
        k = cx.emit(Op.MUL, [k], {"role": "rotary"}, types=[k.type], bind=False, suffix="k_rotary").outputs[0]
    k = _with_past(cx, k, 3, 1, hk, "key")
    v = _with_past(cx, v, 4, 2, hk, "value")
    attrs: dict[str, Any] = {"layout": "bsd", "num_heads": hq, "kv_num_heads": hk, CAUSAL: True}
    if cx.attr("scale"):
        attrs["scale"] = float(cx.attr("scale"))
    window = _gqa_window(cx)
    if window is not None:
        attrs[WINDOW] = window
        k, v = _window_keys(cx, k, s, window, "key"), _window_keys(cx, v, s, window, "value")
    attention_core(cx, q, k, v, cx.input(10) if cx.n_inputs() > 10 else None, attrs, [cx.out_type(0)],
                   bind_index=[0])


def _skip_norm(norm: Op) -> Callable[[NodeCx], None]:
    """Skip(Simplified)LayerNormalization: input + skip (+ bias), then the norm."""
    def fn(cx: NodeCx) -> None:
        x, skip = cx.input(0), cx.input(1)
        assert x is not None and skip is not None
        gamma = cx.input(2)
        beta = cx.input(3) if norm is Op.LAYER_NORM else None
        bias = cx.input(4) if norm is Op.LAYER_NORM else cx.input(3)
        s = cx.emit(Op.ADD, [x, skip], {"role": "skip"}, types=[x.type], bind=False, suffix="skip").outputs[0]
        if bias is not None:
            s = cx.emit(Op.ADD, [s, bias], {"role": "bias"}, types=[x.type], bind=False, suffix="bias").outputs[0]
        idx = [k for k in (0, 1, 2) if cx.has_output(k)]
        node = cx.emit(norm, [s] + [t for t in (gamma, beta) if t is not None],
                       {"axis": x.type.rank - 1, "epsilon": float(cx.attr("epsilon", 1e-12))},
                       types=[cx.out_type(k) for k in idx], bind=False)
        for k, value in zip(idx, node.outputs):
            cx.bind_at(k, value)
        if cx.has_output(3):
            cx.bind_at(3, s)
    return fn


def _fused_matmul(cx: NodeCx) -> None:
    """A dot_general reading A and B in :func:`.contrib_shapes.fused_matmul_axes`'s order: the
    transposes are strides onnxruntime's GEMM reads with, no copy."""
    a, b = cx.input(0), cx.input(1)
    assert a is not None and b is not None
    flags = {f: bool(cx.attr(f, 0)) for f in ("transA", "transB", "transBatchA", "transBatchB")}
    alpha = float(cx.attr("alpha", 1.0))
    ra, rb = a.type.rank, b.type.rank
    if ra < 2 or rb < 2 or not any(flags.values()):
        node = matmul(cx, a, b, bind=alpha == 1.0, types=cx.out_types())
    else:
        pa, pb = fused_matmul_axes(cx, ra, rb)
        r = len(pa)
        a, b = unsqueeze_front(cx, a, r, "lhs_unsqueeze"), unsqueeze_front(cx, b, r, "rhs_unsqueeze")
        node = dot(cx, a, b, (pa[-1],), (pb[-2],), pa[:-2], pb[:-2], bind=alpha == 1.0, types=cx.out_types(),
                   extra={k: v for k, v in flags.items() if v})
    if alpha != 1.0:
        cx.emit(Op.MUL, node.outputs, {"scalar": alpha, "role": "alpha"}, suffix="alpha")


def _embed_ln(cx: NodeCx) -> None:
    ids, seg, word, pos, segemb, gamma, beta = (cx.input(i) for i in range(7))
    assert ids is not None and word is not None
    out = cx.out_type_at(0)
    assert out is not None
    e = cx.emit(Op.GATHER, [word, ids], {"axis": 0}, types=[out], bind=False, suffix="word").outputs[0]
    if pos is not None:
        p = cx.emit(Op.GATHER, [pos, *cx.inputs(8)], {"axis": 0}, types=[out], bind=False, suffix="pos").outputs[0]
        e = cx.emit(Op.ADD, [e, p], types=[out], bind=False, suffix="add_pos").outputs[0]
    if seg is not None and segemb is not None:
        g = cx.emit(Op.GATHER, [segemb, seg], {"axis": 0}, types=[out], bind=False, suffix="seg").outputs[0]
        e = cx.emit(Op.ADD, [e, g], types=[out], bind=False, suffix="add_seg").outputs[0]
    y = cx.emit(Op.LAYER_NORM, [e] + [t for t in (gamma, beta) if t is not None], {"axis": 2}, types=[out],
                bind=False).outputs[0]
    cx.bind_at(0, y)
    if cx.has_output(1):
        mask = cx.input(7)
        m = cx.emit(Op.REDUCE_SUM, [mask] if mask is not None else [ids], {"axes": (1,), "keepdims": False},
                    types=[cx.out_type(1)], bind=False, suffix="mask_index").outputs[0]
        cx.bind_at(1, m)
    if cx.has_output(2):
        cx.bind_at(2, e)


def _bias_then(op: Op, **attrs: object) -> Callable[[NodeCx], None]:
    """BiasGelu, FastGelu(with bias), BiasSoftmax, BiasDropout: an add, then the op."""
    def fn(cx: NodeCx) -> None:
        x = cx.input(0)
        assert x is not None
        out = cx.out_types()[:1]
        bias = cx.input(1)
        if bias is not None:
            x = cx.emit(Op.ADD, [x, bias], {"role": "bias"}, types=out, bind=False, suffix="bias").outputs[0]
        node = cx.emit(op, [x], dict(attrs) or None, types=out, bind=False)
        cx.bind_at(0, node.outputs[0])
        for k in range(1, cx.n_outputs()):
            if cx.has_output(k):
                fill = cx.emit(Op.FILL, [], None, types=[cx.out_type(k)], bind=False, suffix=f"out{k}")
                cx.bind_at(k, fill.outputs[0])
    return fn


def _bias_add(cx: NodeCx) -> None:
    x, bias, skip = cx.input(0), cx.input(1), cx.input(2)
    out = cx.out_types()
    s = cx.emit(Op.ADD, [x, bias], {"role": "bias"}, types=out, bind=False, suffix="bias").outputs[0]
    cx.emit(Op.ADD, [s, skip], {"role": "skip"})


def _gemm_fast_gelu(cx: NodeCx) -> None:
    a, b, bias = cx.input(0), cx.input(1), cx.input(2)
    assert a is not None and b is not None
    out = cx.out_types()
    y = dot(cx, a, b, (a.type.rank - 1,), (0,), types=out, bind=False).outputs[0]
    if bias is not None:
        y = cx.emit(Op.ADD, [y, bias], {"role": "bias"}, types=out, bind=False, suffix="bias").outputs[0]
    cx.emit(Op.GELU, [y], {"approximate": "tanh"}, suffix="gelu")


def _fused_conv(cx: NodeCx) -> None:
    x, w, b, z = cx.input(0), cx.input(1), cx.input(2), cx.input(3)
    assert x is not None and w is not None
    out = cx.out_types()
    y = cx.emit(Op.CONV, [x, w], conv_attrs(cx, x, w, False), types=out, bind=False).outputs[0]
    for extra, role in ((b, "bias"), (z, "sum")):
        if extra is not None:
            y = cx.emit(Op.ADD, [y, extra], {"role": role, "axis": 1}, types=out, bind=False, suffix=role).outputs[0]
    act = str(cx.attr("activation", "") or "")
    op = {"Relu": Op.RELU, "Sigmoid": Op.SIGMOID, "Tanh": Op.TANH, "LeakyRelu": Op.LEAKY_RELU,
          "HardSigmoid": Op.HARDSIGMOID, "Clip": Op.CLAMP}.get(act, Op.IDENTITY)
    cx.emit(op, [y], {"activation": act} if act else None, suffix="act")


def _simple(op: Op, **attrs: object) -> Callable[[NodeCx], None]:
    def fn(cx: NodeCx) -> None:
        cx.emit(op, cx.inputs(), dict(attrs) or None)
    return fn


def _norm(op: Op) -> Callable[[NodeCx], None]:
    def fn(cx: NodeCx) -> None:
        rank = max(cx.rank(0), 1)
        axis = int(cx.attr("axis", -1))
        cx.emit(op, cx.inputs(), {"axis": axis + rank if axis < 0 else axis,
                                  "epsilon": float(cx.attr("epsilon", 1e-5))})
    return fn


def _rotary(cx: NodeCx) -> None:
    _record_positions(cx, 2)      # com.microsoft RotaryEmbedding: input, position_ids, cos_cache, sin_cache
    NN_LOWERINGS["RotaryEmbedding"](cx)


CONTRIB_LOWERINGS: dict[str, Callable[[NodeCx], None]] = {
    MS + "Attention": _ms_attention, MS + "MultiHeadAttention": _ms_mha,
    MS + "DecoderMaskedMultiHeadAttention": _ms_mha, MS + "GroupQueryAttention": _ms_gqa,
    MS + "SkipLayerNormalization": _skip_norm(Op.LAYER_NORM),
    MS + "SkipSimplifiedLayerNormalization": _skip_norm(Op.RMS_NORM),
    MS + "SimplifiedLayerNormalization": _norm(Op.RMS_NORM), MS + "LayerNormalization": _norm(Op.LAYER_NORM),
    MS + "FusedMatMul": _fused_matmul,
    MS + "EmbedLayerNormalization": _embed_ln, MS + "BiasGelu": _bias_then(Op.GELU),
    MS + "FastGelu": _bias_then(Op.GELU, approximate="tanh"), MS + "Gelu": _simple(Op.GELU),
    MS + "QuickGelu": _simple(Op.SILU, alpha=1.702), MS + "BiasAdd": _bias_add,
    MS + "BiasSoftmax": _bias_then(Op.SOFTMAX, axis=-1), MS + "BiasDropout": _bias_then(Op.IDENTITY),
    MS + "GemmFastGelu": _gemm_fast_gelu, MS + "FusedConv": _fused_conv,
    MS + "RotaryEmbedding": _rotary,
    MS + "Trilu": _simple(Op.TRIANGULAR),
}

# numel is re-exported for symmetry with the standard rules (used by callers sizing contrib ops)
