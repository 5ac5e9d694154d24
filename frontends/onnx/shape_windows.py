"""Output-shape rules of windowed and reducing ops: convolution and pooling windows (with pads,
dilations, ``auto_pad`` and ``ceil_mode``), transposed convolutions, depth/space block moves,
reductions, top-k and resize, all symbolic: ONNX's own inference gives up on a symbolic spatial dim,
and a dynamic-resolution UNet or super-resolution model would otherwise ask for two dims per layer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...ir import DType
from ...ir.windows import conv_spatial, pool_spatial, window_out
from .fold import as_dims, as_ints
from .shape_base import Dim, RuleContext, length_of, max_dim, rule_error, unknown_dims
from .shapes import Bounded, OutSpec
from .symdims import dim_floordiv, dim_mul

__all__ = ["WINDOW_RULES", "conv_out_dim"]


def conv_out_dim(x: Dim, k: int, stride: int, dilation: int, pad_total: int, ceil_mode: bool = False) -> Dim:
    """floor((x + pads - dilation*(k-1) - 1) / stride) + 1 (ceil with ``ceil_mode``): the IR's one
    formula (:func:`narrowpipe.ir.windows.window_out`), which the verifier holds the node to."""
    return window_out(x, k, stride, dilation, pad_total, ceil_mode)


#: Convolution-like ops (output channels from the weight) and the input index of their weight; every
#: other op ``_window`` serves is a pool (channels kept). onnxruntime's ``com.microsoft::FusedConv``
#: (Conv + activation, emitted by every ORT-optimized CNN) is a Conv here, domain aside.
_CONV_WEIGHT: dict[str, int] = {"Conv": 1, "ConvInteger": 1, "QLinearConv": 3, "DeformConv": 1, "FusedConv": 1}


def _window(cx: RuleContext) -> list[OutSpec | None]:
    """Conv and pooling: output spatial dims from kernel, stride, dilation, pads or auto_pad."""
    x = cx.shape(0)
    if x is None or len(x) < 3:
        return [None] * cx.n_outputs()
    n_sp = len(x) - 2
    kernel = cx.attr("kernel_shape")
    w_index = _CONV_WEIGHT.get(cx.op_type)
    if kernel is None and w_index is not None:
        w = cx.shape(w_index)
        if w is None or not all(isinstance(d, int) for d in w[2:]):
            return [None] * cx.n_outputs()
        kernel = list(w[2:])
    if kernel is None:
        return [None] * cx.n_outputs()
    strides = cx.attr("strides") or [1] * n_sp
    dil = cx.attr("dilations") or [1] * n_sp
    pads = cx.attr("pads") or [0] * (2 * n_sp)
    if not _well_formed(kernel, strides, dil, pads, n_sp):   # the lowering names what is wrong
        return [None] * cx.n_outputs()
    attrs = {"kernel": kernel, "stride": strides, "dilation": dil, "padding": pads,
             "auto_pad": str(cx.attr("auto_pad") or "NOTSET"), "ceil_mode": bool(cx.attr("ceil_mode", 0))}
    spatial = conv_spatial(attrs, x[2:], kernel) if w_index is not None else \
        [s[0] for s in pool_spatial(attrs, x[2:])]
    if w_index is not None:
        w = cx.shape(w_index)
        if w is None:
            return [None]
        return [(None, (x[0], w[0], *spatial))]
    out = (None, (x[0], x[1], *spatial))
    return [out] * cx.n_outputs()


def _conv_transpose(cx: RuleContext) -> list[OutSpec | None]:
    """ConvTranspose: ``(x-1)*stride - pads + dilation*(k-1) + output_padding + 1`` per spatial dim,
    ``x*stride`` under ``auto_pad`` SAME_*, or ``output_shape`` as stated; channels ``W[1] * group``."""
    x, w = cx.shape(0), cx.shape(1)
    if x is None or w is None or len(x) < 3 or len(w) != len(x):
        return [None]
    n_sp = len(x) - 2
    kernel = cx.attr("kernel_shape") or list(w[2:])
    strides = cx.attr("strides") or [1] * n_sp
    dil = cx.attr("dilations") or [1] * n_sp
    pads = cx.attr("pads") or [0] * (2 * n_sp)
    out_pad = cx.attr("output_padding") or [0] * n_sp
    shape = cx.attr("output_shape")
    if not _well_formed(kernel, strides, dil, pads, n_sp) or len(out_pad) != n_sp \
            or (shape is not None and len(shape) not in (n_sp, n_sp + 2)):
        return [None]   # the lowering names what is wrong
    attrs = {"stride": strides, "dilation": dil, "padding": pads, "output_padding": out_pad,
             "auto_pad": str(cx.attr("auto_pad") or "NOTSET"), "transposed": True,
             "output_shape": list(shape) if shape else None}
    spatial = conv_spatial(attrs, x[2:], kernel)
    return [(None, (x[0], dim_mul(w[1], int(cx.attr("group", 1))), *spatial))]


def _depth_space(cx: RuleContext) -> list[OutSpec | None]:
    """DepthToSpace [N, C, H, W] -> [N, C/b^2, H*b, W*b]; SpaceToDepth the inverse. A known size
    that does not divide is a broken model (onnxruntime refuses it)."""
    x, b = cx.shape(0), int(cx.attr("blocksize", 1))
    if x is None or len(x) != 4 or b < 1:
        return [None]
    to_space = cx.op_type == "DepthToSpace"
    divided = (x[1],) if to_space else (x[2], x[3])
    by = b * b if to_space else b
    for d in divided:
        if isinstance(d, int) and d % by:
            raise rule_error(cx, f"{'channels' if to_space else 'spatial dim'} {d} of input "
                                 f"{list(map(str, x))} is not divisible by {by} (blocksize {b})")
    if to_space:
        return [(None, (x[0], dim_floordiv(x[1], by), dim_mul(x[2], b), dim_mul(x[3], b)))]
    return [(None, (x[0], dim_mul(x[1], by), dim_floordiv(x[2], b), dim_floordiv(x[3], b)))]


def _well_formed(kernel: list[Any], strides: list[Any], dil: list[Any], pads: list[Any], n_sp: int) -> bool:
    """Whether the window attributes can be computed with (positive strides and dilations, one per
    spatial dim, begin and end pads): else the rule gives no answer rather than dividing by zero."""
    lists = (kernel, strides, dil, pads)
    if not all(isinstance(v, list) and all(isinstance(d, int) for d in v) for v in lists):
        return False
    return (len(kernel), len(strides), len(dil), len(pads)) == (n_sp, n_sp, n_sp, 2 * n_sp) and \
        min(strides + dil) >= 1


def _global_pool(cx: RuleContext) -> list[OutSpec | None]:
    x = cx.shape(0)
    if x is None:
        return [None]
    return [(None, tuple(x[:2]) + (1,) * (len(x) - 2))]


def _reduce(cx: RuleContext) -> list[OutSpec | None]:
    x = cx.shape(0)
    if x is None:
        return [None]
    keep = bool(cx.attr("keepdims", 1))
    if cx.op_type in ("ArgMax", "ArgMin"):
        axes: list[int] | None = [int(cx.attr("axis", 0))]
    elif cx.n_inputs() > 1 and cx.input(1) is not None:
        axes = as_ints(cx.known(1))
        if axes is None:
            if keep:
                return [(None, tuple(Bounded(d) for d in x))]
            n = length_of(cx, 1)
            return [unknown_dims(cx, None if n is None else len(x) - n, max_dim(x))]
    else:
        axes = cx.attr("axes")
    if not axes:
        if cx.attr("noop_with_empty_axes", 0):
            return [(None, tuple(x))]
        axes = list(range(len(x)))
    drop = {a + len(x) if a < 0 else a for a in axes}
    if keep:
        return [(None, tuple(1 if i in drop else d for i, d in enumerate(x)))]
    return [(None, tuple(d for i, d in enumerate(x) if i not in drop))]


def _topk(cx: RuleContext) -> list[OutSpec | None]:
    x = cx.shape(0)
    k = as_dims(cx.known(1)) if cx.opset >= 10 else [cx.attr("k")]
    if x is not None and not k:
        axis = int(cx.attr("axis", -1))
        axis = axis + len(x) if axis < 0 else axis
        dims = tuple(Bounded(d) if i == axis else d for i, d in enumerate(x))
        return [(None, dims), (DType.INT64, dims)]
    if x is None or not k or k[0] is None:
        return [None, None]
    axis = int(cx.attr("axis", -1))
    axis = axis + len(x) if axis < 0 else axis
    out = list(x)
    out[axis] = k[0]
    return [(None, tuple(out)), (DType.INT64, tuple(out))]


def _resize(cx: RuleContext) -> list[OutSpec | None]:
    x = cx.shape(0)
    if x is None:
        return [None]
    k1 = cx.known(1) if cx.n_inputs() > 1 else None
    if cx.op_type == "Upsample":
        scales = cx.attr("scales") if cx.opset < 9 else (k1.tolist() if k1 is not None else None)
        sizes = None
    else:
        k3 = cx.known(3) if cx.n_inputs() > 3 else None
        sizes = as_dims(k3) if k3 is not None and k3.size else None
        k2 = cx.known(2) if cx.n_inputs() > 2 else None
        scales = k2.tolist() if k2 is not None and k2.size else None
        if cx.opset < 11 and k1 is not None:
            scales = k1.tolist()
    axes = cx.attr("axes")
    if sizes is not None:
        if axes is None and len(sizes) == len(x):
            return [(None, tuple(sizes))]
        if axes is not None:
            out = list(x)
            for a, s in zip(axes, sizes):
                out[a] = s
            return [(None, tuple(out))]
        return [None]
    if scales is None:
        return [unknown_dims(cx, len(x))]
    axes = list(axes) if axes is not None else list(range(len(x)))
    out = list(x)
    for a, s in zip(axes, scales):
        d = x[a]
        if float(s).is_integer():
            out[a] = dim_mul(d, int(s))
        elif isinstance(d, int):
            out[a] = int(np.floor(d * float(s)))
        elif (1 / float(s)).is_integer():
            out[a] = dim_floordiv(d, int(1 / float(s)))
        else:
            return [None]
    return [(None, tuple(out))]


WINDOW_RULES: dict[str, Callable[[Any], list[OutSpec | None]]] = {
    "Conv": _window, "ConvInteger": _window, "QLinearConv": _window, "MaxPool": _window,
    "ConvTranspose": _conv_transpose, "DepthToSpace": _depth_space, "SpaceToDepth": _depth_space,
    "AveragePool": _window, "LpPool": _window, "GlobalAveragePool": _global_pool,
    "GlobalMaxPool": _global_pool, "GlobalLpPool": _global_pool, "ReduceSum": _reduce,
    "ReduceMean": _reduce, "ReduceMax": _reduce, "ReduceMin": _reduce, "ReduceProd": _reduce,
    "ReduceL1": _reduce, "ReduceL2": _reduce, "ReduceLogSum": _reduce, "ReduceLogSumExp": _reduce,
    "ReduceSumSquare": _reduce, "ArgMax": _reduce, "ArgMin": _reduce, "TopK": _topk, "Resize": _resize,
    "Upsample": _resize,
}
