"""Lowerings of the aten neural-network ops: attention, normalizations, softmax, dropout, pooling,
resizing, and activations that decompose into several canonical ops (glu, lerp, addcmul)."""

from __future__ import annotations

from math import ceil, prod

import torch.fx as fx

from ...ir import CAUSAL, Dim, DType, Node, Op, TensorType, Value
from ..mask_pattern import band_attrs
from .aten_args import arg, ints, norm_axis, rank_of, scalar, tensor_meta
from .lowering import AtenLowerer

__all__ = ["NN_LOWERINGS"]


# -- attention ------------------------------------------------------------------------------------

def _as_bhsd(cx: AtenLowerer, n: fx.Node, x: Value | None, lead: tuple[Dim, ...] | None = None,
             name: str = "") -> Value | None:
    """``x [..., L, E]`` as ``[prod(leading but last), leading last, L, E]``: a free view. torch's SDPA
    takes any number of leading dims and reads the one before ``L`` as the heads (``enable_gqa``), so
    that dim stays the heads and the others are the batch. ``lead``: the query's leading dims, which a
    mask broadcasts to (expanded first when its own leading dims differ, so the views line up)."""
    if x is None or (x.type.rank == 4 and lead is None):
        return x
    shape = tuple(x.type.shape)
    if lead is not None:   # a mask: left-pad to the query's rank, expand leading dims that differ
        if x.type.rank <= 2 or x.type.rank > len(lead) + 2:
            return x       # [L, S] or [S] broadcasts against any [B, H, L, S] as it is
        shape = (1,) * (len(lead) + 2 - len(shape)) + shape
        if any(d != 1 for d in shape[:-2]) and tuple(shape[:-2]) != lead:
            shape = (*lead, *shape[-2:])
            x = cx.emit(Op.EXPAND, [x], n, types=[x.type.with_shape(shape)], bind=False,
                        name=f"{n.name}_{name}_expand").outputs[0]
    *head, rows, cols = shape
    heads = head[-1] if head else 1
    bhsd = (prod(head[:-1], start=1), heads, rows, cols)
    if tuple(x.type.shape) == bhsd:
        return x
    return cx.emit(Op.RESHAPE, [x], n, types=[x.type.with_shape(bhsd)], bind=False,
                   name=f"{n.name}_{name}_bhsd").outputs[0]


_Operands = tuple[Value | None, Value | None, Value | None, Value | None, list[TensorType] | None]


def _bhsd_operands(cx: AtenLowerer, n: fx.Node, q: Value | None, k: Value | None, v: Value | None,
                   m: Value | None) -> _Operands:
    """q, k, v and the mask viewed as ``[B, H, L, E]`` (the layout ``ATTENTION`` reads) where the
    query is not 4-D (3-D ``[H, L, E]``, 5-D ...), and the attention node's output type in that
    layout (None: the query was 4-D and the fx node's own type is it)."""
    out = cx.out_types(n)[0]
    if q is None or q.type.rank == 4:
        return q, k, v, m, None
    lead = tuple(q.type.shape[:-2])
    bhsd = [out.with_shape((prod(lead[:-1], start=1), lead[-1] if lead else 1, *out.shape[-2:]))]
    return (_as_bhsd(cx, n, q, name="q"), _as_bhsd(cx, n, k, name="k"), _as_bhsd(cx, n, v, name="v"),
            _as_bhsd(cx, n, m, lead, "mask"), bhsd)


def _restore_rank(cx: AtenLowerer, n: fx.Node, att: Node, bhsd_out: list[TensorType] | None) -> None:
    """The ``[B, H, L, Ev]`` output viewed back as the caller's ``[..., L, Ev]`` (a free view)."""
    if bhsd_out is not None:
        cx.emit(Op.RESHAPE, att.outputs, n, name=f"{n.name}_out")


def _attention(cx: AtenLowerer, n: fx.Node, mask: object, causal: object, scale: object,
               dropout: object = 0.0) -> None:
    q, k, v = (cx.value(x) for x in n.args[:3])
    m = cx.value(mask)
    q, k, v, m, bhsd_out = _bhsd_operands(cx, n, q, k, v, m)
    attrs: dict[str, object] = {"layout": "bhsd", CAUSAL: bool(causal), "dropout": scalar(dropout) or 0.0}
    band = cx.mask_band(mask) if not causal and m is not None else None
    if band is not None:    # serving runtimes call the kernel with causal=True (and the window)
        attrs.update({**band_attrs(band), "causal_from": "mask"})
    if scale is not None:
        attrs["scale"] = scalar(scale)
    att = cx.emit(Op.ATTENTION, [q, k, v] + ([m] if m is not None else []), n, attrs, types=bhsd_out,
                  bind=bhsd_out is None)
    _restore_rank(cx, n, att, bhsd_out)


def _sdpa(cx: AtenLowerer, n: fx.Node) -> None:
    _attention(cx, n, arg(n, 3, "attn_mask"), arg(n, 5, "is_causal", False), n.kwargs.get("scale"),
               arg(n, 4, "dropout_p", 0.0))


def _sdpa_flash(cx: AtenLowerer, n: fx.Node) -> None:  # (q, k, v, dropout_p, is_causal, ...)
    _attention(cx, n, n.kwargs.get("attn_mask"), arg(n, 4, "is_causal", False), n.kwargs.get("scale"),
               arg(n, 3, "dropout_p", 0.0))


def _sdpa_efficient(cx: AtenLowerer, n: fx.Node) -> None:  # (q, k, v, attn_bias, lse, dropout_p, is_causal)
    _attention(cx, n, arg(n, 3, "attn_bias"), arg(n, 6, "is_causal", False), n.kwargs.get("scale"),
               arg(n, 5, "dropout_p", 0.0))


def _sdpa_backward(cx: AtenLowerer, n: fx.Node) -> None:
    grad, q, k, v = (cx.value(x) for x in n.args[:4])
    cx.emit(Op.ATTENTION_BACKWARD, [grad, q, k, v], n, {"layout": "bhsd"})


# -- normalization --------------------------------------------------------------------------------

def _norm(op: Op, first_weight: int, *, axis_from_shape: int | None = None, training: int | None = None):
    def fn(cx: AtenLowerer, n: fx.Node) -> None:
        x = cx.value(n.args[0])
        assert x is not None
        extra = cx.values(n.args[first_weight:first_weight + 4]) if first_weight else []
        attrs: dict[str, object] = {}
        if axis_from_shape is not None:
            normalized = arg(n, axis_from_shape, "normalized_shape", ())
            attrs["axis"] = x.type.rank - len(normalized)
        if training is not None:
            attrs["training"] = bool(arg(n, training, "training", False))
        if op is Op.GROUP_NORM:
            groups = n.args[1] if isinstance(n.args[1], int) else arg(n, 6, "group")
            attrs["num_groups"] = int(groups)
        cx.emit(op, [x, *extra], n, attrs)
    return fn


def _native_group_norm(cx: AtenLowerer, n: fx.Node) -> None:
    x = cx.value(n.args[0])
    cx.emit(Op.GROUP_NORM, [x, *cx.values(n.args[1:3])], n, {"num_groups": int(arg(n, 6, "group"))})


def _softmax(op: Op):
    def fn(cx: AtenLowerer, n: fx.Node) -> None:
        cx.emit(op, [cx.value(n.args[0])], n, {"axis": norm_axis(n.args[1], rank_of(n.args[0]))})
    return fn


def _dropout(cx: AtenLowerer, n: fx.Node) -> None:
    """Identity in eval mode; in training a random mask and a multiply."""
    x = cx.value(n.args[0])
    p, train = arg(n, 1, "p", 0.5), arg(n, 2, "train", True)
    if not train or p == 0:
        cx.alias(n, x)
        return
    assert x is not None
    mask = cx.emit(Op.RANDOM, [], n, {"distribution": "bernoulli", "p": scalar(p)},
                   types=[TensorType(DType.BOOL, x.type.shape)],
                   bind=False, name=f"{n.name}_mask").outputs[0]
    out = cx.emit(Op.MUL, [x, mask], n, types=[x.type], bind=False).outputs[0]
    if isinstance(n.meta.get("val"), (list, tuple)):
        cx.env[n] = [out, mask]
    else:
        cx.env[n] = out


# -- pooling and resizing -------------------------------------------------------------------------

def _pool(kind: str, adaptive: bool = False):
    def fn(cx: AtenLowerer, n: fx.Node) -> None:
        x = tensor_meta(n.args[0])
        attrs: dict[str, object] = {"kind": kind}
        if adaptive:
            out = n.meta.get("val")
            out = out[0] if isinstance(out, (list, tuple)) else out
            spatial_in = [int(d) for d in x.shape[2:]] if x is not None else []
            spatial_out = [int(d) for d in out.shape[2:]] if out is not None else []
            attrs["kernel"] = tuple(ceil(i / max(o, 1)) for i, o in zip(spatial_in, spatial_out))
        else:
            k = arg(n, 1, "kernel_size", 1)
            spatial = max(rank_of(n.args[0]) - 2, 1)
            kernel = ints(k, spatial)
            attrs["kernel"], spatial = kernel, len(kernel)   # an unbatched input has one leading dim, not two
            attrs["stride"] = ints(arg(n, 2, "stride", None) or k, spatial)
            attrs["padding"] = ints(arg(n, 3, "padding", 0), spatial)
            if kind == "max":   # max_pool(x, kernel, stride, padding, dilation, ceil_mode)
                attrs["dilation"] = ints(arg(n, 4, "dilation", 1), spatial)
            attrs["ceil_mode"] = bool(arg(n, 5 if kind == "max" else 4, "ceil_mode", False))
        cx.emit(Op.POOL, [cx.value(n.args[0])], n, attrs)
    return fn


def _resize(mode: str):
    def fn(cx: AtenLowerer, n: fx.Node) -> None:
        cx.emit(Op.RESIZE, [cx.value(n.args[0])], n, {"mode": mode, "spatial_dims": max(rank_of(n.args[0]) - 2, 1)})
    return fn


# -- activations that are several canonical ops -------------------------------------------------

def _glu(cx: AtenLowerer, n: fx.Node) -> None:
    """glu(x) = a * sigmoid(b) with a, b the two halves of x (slices are views)."""
    x = cx.value(n.args[0])
    out_t = cx.out_types(n)[0]
    half = cx.emit(Op.SLICE, [x], n, {"part": "second_half"}, types=[out_t], bind=False, name=f"{n.name}_b").outputs[0]
    first = cx.emit(Op.SLICE, [x], n, {"part": "first_half"}, types=[out_t], bind=False, name=f"{n.name}_a").outputs[0]
    gate = cx.emit(Op.SIGMOID, [half], n, types=[out_t], bind=False, name=f"{n.name}_gate").outputs[0]
    cx.emit(Op.MUL, [first, gate], n)


def _lerp(cx: AtenLowerer, n: fx.Node) -> None:
    """lerp(a, b, w) = a + w * (b - a): three elementwise ops."""
    a, b, w = cx.value(n.args[0]), cx.value(n.args[1]), cx.value(n.args[2])
    t = cx.out_types(n)
    d = cx.emit(Op.SUB, [b, a], n, types=t, bind=False, name=f"{n.name}_diff").outputs[0]
    m = cx.emit(Op.MUL, [d] + ([w] if w is not None else []), n, {"scalar": scalar(n.args[2])} if w is None else None,
                types=t, bind=False, name=f"{n.name}_scale").outputs[0]
    cx.emit(Op.ADD, [a, m], n)


def _addc(op: Op):
    """addcmul/addcdiv(a, t1, t2, value) = a + value * (t1 op t2)."""
    def fn(cx: AtenLowerer, n: fx.Node) -> None:
        a, t1, t2 = (cx.value(x) for x in n.args[:3])
        t = cx.out_types(n)
        p = cx.emit(op, [t1, t2], n, types=t, bind=False, name=f"{n.name}_{op.value}").outputs[0]
        value = arg(n, 3, "value", 1)
        if value != 1:
            p = cx.emit(Op.MUL, [p], n, {"scalar": scalar(value)}, types=t, bind=False,
                        name=f"{n.name}_value").outputs[0]
        cx.emit(Op.ADD, [a, p], n)
    return fn


def _weight_norm(cx: AtenLowerer, n: fx.Node) -> None:
    """``_weight_norm(v, g, dim)`` as torch's composite computes it, ``v * (g / norm_except_dim(v))``:
    a 2-norm of ``v`` over every dim but ``dim`` (``g``'s shape), a division, a broadcast multiply.
    Three canonical ops, each with a cost and a backward rule (wav2vec2's positional conv)."""
    v, g = cx.value(n.args[0]), cx.value(n.args[1])
    if v is None or g is None:
        cx.emit(Op.UNKNOWN, cx.values(n.args), n, {"source_op": str(n.target)})
        return
    dim = arg(n, 2, "dim", 0)
    keep = norm_axis(dim, v.type.rank) if isinstance(dim, int) and dim != -1 else None
    axes = tuple(a for a in range(v.type.rank) if a != keep)
    shape = tuple(d if a == keep else 1 for a, d in enumerate(v.shape))
    norm = cx.emit(Op.REDUCE_NORM, [v], n, {"axes": axes, "keepdims": True}, types=[TensorType(v.dtype, shape)],
                   bind=False, name=f"{n.name}_norm").outputs[0]
    ratio = cx.emit(Op.DIV, [g, norm], n, types=[TensorType(v.dtype, shape)], bind=False,
                    name=f"{n.name}_scale").outputs[0]
    cx.emit(Op.MUL, [v, ratio], n)


NN_LOWERINGS = {
    "_weight_norm": _weight_norm,
    "scaled_dot_product_attention": _sdpa,
    "_scaled_dot_product_flash_attention_for_cpu": _sdpa_flash,
    "_scaled_dot_product_flash_attention": _sdpa_flash,
    "_scaled_dot_product_efficient_attention": _sdpa_efficient,
    "_scaled_dot_product_cudnn_attention": _sdpa_efficient,
    "_scaled_dot_product_attention_math": _sdpa,
    "_scaled_dot_product_flash_attention_backward": _sdpa_backward,
    "_scaled_dot_product_flash_attention_for_cpu_backward": _sdpa_backward,
    "_scaled_dot_product_efficient_attention_backward": _sdpa_backward,
    "_scaled_dot_product_cudnn_attention_backward": _sdpa_backward,
    "layer_norm": _norm(Op.LAYER_NORM, 2, axis_from_shape=1),
    "native_layer_norm": _norm(Op.LAYER_NORM, 2, axis_from_shape=1),
    "rms_norm": _norm(Op.RMS_NORM, 2, axis_from_shape=1),
    "_fused_rms_norm": _norm(Op.RMS_NORM, 2, axis_from_shape=1),
    "group_norm": _norm(Op.GROUP_NORM, 2),
    "native_group_norm": _native_group_norm,
    "batch_norm": _norm(Op.BATCH_NORM, 1, training=5),
    "native_batch_norm": _norm(Op.BATCH_NORM, 1, training=5),
    "_native_batch_norm_legit": _norm(Op.BATCH_NORM, 1, training=5),
    "_native_batch_norm_legit_functional": _norm(Op.BATCH_NORM, 1, training=5),
    "_native_batch_norm_legit_no_training": _norm(Op.BATCH_NORM, 1),
    "instance_norm": _norm(Op.INSTANCE_NORM, 1),
    "softmax": _softmax(Op.SOFTMAX), "_softmax": _softmax(Op.SOFTMAX), "_safe_softmax": _softmax(Op.SOFTMAX),
    "log_softmax": _softmax(Op.LOG_SOFTMAX), "_log_softmax": _softmax(Op.LOG_SOFTMAX),
    "dropout": _dropout, "native_dropout": _dropout, "feature_dropout": _dropout, "alpha_dropout": _dropout,
    "max_pool1d": _pool("max"), "max_pool2d": _pool("max"), "max_pool3d": _pool("max"),
    "max_pool2d_with_indices": _pool("max"), "max_pool3d_with_indices": _pool("max"),
    "avg_pool1d": _pool("avg"), "avg_pool2d": _pool("avg"), "avg_pool3d": _pool("avg"),
    "adaptive_avg_pool1d": _pool("avg", True), "adaptive_avg_pool2d": _pool("avg", True),
    "adaptive_avg_pool3d": _pool("avg", True), "_adaptive_avg_pool2d": _pool("avg", True),
    "_adaptive_avg_pool3d": _pool("avg", True), "adaptive_max_pool1d": _pool("max", True),
    "adaptive_max_pool2d": _pool("max", True), "adaptive_max_pool3d": _pool("max", True),
    "upsample_nearest1d": _resize("nearest"), "upsample_nearest2d": _resize("nearest"),
    "upsample_nearest3d": _resize("nearest"), "_upsample_nearest_exact1d": _resize("nearest"),
    "_upsample_nearest_exact2d": _resize("nearest"), "_upsample_nearest_exact3d": _resize("nearest"),
    "upsample_linear1d": _resize("linear"), "upsample_bilinear2d": _resize("linear"),
    "upsample_trilinear3d": _resize("linear"), "_upsample_bilinear2d_aa": _resize("linear"),
    "upsample_bicubic2d": _resize("cubic"), "_upsample_bicubic2d_aa": _resize("cubic"),
    "grid_sampler_2d": _resize("linear"), "grid_sampler": _resize("linear"),
    "glu": _glu, "lerp": _lerp, "addcmul": _addc(Op.MUL), "addcdiv": _addc(Op.DIV),
}
