"""Lowering recorded elementwise ops, normalizations, softmaxes and reductions: vector-unit work.

These families are table-driven: one builder serves every name in its table (``ELEMENTWISE``, the
norms, the reductions), so a new aten spelling is a table row, not a function. ``ELEMENTWISE`` is
the torch frontend's name table plus eager-only backward names, so both paths map a name alike.
"""

from __future__ import annotations

from typing import Any

from ...ir import DType, Graph, Op, TensorType
from ..torch.aten_names import ELEMENTWISE_OPS
from .call import Builder, Call, GraphBuilder, bool_arg, bool_mask, broadcast, int_arg, ints
from .read import TensorArg

__all__ = ["ELEMENTWISE", "BUILDERS", "elementwise"]

#: aten name -> canonical elementwise op; the same names as the torch frontend's table (a test pins it).
ELEMENTWISE: dict[str, Op] = {
    **ELEMENTWISE_OPS,
    # eager-only names (backward kernels, where): one elementwise pass each
    "where": Op.WHERE, "threshold_backward": Op.WHERE, "gelu_backward": Op.GELU, "silu_backward": Op.SILU,
    "sigmoid_backward": Op.MUL, "tanh_backward": Op.MUL, "hardtanh_backward": Op.WHERE,
}
_BOOL_OUT = frozenset({Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE, Op.ISNAN, Op.ISINF})
_SOFTMAXES = ("softmax", "_softmax", "_safe_softmax", "log_softmax", "_log_softmax")


def elementwise(c: Call) -> Graph | None:
    op = ELEMENTWISE[c.key]
    ts = c.tensors()
    if not ts:
        return None
    shape = ts[0].shape if c.inplace else broadcast([t.shape for t in ts])
    if shape is None:
        return None
    if op in _BOOL_OUT:
        dtype = DType.BOOL
    else:
        floats = [t.dtype for t in ts if t.dtype is not None and t.dtype.is_float and t.shape]
        dtype = floats[0] if floats else (ts[0].dtype or c.default_dtype)
    b = GraphBuilder(c)
    return b.done(b.node(op, [b.input(t) for t in ts], shape, dtype))


_NORMS: dict[str, tuple[Op, int]] = {   # name -> (op, index of the first weight tensor)
    "layer_norm": (Op.LAYER_NORM, 2), "native_layer_norm": (Op.LAYER_NORM, 2),
    "rms_norm": (Op.RMS_NORM, 2), "_fused_rms_norm": (Op.RMS_NORM, 2),
    "group_norm": (Op.GROUP_NORM, 2), "native_group_norm": (Op.GROUP_NORM, 1),
    "batch_norm": (Op.BATCH_NORM, 1), "_batch_norm_impl_index": (Op.BATCH_NORM, 1),
    "native_batch_norm": (Op.BATCH_NORM, 1), "_native_batch_norm_legit": (Op.BATCH_NORM, 1),
    "_native_batch_norm_legit_no_training": (Op.BATCH_NORM, 1), "cudnn_batch_norm": (Op.BATCH_NORM, 1),
    "instance_norm": (Op.INSTANCE_NORM, 1),
}


def _norm(c: Call) -> Graph | None:
    op, first = _NORMS[c.key]
    x = c.t(0)
    if x is None or not x.shape:
        return None
    attrs: dict[str, Any] = {}
    if op in (Op.LAYER_NORM, Op.RMS_NORM):
        normalized = ints(c.c(1)) or (x.shape[-1],)
        attrs["axis"] = len(x.shape) - len(normalized)
    elif op is Op.GROUP_NORM:
        attrs["num_groups"] = int_arg(c.c(6) if c.key == "native_group_norm" else c.c(1), 1)
    elif op is Op.BATCH_NORM:
        attrs["training"] = c.key != "_native_batch_norm_legit_no_training" and bool_arg(c.c(5))
    b = GraphBuilder(c)
    ins = [b.input(x)] + [b.input(t) for t in (c.t(i) for i in range(first, first + 4)) if t is not None]
    return b.done(b.node(op, ins, x.shape, x.dtype or c.default_dtype, attrs))


def _softmax(c: Call) -> Graph | None:
    x = c.t(0)
    if x is None or not x.shape:
        return None
    op = Op.LOG_SOFTMAX if "log_softmax" in c.key else Op.SOFTMAX
    b = GraphBuilder(c)
    return b.done(b.node(op, [b.input(x)], x.shape, x.dtype or c.default_dtype,
                         {"axis": int_arg(c.c(1), -1) % len(x.shape)}))


#: name -> (op, index of the weight, of the output mask): one backward kernel writing the gradients
#: its mask asks for (input, weight, bias), as :mod:`narrowpipe.costmodel.training.grad_norm` emits it.
_NORM_GRADS: dict[str, tuple[Op, int, int]] = {
    "native_layer_norm_backward": (Op.LAYER_NORM, 5, 7), "native_batch_norm_backward": (Op.BATCH_NORM, 2, 9),
    "native_group_norm_backward": (Op.GROUP_NORM, 4, 9),
}


def _norm_grad(c: Call) -> Graph | None:
    op, wi, mi = _NORM_GRADS[c.key]
    dy, x, w = c.t(0), c.t(1), c.t(wi)
    if dy is None or x is None or not x.shape or dy.shape != x.shape:
        return None
    want = bool_mask(c.c(mi), 3)
    # the kernel's first output is dx (as the training pass has it), then the parameter gradients asked for
    names = ["input", *(g for g, on in zip(("weight", "bias"), want[1:]) if on and w is not None)]
    attrs: dict[str, Any] = {"role": "grad", "grads": tuple(names)}
    if op is Op.LAYER_NORM:
        attrs["axis"] = len(x.shape) - len(ints(c.c(2)) or (x.shape[-1],))
    elif op is Op.GROUP_NORM:
        attrs["num_groups"] = int_arg(c.c(8), 1)
    elif op is Op.BATCH_NORM:
        attrs["training"] = bool_arg(c.c(7), True)
    b = GraphBuilder(c)
    dtype = x.dtype or c.default_dtype
    ins = [b.input(dy), b.input(x)] + ([b.input(w)] if w is not None else [])
    types = [TensorType(dtype, x.shape)] + [TensorType(w.dtype or dtype, w.shape) for _ in names[1:] if w is not None]
    return b.done(*b.g.add_node(op, ins, types, attrs).outputs)


_SOFTMAX_GRADS = ("_softmax_backward_data", "_log_softmax_backward_data")


def _softmax_grad(c: Call) -> Graph | None:
    """``_softmax_backward_data(grad_out, output, dim, input_dtype)``: one kernel over the output
    gradient and the saved output."""
    dy, y = c.t(0), c.t(1)
    if dy is None or y is None or not y.shape or dy.shape != y.shape:
        return None
    op = Op.LOG_SOFTMAX if "log_softmax" in c.key else Op.SOFTMAX
    b = GraphBuilder(c)
    return b.done(b.node(op, [b.input(dy), b.input(y)], y.shape, y.dtype or c.default_dtype,
                         {"axis": int_arg(c.c(2), -1) % len(y.shape), "role": "grad", "grads": ("input",)}))


_REDUCTIONS: dict[str, tuple[Op, int, int]] = {   # name -> (op, dims arg, keepdim arg)
    "sum": (Op.REDUCE_SUM, 1, 2), "nansum": (Op.REDUCE_SUM, 1, 2), "mean": (Op.REDUCE_MEAN, 1, 2),
    "nanmean": (Op.REDUCE_MEAN, 1, 2), "amax": (Op.REDUCE_MAX, 1, 2), "amin": (Op.REDUCE_MIN, 1, 2),
    "max": (Op.REDUCE_MAX, 1, 2), "min": (Op.REDUCE_MIN, 1, 2), "prod": (Op.REDUCE_PROD, 1, 2),
    "var": (Op.REDUCE_VAR, 1, 3), "std": (Op.REDUCE_VAR, 1, 3), "var_mean": (Op.REDUCE_VAR, 1, 3),
    "std_mean": (Op.REDUCE_VAR, 1, 3), "norm": (Op.REDUCE_NORM, 2, 3),
    "linalg_vector_norm": (Op.REDUCE_NORM, 2, 3), "logsumexp": (Op.REDUCE_LOGSUMEXP, 1, 2),
    "argmax": (Op.ARGMAX, 1, 2), "argmin": (Op.ARGMIN, 1, 2), "any": (Op.REDUCE_MAX, 1, 2),
    "all": (Op.REDUCE_MIN, 1, 2), "cumsum": (Op.CUMSUM, 1, -1), "cumprod": (Op.CUMPROD, 1, -1),
}


def _reduce(c: Call) -> Graph | None:
    op, dim_i, keep_i = _REDUCTIONS[c.key]
    x = c.t(0)
    if x is None:
        return None
    if c.key in ("max", "min") and c.t(1) is not None:
        return _binary(c, Op.MAXIMUM if c.key == "max" else Op.MINIMUM)
    rank = max(len(x.shape), 1)
    dims = ints(c.c(dim_i))
    axes = tuple(sorted({d % rank for d in dims})) if dims else tuple(range(len(x.shape)))
    keep = bool_arg(c.c(keep_i)) if keep_i >= 0 else True
    if keep_i < 0:       # scans keep the shape
        out = x.shape
    else:
        out = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
    dtype = DType.INT64 if op in (Op.ARGMAX, Op.ARGMIN) else x.dtype or c.default_dtype
    b = GraphBuilder(c)
    attrs = {"axis": axes[0] if axes else 0} if keep_i < 0 else {"axes": axes, "keepdims": keep}
    return b.done(b.node(op, [b.input(x)], out, dtype, attrs))


def _binary(c: Call, op: Op) -> Graph | None:
    x, y = c.t(0), c.t(1)
    assert x is not None and y is not None
    shape = broadcast([x.shape, y.shape])
    if shape is None:
        return None
    b = GraphBuilder(c)
    return b.done(b.node(op, [b.input(x), b.input(y)], shape, x.dtype or c.default_dtype))


def _scalar(text: str, default: float) -> float:
    try:
        return float(text) if text else default
    except ValueError:
        return default


def _out_shape(c: Call, ts: list[TensorArg]) -> tuple[int, ...] | None:
    return ts[0].shape if c.inplace else broadcast([t.shape for t in ts])


def _lerp(c: Call) -> Graph | None:
    """``lerp(a, b, w) = a + w * (b - a)`` (AdamW's first moment): sub, mul, add, three FLOPs per
    element, as the torch frontend lowers it (:func:`narrowpipe.frontends.torch.aten_nn._lerp`);
    ``w`` a tensor or a scalar. (A fused kernel counts ``a``, read by the sub and the add, twice.)"""
    a, bt, w = c.t(0), c.t(1), c.t(2)
    if a is None or bt is None:
        return None
    shape = _out_shape(c, [t for t in (a, bt, w) if t is not None])
    if shape is None:
        return None
    dtype = a.dtype or c.default_dtype
    b = GraphBuilder(c)
    x, y = b.input(a), b.input(bt)
    d = b.node(Op.SUB, [y, x], shape, dtype)
    m = b.node(Op.MUL, [d, b.input(w)], shape, dtype) if w is not None else \
        b.node(Op.MUL, [d], shape, dtype, {"scalar": _scalar(c.c(2), 1.0)})
    return b.done(b.node(Op.ADD, [x, m], shape, dtype))


def _addc(op: Op) -> Builder:
    """``addcmul/addcdiv(a, t1, t2, value) = a + value * (t1 op t2)`` (AdamW's second moment and
    step): the product or quotient, a scalar multiply unless ``value`` is 1, an add, as the torch
    frontend lowers it (:func:`narrowpipe.frontends.torch.aten_nn._addc`)."""
    def build(c: Call) -> Graph | None:
        a, t1, t2 = c.t(0), c.t(1), c.t(2)
        if a is None or t1 is None or t2 is None:
            return None
        shape = _out_shape(c, [a, t1, t2])
        if shape is None:
            return None
        dtype = a.dtype or c.default_dtype
        b = GraphBuilder(c)
        x = b.input(a)
        p = b.node(op, [b.input(t1), b.input(t2)], shape, dtype)
        value = _scalar(c.c(3), 1.0)
        if value != 1:
            p = b.node(Op.MUL, [p], shape, dtype, {"scalar": value})
        return b.done(b.node(Op.ADD, [x, p], shape, dtype))
    return build


#: Composite elementwise ops (the optimizer's): several canonical ops in one eager kernel.
_COMPOSITES: dict[str, Builder] = {"lerp": _lerp, "addcmul": _addc(Op.MUL), "addcdiv": _addc(Op.DIV)}

#: aten name -> builder for norms, softmaxes and reductions (elementwise names use :func:`elementwise`).
BUILDERS: dict[str, Builder] = {**_COMPOSITES, **dict.fromkeys(_NORMS, _norm), **dict.fromkeys(_SOFTMAXES, _softmax),
                                **dict.fromkeys(_NORM_GRADS, _norm_grad),
                                **dict.fromkeys(_SOFTMAX_GRADS, _softmax_grad),
                                **dict.fromkeys(_REDUCTIONS, _reduce)}
