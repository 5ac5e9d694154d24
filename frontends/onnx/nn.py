"""Lowerings of ONNX neural-network ops: elementwise activations, normalizations, pooling,
resizing, dropout and the standard ``Attention`` op (opset 23+)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...ir import CAUSAL, DType, Op, TensorType, Value
from ..mask_pattern import band_attrs
from .mask_hooks import attention_mask_band, tag_mask_input, tag_mask_step
from .node import NodeCx
from .shape_rules import broadcast
from .stamp import pure
from .symdims import dim_add, dim_floordiv, dim_mul
from .tensor import norm_axis
from .windows import check_window_attrs, window_attrs

__all__ = ["NN_LOWERINGS", "ELEMENTWISE_LOWERINGS", "chain", "attention_core"]


# -- elementwise ------------------------------------------------------------------------------

def chain(cx: NodeCx, op: Op, values: list[Value], attrs: dict[str, Any] | None = None, *,
          bind: bool = True, types: list[TensorType] | None = None, suffix: str = "") -> Value:
    """A variadic elementwise op as n-1 binary nodes (Sum of 3 tensors is 2 adds)."""
    if len(values) <= 2:
        return cx.emit(op, values, attrs, types=types, bind=bind, suffix=suffix).outputs[0]
    out = (types or cx.out_types())[0]
    acc = values[0]
    for k, v in enumerate(values[1:-1], start=1):
        shape = broadcast(cx, [acc.type.shape, v.type.shape])
        acc = cx.emit(op, [acc, v], attrs, types=[cx.tensor(out.dtype, shape)], bind=False,
                      suffix=f"{suffix or op.value}{k}").outputs[0]
    return cx.emit(op, [acc, values[-1]], attrs, types=types, bind=bind, suffix=suffix).outputs[0]


def _ew(op: Op, *attr_names: str, variadic: bool = False, **fixed: object) -> Callable[[NodeCx], None]:
    """One elementwise node over all inputs (a variadic op: one binary node per extra input)."""
    def fn(cx: NodeCx) -> None:
        attrs = dict(fixed)
        for a in attr_names:
            v = cx.attr(a)
            if v is not None:
                attrs[a] = v
        if variadic:
            chain(cx, op, cx.inputs(), attrs or None)
        else:
            cx.emit(op, cx.inputs(), attrs or None)
    return pure(fn)


@pure
def _mean(cx: NodeCx) -> None:
    ins = cx.inputs()
    out = cx.out_types()
    if len(ins) == 1:
        cx.emit(Op.IDENTITY, ins)
        return
    s = chain(cx, Op.ADD, ins, bind=False, types=out, suffix="sum")
    cx.emit(Op.MUL, [s], {"scalar": 1.0 / len(ins)})


@pure
def _softsign(cx: NodeCx) -> None:
    """x / (1 + |x|): three elementwise ops."""
    t = cx.out_types()
    a = cx.emit(Op.ABS, cx.inputs(), types=t, bind=False, suffix="abs").outputs[0]
    d = cx.emit(Op.ADD, [a], {"scalar": 1.0}, types=t, bind=False, suffix="add").outputs[0]
    cx.emit(Op.DIV, [*cx.inputs(), d])


@pure
def _clip(cx: NodeCx) -> None:
    attrs: dict[str, Any] = {}
    if cx.opset < 11:
        attrs = {"min": cx.attr("min"), "max": cx.attr("max")}
    cx.emit(Op.CLAMP, cx.inputs(), {k: v for k, v in attrs.items() if v is not None} or None)


@pure
def _gelu(cx: NodeCx) -> None:
    cx.emit(Op.GELU, cx.inputs(), {"approximate": str(cx.attr("approximate", "none"))})


@pure
def _shrink(cx: NodeCx) -> None:
    cx.emit(Op.WHERE, cx.inputs(), {"lambd": cx.attr("lambd", 0.5), "bias": cx.attr("bias", 0.0)})


ELEMENTWISE_LOWERINGS: dict[str, Callable[[NodeCx], None]] = {
    "Add": _ew(Op.ADD), "Sub": _ew(Op.SUB), "Mul": _ew(Op.MUL), "Div": _ew(Op.DIV), "Pow": _ew(Op.POW),
    "Mod": _ew(Op.MOD, "fmod"), "Max": _ew(Op.MAXIMUM, variadic=True), "Min": _ew(Op.MINIMUM, variadic=True),
    "Sum": _ew(Op.ADD, variadic=True),
    "Mean": _mean, "Neg": _ew(Op.NEG), "Abs": _ew(Op.ABS), "Sign": _ew(Op.SIGN),
    "Reciprocal": _ew(Op.RECIPROCAL), "Floor": _ew(Op.FLOOR), "Ceil": _ew(Op.CEIL), "Round": _ew(Op.ROUND),
    "Relu": _ew(Op.RELU), "LeakyRelu": _ew(Op.LEAKY_RELU, "alpha"), "PRelu": _ew(Op.PRELU),
    "ThresholdedRelu": _ew(Op.RELU, "alpha"), "Elu": _ew(Op.ELU, "alpha"), "Celu": _ew(Op.ELU, "alpha"),
    "Selu": _ew(Op.SELU, "alpha", "gamma"), "HardSigmoid": _ew(Op.HARDSIGMOID, "alpha", "beta"),
    "HardSwish": _ew(Op.HARDSWISH), "Softplus": _ew(Op.SOFTPLUS), "Softsign": _softsign, "Mish": _ew(Op.MISH),
    "Gelu": _gelu, "Swish": _ew(Op.SILU, "alpha"), "Shrink": _shrink, "Clip": _clip,
    "Exp": _ew(Op.EXP), "Log": _ew(Op.LOG), "Sqrt": _ew(Op.SQRT), "Tanh": _ew(Op.TANH),
    "Sigmoid": _ew(Op.SIGMOID), "Erf": _ew(Op.ERF), "Sin": _ew(Op.SIN), "Cos": _ew(Op.COS), "Tan": _ew(Op.TAN),
    "Asin": _ew(Op.ASIN), "Acos": _ew(Op.ACOS), "Atan": _ew(Op.ATAN), "Sinh": _ew(Op.SINH),
    "Cosh": _ew(Op.COSH), "Asinh": _ew(Op.ASINH), "Acosh": _ew(Op.ACOSH), "Atanh": _ew(Op.ATANH),
    "Equal": _ew(Op.EQ), "Less": _ew(Op.LT), "LessOrEqual": _ew(Op.LE), "Greater": _ew(Op.GT),
    "GreaterOrEqual": _ew(Op.GE), "And": _ew(Op.AND), "Or": _ew(Op.OR), "Xor": _ew(Op.XOR),
    "Not": _ew(Op.NOT), "BitShift": _ew(Op.BITWISE, "direction"), "BitwiseAnd": _ew(Op.BITWISE, kind="and"),
    "BitwiseOr": _ew(Op.BITWISE, kind="or"), "BitwiseXor": _ew(Op.BITWISE, kind="xor"),
    "BitwiseNot": _ew(Op.BITWISE, kind="not"), "IsNaN": _ew(Op.ISNAN), "IsInf": _ew(Op.ISINF),
    "Where": _ew(Op.WHERE),
}


# -- normalization ----------------------------------------------------------------------------

def _softmax(op: Op) -> Callable[[NodeCx], None]:
    def fn(cx: NodeCx) -> None:
        rank = max(cx.rank(0), 1)
        default = -1 if cx.opset >= 13 else 1
        attrs: dict[str, Any] = {"axis": norm_axis(int(cx.attr("axis", default)), rank)}
        if cx.opset < 13 and attrs["axis"] != rank - 1:
            attrs["flatten_from"] = attrs["axis"]  # opset < 13 normalizes the flattened trailing dims
        cx.emit(op, cx.inputs(), attrs)
        if op is Op.SOFTMAX:
            tag_mask_step(cx)  # eager attention: is the add/where feeding it a causal mask step?
    return pure(fn, after=tag_mask_input if op is Op.SOFTMAX else None)


@pure
def _hardmax(cx: NodeCx) -> None:
    rank = max(cx.rank(0), 1)
    cx.emit(Op.ARGMAX, cx.inputs(), {"axes": (norm_axis(int(cx.attr("axis", -1 if cx.opset >= 13 else 1)), rank),),
                                     "keepdims": True, "one_hot": True})


def _norm(op: Op, axis_default: int | None = None) -> Callable[[NodeCx], None]:
    def fn(cx: NodeCx) -> None:
        attrs: dict[str, Any] = {"epsilon": float(cx.attr("epsilon", 1e-5))}
        if axis_default is not None:
            attrs["axis"] = norm_axis(int(cx.attr("axis", axis_default)), max(cx.rank(0), 1))
        if op is Op.GROUP_NORM:
            attrs["num_groups"] = int(cx.attr("num_groups", 1))
        cx.emit(op, cx.inputs(), attrs)
    return pure(fn)


@pure
def _batch_norm(cx: NodeCx) -> None:
    if cx.opset >= 14:
        training = bool(cx.attr("training_mode", 0))
    else:
        training = sum(1 for o in cx.node.output if o) > 1 and cx.opset >= 9
    cx.emit(Op.BATCH_NORM, cx.inputs(), {"epsilon": float(cx.attr("epsilon", 1e-5)), "training": training})


@pure
def _lp_norm(cx: NodeCx) -> None:
    cx.emit(Op.LP_NORM, cx.inputs(), {"axis": norm_axis(int(cx.attr("axis", -1)), max(cx.rank(0), 1)),
                                      "p": int(cx.attr("p", 2))})


@pure
def _mvn(cx: NodeCx) -> None:
    axes = [norm_axis(int(a), max(cx.rank(0), 1)) for a in cx.attr("axes", [0, 2, 3])]
    cx.emit(Op.LAYER_NORM, cx.inputs(), {"axis": min(axes), "axes": tuple(axes)})


@pure
def _lrn(cx: NodeCx) -> None:
    cx.emit(Op.LRN, cx.inputs(), {"size": int(cx.attr("size", 1)), "axis": 1})


# -- pooling and resizing ---------------------------------------------------------------------

def _pool(kind: str) -> Callable[[NodeCx], None]:
    def fn(cx: NodeCx) -> None:
        n_sp = max(cx.rank(0) - 2, 1)
        window = window_attrs(cx, n_sp)
        kernel = tuple(int(k) for k in cx.attr("kernel_shape", [1] * n_sp))
        attrs: dict[str, Any] = {"kind": kind, "kernel": kernel, "stride": window.pop("stride"),
                                 "dilation": window.pop("dilation"), "padding": window.pop("padding"),
                                 "ceil_mode": bool(cx.attr("ceil_mode", 0)), **window}
        if kind == "lp":
            attrs["p"] = int(cx.attr("p", 2))
        check_window_attrs(cx, attrs, n_sp, conv=False)
        cx.emit(Op.POOL, cx.inputs(0), attrs)   # the data (QLinearAveragePool's scales follow it)
    return pure(fn)


def _global_pool(kind: str) -> Callable[[NodeCx], None]:
    def fn(cx: NodeCx) -> None:
        cx.emit(Op.POOL, cx.inputs(), {"kind": kind, "global_pool": True})
    return pure(fn)


def _resized_dims(cx: NodeCx) -> int:
    x = cx.shape(0) or ()
    out = cx.out_types()[0].shape
    changed = sum(1 for a, b in zip(x, out) if a != b)
    return changed or max(len(x) - 2, 1)


@pure
def _resize(cx: NodeCx) -> None:
    mode = str(cx.attr("mode", "nearest"))
    cx.emit(Op.RESIZE, cx.inputs(), {"mode": mode, "spatial_dims": _resized_dims(cx)})


@pure
def _grid_sample(cx: NodeCx) -> None:
    onnx_mode = str(cx.attr("mode", "linear"))
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(onnx_mode, onnx_mode)
    cx.emit(Op.RESIZE, cx.inputs(), {"mode": mode, "spatial_dims": max(cx.rank(0) - 2, 1), "grid": True})


@pure
def _roi_align(cx: NodeCx) -> None:
    cx.emit(Op.ROI_ALIGN, cx.inputs(), {"sampling_ratio": max(int(cx.attr("sampling_ratio", 0)), 1) or 2,
                                        "mode": str(cx.attr("mode", "avg"))})


@pure
def _max_roi_pool(cx: NodeCx) -> None:
    cx.emit(Op.ROI_ALIGN, cx.inputs(), {"sampling_ratio": 1, "mode": "max"})


@pure
def _max_unpool(cx: NodeCx) -> None:
    x, idx = cx.input(0), cx.input(1)
    cx.emit(Op.SCATTER_ELEMENTS, [v for v in (idx, x) if v is not None], {"reduce": "none"})


# -- dropout --------------------------------------------------------------------------------

def _dropout(cx: NodeCx) -> None:
    """Identity at inference; with ``training_mode`` true, a random mask and a multiply."""
    x = cx.input(0)
    training = cx.known(2) if cx.n_inputs() > 2 else None
    train = bool(training.reshape(-1)[0]) if training is not None and training.size else False
    out_t = cx.out_type_at(0)
    assert x is not None and out_t is not None
    mask_t = cx.out_type_at(1) or TensorType(DType.BOOL, x.type.shape)
    mask: Value | None
    if train:
        mask = cx.emit(Op.RANDOM, [], {"distribution": "bernoulli"}, types=[mask_t], bind=False,
                       suffix="mask").outputs[0]
        y = cx.emit(Op.MUL, [x, mask], types=[out_t], bind=False).outputs[0]
    else:
        y = cx.emit(Op.IDENTITY, [x], types=[out_t], bind=False).outputs[0]
        mask = cx.emit(Op.FILL, [], {"value": True}, types=[mask_t], bind=False, suffix="mask").outputs[0] \
            if cx.has_output(1) else None
    cx.bind_at(0, y)
    if cx.has_output(1) and mask is not None:
        cx.bind_at(1, mask)


# -- attention (ai.onnx, opset 23+) ---------------------------------------------------------

def attention_core(cx: NodeCx, q: Value, k: Value, v: Value, mask: Value | None, attrs: dict[str, Any],
                   out_types: list[TensorType], *, bind_index: list[int] | None = None) -> None:
    node = cx.emit(Op.ATTENTION, [q, k, v] + ([mask] if mask is not None else []), attrs, types=out_types,
                   bind=bind_index is None)
    for value, idx in zip(node.outputs, bind_index or ()):
        cx.bind_at(idx, value)


def _concat_past(cx: NodeCx, past: Value | None, new: Value, axis: int, out_index: int, what: str) -> Value:
    if past is None:
        return new
    t = cx.out_type_at(out_index)
    if t is None:
        shape = list(new.type.shape)
        shape[axis] = dim_add(past.type.shape[axis], new.type.shape[axis])
        t = cx.tensor(new.type.dtype, shape)
    out = cx.emit(Op.CONCAT, [past, new], {"axis": axis}, types=[t], bind=False, suffix=f"present_{what}").outputs[0]
    return out


def _attention(cx: NodeCx) -> None:
    q, k, v = cx.input(0), cx.input(1), cx.input(2)
    assert q is not None and k is not None and v is not None
    mask = cx.input(3)
    past_k, past_v = cx.input(4), cx.input(5)
    four_d = q.type.rank == 4
    attrs: dict[str, Any] = {CAUSAL: bool(cx.attr("is_causal", 0))}
    band = attention_mask_band(cx, 3) if not attrs[CAUSAL] and mask is not None else None
    if band is not None:   # a materialised causal mask (.masks), perhaps a sliding window
        attrs.update({**band_attrs(band), "causal_from": "mask"})
    if cx.attr("scale") is not None:
        attrs["scale"] = float(cx.attr("scale"))
    if cx.attr("softcap"):
        attrs["softcap"] = float(cx.attr("softcap"))
    if four_d:
        attrs["layout"] = "bhsd"
        k_all = _concat_past(cx, past_k, k, 2, 1, "key")
        v_all = _concat_past(cx, past_v, v, 2, 2, "value")
    else:
        hq = int(cx.attr("q_num_heads", 0) or 1)
        hk = int(cx.attr("kv_num_heads", 0) or hq)
        attrs.update(layout="bsd", num_heads=hq, kv_num_heads=hk)
        # 3-D inputs with 4-D caches: the cache [B, H, P, D] is concatenated to a free [B, H, L, D]
        # view of the new [B, L, H*D] keys (a cost-equivalent layout adapter, not a transpose).
        k_all = _bsd_with_cache(cx, k, past_k, hk, 1, "key")
        v_all = _bsd_with_cache(cx, v, past_v, hk, 2, "value")
    if four_d:
        if cx.has_output(1) and past_k is not None:
            cx.bind_at(1, k_all)
        elif cx.has_output(1):
            present_k = cx.emit(Op.IDENTITY, [k], types=[cx.out_type(1)], bind=False, suffix="present_key")
            cx.bind_at(1, present_k.outputs[0])
        if cx.has_output(2) and past_v is not None:
            cx.bind_at(2, v_all)
        elif cx.has_output(2):
            present_v = cx.emit(Op.IDENTITY, [v], types=[cx.out_type(2)], bind=False, suffix="present_value")
            cx.bind_at(2, present_v.outputs[0])
    idx = [0] + ([3] if cx.has_output(3) else [])
    types = [cx.out_type_at(i) for i in idx]
    attention_core(cx, q, k_all, v_all, mask, attrs, [t for t in types if t is not None], bind_index=idx)


def _bsd_with_cache(cx: NodeCx, new: Value, past: Value | None, heads: int, out_index: int, what: str) -> Value:
    b, length, hidden = new.type.shape
    if past is None:
        if cx.has_output(out_index):
            adapter = cx.emit(Op.RESHAPE, [new], {"layout_adapter": "bsd->bhsd"}, types=[cx.out_type(out_index)],
                              bind=False, suffix=f"present_{what}")
            cx.bind_at(out_index, adapter.outputs[0])
        return new
    head_dim = dim_floordiv(hidden, heads)
    as4 = cx.emit(Op.RESHAPE, [new], {"layout_adapter": "bsd->bhsd"},
                  types=[cx.tensor(new.type.dtype, (b, heads, length, head_dim))], bind=False,
                  suffix=f"{what}_4d").outputs[0]
    present = _concat_past(cx, past, as4, 2, out_index, what)
    if cx.has_output(out_index):
        cx.bind_at(out_index, present)
    total = dim_add(past.type.shape[2], length)
    return cx.emit(Op.RESHAPE, [present], {"layout_adapter": "bhsd->bsd"},
                   types=[cx.tensor(new.type.dtype, (b, total, hidden))], bind=False, suffix=f"{what}_bsd").outputs[0]


@pure
def _affine_grid(cx: NodeCx) -> None:
    """AffineGrid: a base grid of homogeneous coordinates, times theta (a batched matmul)."""
    theta = cx.input(0)
    assert theta is not None
    out = cx.out_types()[0]
    nd = theta.type.shape[1]
    points: Any = 1
    for d in out.shape[1:-1]:
        points = dim_mul(points, d)
    dt = theta.type.dtype
    base = cx.emit(Op.IOTA, cx.inputs(1), {"role": "base_grid"}, types=[cx.tensor(dt, (points, dim_add(nd, 1)))],
                   bind=False, suffix="base").outputs[0]
    g = cx.emit(Op.DOT, [theta, base], {"lhs_contract": (2,), "rhs_contract": (1,), "lhs_batch": (), "rhs_batch": ()},
                types=[cx.tensor(dt, (theta.type.shape[0], nd, points))], bind=False, suffix="transform").outputs[0]
    t = cx.emit(Op.PERMUTE, [g], {"perm": (0, 2, 1)}, types=[cx.tensor(dt, (theta.type.shape[0], points, nd))],
                bind=False, suffix="permute").outputs[0]
    cx.emit(Op.RESHAPE, [t])


@pure
def _rotary(cx: NodeCx) -> None:
    """x*cos + rotate(x)*sin: two multiplies and an add over the input."""
    t = cx.out_types()
    x = cx.input(0)
    a = cx.emit(Op.MUL, [x], {"role": "rotary_cos"}, types=t, bind=False, suffix="cos").outputs[0]
    b = cx.emit(Op.MUL, [x], {"role": "rotary_sin"}, types=t, bind=False, suffix="sin").outputs[0]
    tables = [v for v in cx.inputs()[1:] if v is not None]   # position ids, cos and sin caches
    cx.emit(Op.ADD, [a, b, *tables], {"role": "rotary", "lookup_operands": len(tables)})


NN_LOWERINGS: dict[str, Callable[[NodeCx], None]] = {
    "Softmax": _softmax(Op.SOFTMAX), "LogSoftmax": _softmax(Op.LOG_SOFTMAX), "Hardmax": _hardmax,
    "LayerNormalization": _norm(Op.LAYER_NORM, -1), "RMSNormalization": _norm(Op.RMS_NORM, -1),
    "SimplifiedLayerNormalization": _norm(Op.RMS_NORM, -1), "BatchNormalization": _batch_norm,
    "InstanceNormalization": _norm(Op.INSTANCE_NORM), "GroupNormalization": _norm(Op.GROUP_NORM),
    "LpNormalization": _lp_norm, "MeanVarianceNormalization": _mvn, "LRN": _lrn,
    "MaxPool": _pool("max"), "AveragePool": _pool("avg"), "LpPool": _pool("lp"),
    "GlobalMaxPool": _global_pool("max"), "GlobalAveragePool": _global_pool("avg"),
    "GlobalLpPool": _global_pool("lp"), "MaxUnpool": _max_unpool, "Resize": _resize, "Upsample": _resize,
    "GridSample": _grid_sample, "RoiAlign": _roi_align, "MaxRoiPool": _max_roi_pool, "Dropout": _dropout,
    "Attention": _attention, "RotaryEmbedding": _rotary, "AffineGrid": _affine_grid,
}
