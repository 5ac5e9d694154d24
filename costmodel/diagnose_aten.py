"""Recorded aten calls as one-op IR graphs, so a trace's ops are costed by :mod:`.rules` like any graph.

A profiler trace records each op's input shapes, dtypes and scalar arguments but not its outputs, so
each builder here infers the output shape (shape arithmetic, never cost formulas) and emits the
canonical op the torch frontend would (``frontends/aten_*.py``): ``aten::linear`` is a ``dot`` plus
its bias ``add``, ``aten::conv2d`` one ``conv``, SDPA one ``attention``. Views and allocations are
zero-cost ``identity``/``fill`` nodes, so their time reads as dispatch overhead.

:func:`lower_call` returns None for an op it cannot map (or whose recorded shapes do not fit): the
diagnosis then looks inside it or lists it as unmodeled with its time, never as zero.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from math import ceil
from typing import Any

from ..frontends.aten_names import ELEMENTWISE_OPS
from ..ir import DType, Graph, Op, TensorType, Value
from .diagnose_trace import TensorArg

__all__ = ["Call", "lower_call", "ELEMENTWISE", "VIEWS", "PASS_THROUGH", "collective_kind", "covered"]

#: aten name -> canonical elementwise op; the same names as the torch frontend's table (a test pins it).
ELEMENTWISE: dict[str, Op] = {
    **ELEMENTWISE_OPS,
    # eager-only names (backward kernels, where): one elementwise pass each
    "where": Op.WHERE, "threshold_backward": Op.WHERE, "gelu_backward": Op.GELU, "silu_backward": Op.SILU,
    "sigmoid_backward": Op.MUL, "tanh_backward": Op.MUL, "hardtanh_backward": Op.WHERE,
}
_BOOL_OUT = frozenset({Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE, Op.ISNAN, Op.ISINF})

#: Views and allocations: no work and no traffic (their time is dispatch overhead).
VIEWS: frozenset[str] = frozenset({
    "view", "_unsafe_view", "_reshape_alias", "as_strided", "as_strided_", "t", "transpose", "permute",
    "expand", "expand_as", "slice", "select", "unsqueeze", "squeeze", "detach", "detach_", "alias",
    "lift_fresh", "split", "split_with_sizes", "chunk", "narrow", "unbind", "unflatten", "view_as",
    "resolve_conj", "resolve_neg", "empty", "empty_like", "empty_strided", "new_empty",
    "new_empty_strided", "resize_", "set_", "numpy_T", "movedim", "swapaxes", "diagonal",
    "_local_scalar_dense", "item", "is_nonzero", "size", "stride", "result_type", "_has_compatible_shallow_copy_type",
})
#: Ops that only wrap others: read through them when they have children, free when they do not.
PASS_THROUGH: frozenset[str] = frozenset({
    "contiguous", "to", "_to_copy", "type_as", "reshape", "flatten", "einsum", "dropout",
    "feature_dropout", "alpha_dropout", "lift_fresh_copy", "_autocast_to_reduced_precision",
    "_autocast_to_full_precision", "reshape_as",
})

_SCALAR_TYPES = {0: DType.UINT8, 1: DType.INT8, 2: DType.INT16, 3: DType.INT32, 4: DType.INT64,
                 5: DType.FP16, 6: DType.FP32, 7: DType.FP64, 9: DType.COMPLEX64, 10: DType.COMPLEX128,
                 11: DType.BOOL, 15: DType.BF16, 23: DType.FP8_E5M2, 24: DType.FP8_E4M3,
                 25: DType.FP8_E5M2, 26: DType.FP8_E4M3}


@dataclass(frozen=True)
class Call:
    """One recorded op call: positional inputs as recorded, scalars as text."""

    name: str
    inputs: Sequence[TensorArg | list[TensorArg] | None]
    concrete: Sequence[str]
    default_dtype: DType = DType.FP32   # for tensors in a TensorList, whose dtype is not recorded
    key: str = ""                       # the registered name it lowers as (``add`` for ``add_``)

    @property
    def base(self) -> str:
        """The name as recorded, without the namespace (``add_``)."""
        return self.name.split("::", 1)[1] if "::" in self.name else self.name

    @property
    def inplace(self) -> bool:
        return bool(self.key) and self.key != self.base

    def t(self, i: int) -> TensorArg | None:
        x = self.inputs[i] if i < len(self.inputs) else None
        return x if isinstance(x, TensorArg) else None

    def tensors(self) -> list[TensorArg]:
        return [x for x in self.inputs if isinstance(x, TensorArg)]

    def c(self, i: int) -> str:
        return self.concrete[i].strip() if i < len(self.concrete) else ""


class _B:
    """A tiny graph under construction: inputs from recorded tensors, nodes with inferred outputs."""

    def __init__(self, call: Call) -> None:
        self.call = call
        self.g = Graph(call.name)

    def input(self, t: TensorArg) -> Value:
        return self.g.add_input(f"in{len(self.g.inputs)}", TensorType(t.dtype or self.call.default_dtype, t.shape))

    def node(self, op: Op, ins: Sequence[Value | None], shape: Sequence[int], dtype: DType,
             attrs: dict[str, Any] | None = None) -> Value:
        return self.g.add_node(op, ins, [TensorType(dtype, tuple(int(d) for d in shape))], attrs).outputs[0]

    def done(self, *outs: Value) -> Graph:
        self.g.set_outputs(outs)
        return self.g


Builder = Callable[[Call], "Graph | None"]
_BUILDERS: dict[str, Builder] = {}


def _register(*names: str) -> Callable[[Builder], Builder]:
    def deco(fn: Builder) -> Builder:
        for n in names:
            _BUILDERS[n] = fn
        return fn
    return deco


# -- scalar argument parsing ------------------------------------------------------------------

def _ints(text: str) -> tuple[int, ...] | None:
    s = text.strip()
    if not s:
        return None
    try:
        if s.startswith("["):
            inner = s.strip("[]").strip()
            return tuple(int(float(x)) for x in inner.split(",")) if inner else ()
        return (int(float(s)),)
    except ValueError:
        return None


def _int(text: str, default: int) -> int:
    v = _ints(text)
    return v[0] if v else default


def _bool(text: str, default: bool = False) -> bool:
    s = text.strip().lower()
    return s in ("true", "1") if s in ("true", "false", "1", "0") else default


def _per_dim(text: str, n: int, default: int) -> tuple[int, ...]:
    """A recorded int or int list (``[2, 2]``, ``2``, ``[]``) as one value per spatial dim."""
    v = _ints(text)
    if not v:
        return (default,) * n
    return v * n if len(v) == 1 else v


def _dtype_code(text: str, default: DType) -> DType:
    v = _ints(text)
    return _SCALAR_TYPES.get(v[0], default) if v and len(v) == 1 else default


def _broadcast(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...] | None:
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, d in enumerate((1,) * (rank - len(s)) + tuple(s)):
            if d != 1 and out[i] not in (1, d):
                return None
            out[i] = d if d != 1 else out[i]
    return tuple(out)


# -- contractions -------------------------------------------------------------------------------

def _dot(c: Call, lhs: TensorArg | None, rhs: TensorArg | None, lc: tuple[int, ...], rc: tuple[int, ...],
         lb: tuple[int, ...] = (), rb: tuple[int, ...] = (), bias: TensorArg | None = None,
         out_dtype: DType | None = None) -> Graph | None:
    if lhs is None or rhs is None:
        return None
    ls, rs = lhs.shape, rhs.shape
    if any(d >= len(ls) for d in lc + lb) or any(d >= len(rs) for d in rc + rb):
        return None
    if [ls[d] for d in lc] != [rs[d] for d in rc]:
        return None
    batch = _broadcast([tuple(ls[d] for d in lb), tuple(rs[d] for d in rb)])
    if batch is None:
        return None
    out = (*batch, *(d for i, d in enumerate(ls) if i not in lc + lb),
           *(d for i, d in enumerate(rs) if i not in rc + rb))
    b = _B(c)
    dtype = out_dtype or lhs.dtype or c.default_dtype
    y = b.node(Op.DOT, [b.input(lhs), b.input(rhs)], out, dtype,
               {"lhs_contract": lc, "rhs_contract": rc, "lhs_batch": lb, "rhs_batch": rb})
    if bias is not None:
        y = b.node(Op.ADD, [y, b.input(bias)], out, dtype, {"role": "bias"})
    return b.done(y)


@_register("mm", "mv", "dot", "vdot", "inner")
def _mm(c: Call) -> Graph | None:
    a, b = c.t(0), c.t(1)
    return _dot(c, a, b, (len(a.shape) - 1,), (0,)) if a and b and a.shape else None


@_register("addmm", "addmv")
def _addmm(c: Call) -> Graph | None:
    a = c.t(1)
    return _dot(c, a, c.t(2), (len(a.shape) - 1,), (0,), bias=c.t(0)) if a and a.shape else None


@_register("bmm")
def _bmm(c: Call) -> Graph | None:
    return _dot(c, c.t(0), c.t(1), (2,), (1,), (0,), (0,))


@_register("baddbmm")
def _baddbmm(c: Call) -> Graph | None:
    return _dot(c, c.t(1), c.t(2), (2,), (1,), (0,), (0,), bias=c.t(0))


@_register("linear")
def _linear(c: Call) -> Graph | None:
    x, w = c.t(0), c.t(1)
    if x is None or w is None or not x.shape:
        return None
    return _dot(c, x, w, (len(x.shape) - 1,), (1,) if len(w.shape) == 2 else (0,), bias=c.t(2))


@_register("matmul")
def _matmul(c: Call) -> Graph | None:
    """torch.matmul: 1-D operands, 2-D folding, broadcast batch dims (as the frontend lowers it)."""
    a, b = c.t(0), c.t(1)
    if a is None or b is None or not a.shape or not b.shape:
        return None
    ra, rb = len(a.shape), len(b.shape)
    if rb == 1 or rb == 2 or ra == 1:
        return _dot(c, a, b, (ra - 1,) if ra > 1 or rb == 1 else (0,), (0,) if rb <= 2 else (rb - 2,))
    r = max(ra, rb)
    a = TensorArg((1,) * (r - ra) + a.shape, a.dtype)
    b = TensorArg((1,) * (r - rb) + b.shape, b.dtype)
    batch = tuple(range(r - 2))
    return _dot(c, a, b, (r - 1,), (r - 2,), batch, batch)


@_register("_scaled_mm")
def _scaled_mm(c: Call) -> Graph | None:
    out = _dtype_code(c.c(6), DType.BF16)
    return _dot(c, c.t(0), c.t(1), (1,), (0,), bias=c.t(4), out_dtype=out)


# -- convolution and attention ------------------------------------------------------------------

def _conv(c: Call, stride: str, padding: str, dilation: str, transposed: bool, out_pad: str,
          groups: str) -> Graph | None:
    x, w = c.t(0), c.t(1)
    if x is None or w is None or len(x.shape) < 3 or len(w.shape) != len(x.shape):
        return None
    n = len(x.shape) - 2
    s, dl, op_ = _per_dim(stride, n, 1), _per_dim(dilation, n, 1), _per_dim(out_pad, n, 0)
    g = _int(groups, 1)
    k = w.shape[2:]
    if padding.strip().strip("'\"") in ("same", "valid"):
        same = padding.strip().strip("'\"") == "same"
        spatial = tuple(ceil(i / st) if same else (i - dd * (kk - 1) - 1) // st + 1
                        for i, st, dd, kk in zip(x.shape[2:], s, dl, k))
        p = (0,) * n
    else:
        p = _per_dim(padding, n, 0)
        if transposed:
            spatial = tuple((i - 1) * st - 2 * pp + dd * (kk - 1) + o + 1
                            for i, st, pp, dd, kk, o in zip(x.shape[2:], s, p, dl, k, op_))
        else:
            spatial = tuple((i + 2 * pp - dd * (kk - 1) - 1) // st + 1
                            for i, st, pp, dd, kk in zip(x.shape[2:], s, p, dl, k))
    if len(s) != n or any(d <= 0 for d in spatial):
        return None
    cout = w.shape[1] * g if transposed else w.shape[0]
    out = (x.shape[0], cout, *spatial)
    b = _B(c)
    dtype = x.dtype or c.default_dtype
    y = b.node(Op.CONV, [b.input(x), b.input(w)], out, dtype,
               {"stride": s, "padding": p, "dilation": dl, "groups": g, "transposed": transposed,
                "output_padding": op_})
    bias = c.t(2)
    if bias is not None:
        y = b.node(Op.ADD, [y, b.input(bias)], out, dtype, {"role": "bias", "axis": 1})
    return b.done(y)


@_register("convolution", "_convolution")
def _convolution(c: Call) -> Graph | None:
    return _conv(c, c.c(3), c.c(4), c.c(5), _bool(c.c(6)), c.c(7), c.c(8))


@_register("conv1d", "conv2d", "conv3d")
def _convnd(c: Call) -> Graph | None:
    return _conv(c, c.c(3), c.c(4), c.c(5), False, "", c.c(6))


@_register("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
def _conv_transpose(c: Call) -> Graph | None:
    return _conv(c, c.c(3), c.c(4), c.c(7), True, c.c(5), c.c(6))


def _attention(c: Call, mask: int | None, causal: int) -> Graph | None:
    q, k, v = c.t(0), c.t(1), c.t(2)
    if q is None or k is None or v is None or len(q.shape) != 4 or len(k.shape) != 4 or len(v.shape) != 4:
        return None
    b = _B(c)
    ins = [b.input(q), b.input(k), b.input(v)]
    m = c.t(mask) if mask is not None else None
    if m is not None:
        ins.append(b.input(m))
    y = b.node(Op.ATTENTION, ins, (*q.shape[:-1], v.shape[-1]), q.dtype or c.default_dtype,
               {"layout": "bhsd", "causal": _bool(c.c(causal))})
    return b.done(y)


_register("scaled_dot_product_attention", "_scaled_dot_product_attention_math")(lambda c: _attention(c, 3, 5))
_register("_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu")(
    lambda c: _attention(c, 5 if c.key.endswith("_for_cpu") else None, 4))
_register("_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention")(
    lambda c: _attention(c, 3, 6))


@_register("_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_efficient_attention_backward",
           "_scaled_dot_product_cudnn_attention_backward", "_scaled_dot_product_flash_attention_for_cpu_backward")
def _attention_backward(c: Call) -> Graph | None:
    go, q, k, v = (c.t(i) for i in range(4))
    if go is None or q is None or k is None or v is None or len(q.shape) != 4:
        return None
    b = _B(c)
    dt = q.dtype or c.default_dtype
    node = b.g.add_node(Op.ATTENTION_BACKWARD, [b.input(go), b.input(q), b.input(k), b.input(v)],
                        [TensorType(dt, t.shape) for t in (q, k, v)], {"layout": "bhsd"})
    return b.done(*node.outputs)


# -- elementwise, normalization, reductions -----------------------------------------------------

def _elementwise(c: Call) -> Graph | None:
    op = ELEMENTWISE[c.key]
    ts = c.tensors()
    if not ts:
        return None
    shape = ts[0].shape if c.inplace else _broadcast([t.shape for t in ts])
    if shape is None:
        return None
    if op in _BOOL_OUT:
        dtype = DType.BOOL
    else:
        floats = [t.dtype for t in ts if t.dtype is not None and t.dtype.is_float and t.shape]
        dtype = floats[0] if floats else (ts[0].dtype or c.default_dtype)
    b = _B(c)
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
        normalized = _ints(c.c(1)) or (x.shape[-1],)
        attrs["axis"] = len(x.shape) - len(normalized)
    elif op is Op.GROUP_NORM:
        attrs["num_groups"] = _int(c.c(6) if c.key == "native_group_norm" else c.c(1), 1)
    elif op is Op.BATCH_NORM:
        attrs["training"] = c.key != "_native_batch_norm_legit_no_training" and _bool(c.c(5))
    b = _B(c)
    ins = [b.input(x)] + [b.input(t) for t in (c.t(i) for i in range(first, first + 4)) if t is not None]
    return b.done(b.node(op, ins, x.shape, x.dtype or c.default_dtype, attrs))


def _softmax(c: Call) -> Graph | None:
    x = c.t(0)
    if x is None or not x.shape:
        return None
    op = Op.LOG_SOFTMAX if "log_softmax" in c.key else Op.SOFTMAX
    b = _B(c)
    return b.done(b.node(op, [b.input(x)], x.shape, x.dtype or c.default_dtype,
                         {"axis": _int(c.c(1), -1) % len(x.shape)}))


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
    dims = _ints(c.c(dim_i))
    axes = tuple(sorted({d % rank for d in dims})) if dims else tuple(range(len(x.shape)))
    keep = _bool(c.c(keep_i)) if keep_i >= 0 else True
    if keep_i < 0:       # scans keep the shape
        out = x.shape
    else:
        out = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
    dtype = DType.INT64 if op in (Op.ARGMAX, Op.ARGMIN) else x.dtype or c.default_dtype
    b = _B(c)
    attrs = {"axis": axes[0] if axes else 0} if keep_i < 0 else {"axes": axes, "keepdims": keep}
    return b.done(b.node(op, [b.input(x)], out, dtype, attrs))


def _binary(c: Call, op: Op) -> Graph | None:
    x, y = c.t(0), c.t(1)
    assert x is not None and y is not None
    shape = _broadcast([x.shape, y.shape])
    if shape is None:
        return None
    b = _B(c)
    return b.done(b.node(op, [b.input(x), b.input(y)], shape, x.dtype or c.default_dtype))


# -- data movement, gathers, creation -----------------------------------------------------------

@_register("copy_")
def _copy(c: Call) -> Graph | None:
    dst, src = c.t(0), c.t(1)
    if dst is None or src is None:
        return None
    b = _B(c)
    cast = src.dtype is not None and dst.dtype is not None and src.dtype != dst.dtype
    return b.done(b.node(Op.CAST if cast else Op.COPY, [b.input(src)], dst.shape, dst.dtype or c.default_dtype,
                         {"to": dst.dtype.value} if cast and dst.dtype else None))


@_register("clone", "tril", "triu", "flip", "roll")
def _same_shape_copy(c: Call) -> Graph | None:
    x = c.t(0)
    if x is None:
        return None
    op = {"tril": Op.TRIANGULAR, "triu": Op.TRIANGULAR, "flip": Op.FLIP, "roll": Op.ROLL}.get(c.key, Op.COPY)
    b = _B(c)
    return b.done(b.node(op, [b.input(x)], x.shape, x.dtype or c.default_dtype))


@_register("cat", "concat", "concatenate", "stack")
def _cat(c: Call) -> Graph | None:
    parts = c.inputs[0] if c.inputs and isinstance(c.inputs[0], list) else None
    parts = [p for p in parts or [] if p.shape != (0,)]
    if not parts:
        return None
    rank = len(parts[0].shape)
    if any(len(p.shape) != rank for p in parts):
        return None
    if c.key == "stack":
        d = _int(c.c(1), 0) % (rank + 1)
        out = (*parts[0].shape[:d], len(parts), *parts[0].shape[d:])
    else:
        d = _int(c.c(1), 0) % max(rank, 1)
        out = tuple(sum(p.shape[d] for p in parts) if i == d else s for i, s in enumerate(parts[0].shape))
    b = _B(c)
    ins = [b.input(p) for p in parts]
    return b.done(b.node(Op.CONCAT, ins, out, ins[0].type.dtype, {"axis": d}))


@_register("constant_pad_nd")
def _pad(c: Call) -> Graph | None:
    x, pads = c.t(0), _ints(c.c(1)) or ()
    if x is None or len(pads) % 2 or len(pads) // 2 > len(x.shape):
        return None
    out = list(x.shape)
    for i in range(len(pads) // 2):
        out[-1 - i] += pads[2 * i] + pads[2 * i + 1]
    b = _B(c)
    return b.done(b.node(Op.PAD, [b.input(x)], out, x.dtype or c.default_dtype))


@_register("embedding", "index_select", "gather")
def _gather(c: Call) -> Graph | None:
    if c.key == "embedding":
        table, idx = c.t(0), c.t(1)
        out = (*idx.shape, *table.shape[1:]) if table and idx else None
        op = Op.GATHER
    elif c.key == "index_select":
        table, idx = c.t(0), c.t(2)
        d = _int(c.c(1), 0)
        out = tuple(idx.shape[0] if i == d % len(table.shape) else s for i, s in enumerate(table.shape)) \
            if table and idx and table.shape and idx.shape else None
        op = Op.GATHER
    else:
        table, idx = c.t(0), c.t(2)
        out, op = (idx.shape if idx else None), Op.GATHER_ELEMENTS
    if table is None or idx is None or out is None:
        return None
    b = _B(c)
    return b.done(b.node(op, [b.input(table), b.input(idx)], out, table.dtype or c.default_dtype))


@_register("scatter", "scatter_add", "scatter_reduce", "index_add", "index_copy")
def _scatter(c: Call) -> Graph | None:
    x, idx, src = c.t(0), c.t(2), c.t(3)
    if x is None or idx is None:
        return None
    b = _B(c)
    ins = [b.input(x), b.input(idx)] + ([b.input(src)] if src is not None else [])
    reduce = "add" if c.key in ("scatter_add", "index_add", "scatter_reduce") else "none"
    return b.done(b.node(Op.SCATTER_ELEMENTS, ins, x.shape, x.dtype or c.default_dtype, {"reduce": reduce}))


@_register("fill", "zero", "zeros_like", "ones_like", "full_like", "zeros", "ones", "full", "scalar_tensor")
def _fill(c: Call) -> Graph | None:
    x = c.t(0)
    shape = x.shape if x is not None else () if c.key == "scalar_tensor" else _ints(c.c(0))
    if shape is None:
        return None
    dtype = x.dtype if x is not None and x.dtype else _dtype_code(c.c(2 if c.key == "full" else 1), c.default_dtype)
    b = _B(c)
    return b.done(b.node(Op.FILL, [], shape, dtype))


@_register("normal", "uniform", "bernoulli", "random", "exponential", "rand", "randn", "rand_like",
           "randn_like")
def _random(c: Call) -> Graph | None:
    x = c.t(0)
    shape = x.shape if x is not None else _ints(c.c(0))
    if shape is None:
        return None
    b = _B(c)
    return b.done(b.node(Op.RANDOM, [], shape, (x.dtype if x is not None else None) or c.default_dtype))


@_register("native_dropout")
def _dropout(c: Call) -> Graph | None:
    x = c.t(0)
    if x is None:
        return None
    b = _B(c)
    mask = b.node(Op.RANDOM, [], x.shape, DType.BOOL, {"distribution": "bernoulli"})
    return b.done(b.node(Op.MUL, [b.input(x), mask], x.shape, x.dtype or c.default_dtype), mask)


@_register("max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices", "max_pool3d_with_indices",
           "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
           "adaptive_avg_pool3d", "_adaptive_avg_pool2d", "adaptive_max_pool2d")
def _pool(c: Call) -> Graph | None:
    x = c.t(0)
    if x is None or len(x.shape) < 3:
        return None
    n = len(x.shape) - 2
    spatial_in = x.shape[2:]
    if "adaptive" in c.key:
        out_sp = _per_dim(c.c(1), n, 1)
        kernel = tuple(ceil(i / max(o, 1)) for i, o in zip(spatial_in, out_sp))
    else:
        kernel = _per_dim(c.c(1), n, 1)
        stride = tuple(s or k for s, k in zip(_per_dim(c.c(2), n, 0), kernel))   # [] means the kernel size
        pad = _per_dim(c.c(3), n, 0)
        dil = _per_dim(c.c(4), n, 1) if c.key.startswith("max") else (1,) * n
        ceil_mode = _bool(c.c(5) if c.key.startswith("max") else c.c(4))
        rnd = ceil if ceil_mode else (lambda v: int(v // 1))
        out_sp = tuple(int(rnd((i + 2 * p - d * (k - 1) - 1) / s)) + 1
                       for i, p, d, k, s in zip(spatial_in, pad, dil, kernel, stride))
    if len(out_sp) != n or any(o <= 0 for o in out_sp):
        return None
    b = _B(c)
    kind = "max" if "max" in c.key else "avg"
    return b.done(b.node(Op.POOL, [b.input(x)], (*x.shape[:2], *out_sp), x.dtype or c.default_dtype,
                         {"kind": kind, "kernel": tuple(kernel)}))


@_register("topk", "sort")
def _select(c: Call) -> Graph | None:
    x = c.t(0)
    if x is None or not x.shape:
        return None
    b = _B(c)
    if c.key == "topk":
        k, axis = _int(c.c(1), 1), _int(c.c(2), -1) % len(x.shape)
        out = tuple(k if i == axis else d for i, d in enumerate(x.shape))
        return b.done(b.node(Op.TOPK, [b.input(x)], out, x.dtype or c.default_dtype, {"k": k, "axis": axis}))
    axis = _int(c.c(1), -1) % len(x.shape)
    return b.done(b.node(Op.SORT, [b.input(x)], x.shape, x.dtype or c.default_dtype, {"axis": axis}))


def _view(c: Call) -> Graph:
    """Views and allocations: an identity on the first tensor (or an uninitialized fill): cost zero."""
    b = _B(c)
    x = c.tensors()[0] if c.tensors() else None
    if x is None:
        return b.done(b.node(Op.FILL, [], (), DType.FP32, {"uninitialized": True}))
    return b.done(b.node(Op.IDENTITY, [b.input(x)], x.shape, x.dtype or c.default_dtype))


for _name in ELEMENTWISE:
    _BUILDERS.setdefault(_name, _elementwise)
for _name in _NORMS:
    _BUILDERS[_name] = _norm
for _name in ("softmax", "_softmax", "_safe_softmax", "log_softmax", "_log_softmax"):
    _BUILDERS[_name] = _softmax
for _name in _REDUCTIONS:
    _BUILDERS[_name] = _reduce
for _name in VIEWS | PASS_THROUGH:
    _BUILDERS.setdefault(_name, _view)


def _key(base: str) -> str | None:
    if base in _BUILDERS:
        return base
    if base.endswith("_") and not base.endswith("__") and base[:-1] in _BUILDERS:
        return base[:-1]   # in-place variants (add_, fill_, normal_) cost as their base
    return None


def lower_call(call: Call) -> Graph | None:
    """The recorded call as a tiny IR graph (one canonical op, plus a bias add), or None if unmapped."""
    if not call.name.startswith("aten::"):
        return None
    key = _key(call.base)
    if key is None:
        return None
    try:
        return _BUILDERS[key](replace(call, key=key))
    except (IndexError, ValueError, ZeroDivisionError, TypeError, AttributeError):
        return None   # recorded arguments that do not fit the op's schema: unmodeled, not a crash


def covered() -> list[str]:
    """Every aten name (without in-place suffixes) the diagnosis can cost."""
    return sorted(_BUILDERS)


# -- collectives --------------------------------------------------------------------------------

_COLLECTIVES = (("reducescatter", Op.REDUCE_SCATTER), ("reduce_scatter", Op.REDUCE_SCATTER),
                ("allreduce", Op.ALL_REDUCE), ("all_reduce", Op.ALL_REDUCE),
                ("allgather", Op.ALL_GATHER), ("all_gather", Op.ALL_GATHER),
                ("alltoall", Op.ALL_TO_ALL), ("all_to_all", Op.ALL_TO_ALL),
                ("broadcast", Op.BROADCAST), ("sendrecv", Op.SEND), ("send", Op.SEND), ("recv", Op.RECV))
_COMM_MARKERS = ("nccl", "c10d::", "record_param_comms", "gloo:", "rccl", "all_reduce", "allreduce",
                 "all_gather", "allgather", "reduce_scatter", "reducescatter", "all_to_all", "alltoall")


def collective_kind(name: str) -> tuple[bool, Op | None]:
    """(is this communication?, which collective) from an op or kernel name."""
    low = name.lower()
    if not any(m in low for m in _COMM_MARKERS):
        return False, None
    for key, op in _COLLECTIVES:
        if key in low:
            return True, op
    return True, None


def collective_graph(name: str, op: Op, in_elems: int, out_elems: int, dtype: DType, group: int) -> Graph:
    """One collective node over flat buffers, so :mod:`.rules` gives the bytes each rank sends."""
    g = Graph(name)
    x = g.add_input("buf", TensorType(dtype, (max(in_elems, 0),)))
    y = g.add_node(op, [x], [TensorType(dtype, (max(out_elems, 0),))], {"group_size": max(group, 1)})
    g.set_outputs(y.outputs)
    return g
