"""Lowerings of ONNX tensor ops: views, data movement, gather/scatter, reductions, creation.

Every ONNX input is kept as an IR input (a reshape still reads its shape tensor), except where a
cost rule reads inputs by position and an ONNX parameter tensor would be mistaken for data.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from onnx import TensorProto

from ...errors import ShapeError
from ...ir import DType, Op, TensorType, ValueKind
from .node import NodeCx
from .stamp import pure
from .types import DTYPES, constant_type, small_array

__all__ = ["TENSOR_LOWERINGS", "one", "norm_axis"]


def norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def one(op: Op, **fixed: object) -> Callable[[NodeCx], None]:
    """One canonical op over all present inputs, with fixed attributes."""
    def fn(cx: NodeCx) -> None:
        cx.emit(op, cx.inputs(), dict(fixed) or None)
    return pure(fn)


def _axis_attr(op: Op, default: int = 0, **fixed: object) -> Callable[[NodeCx], None]:
    def fn(cx: NodeCx) -> None:
        rank = max(cx.rank(0), 1)
        cx.emit(op, cx.inputs(), {"axis": norm_axis(int(cx.attr("axis", default)), rank), **fixed})
    return pure(fn)


@pure
def _range(cx: NodeCx) -> None:
    """Range as an iota, keeping a constant start and step (``start``, ``delta``): a gather indexed
    by it can then be checked against its table once the length is bound (GPT-2's position table)."""
    fixed: dict[str, object] = {}
    for key, i in (("start", 0), ("delta", 2)):
        known = cx.known_ints(i)
        if known is not None and len(known) == 1:
            fixed[key] = int(known[0])
    cx.emit(Op.IOTA, cx.inputs(), fixed or None)


@pure
def _reshape(cx: NodeCx) -> None:
    """Reshape, Flatten, Squeeze, Unsqueeze: views, which must keep the element count."""
    x, out = cx.input(0), cx.out_types()[0]
    if x is not None and x.type.is_static and out.is_static and x.type.numel() != out.numel():
        raise cx.error(f"cannot reshape {list(x.type.shape)} ({x.type.numel()} elements) to {list(out.shape)} "
                       f"({out.numel()} elements)", ShapeError)
    cx.emit(Op.RESHAPE, cx.inputs())


@pure
def _transpose(cx: NodeCx) -> None:
    r = cx.rank(0)
    perm = cx.attr("perm") or list(reversed(range(r)))
    cx.emit(Op.PERMUTE, cx.inputs(), {"perm": tuple(int(p) for p in perm)})


@pure
def _split(cx: NodeCx) -> None:
    axis = norm_axis(int(cx.attr("axis", 0)), max(cx.rank(0), 1))
    cx.emit(Op.SPLIT, cx.inputs(), {"axis": axis})


@pure
def _pad(cx: NodeCx) -> None:
    cx.emit(Op.PAD, cx.inputs(), {"mode": str(cx.attr("mode", "constant"))})


def _identity(cx: NodeCx) -> None:
    """Identity of a top-level weight is another weight: exporters dedupe byte-identical parameters
    (all-ones norm weights, zero biases) and re-expose each copy through an Identity. In a QDQ
    model the deduped weight is quantized, so the copy is an Identity of its DequantizeLinear: the
    copy is then a quantized weight of its own, dequantized with the same scales."""
    x = cx.input(0)
    if x is not None and cx.is_sequence(0):
        cx.emit(Op.IDENTITY, [x], types=cx.settle([(x.type.dtype, x.type.shape)], override=True))
        return
    out = cx.present_outputs()[0] if cx.present_outputs() else ""
    if x is not None and x.kind.is_weight:
        cx.bind([cx.add_weight(out, x.type, x.kind, source_name=f"{out} (identity of {x.source_name})")])
        return
    deq = x.producer if x is not None else None
    stored = deq.inputs[0] if deq is not None and deq.op is Op.DEQUANTIZE and deq.inputs else None
    if deq is not None and stored is not None and stored.producer is None and stored.kind is ValueKind.PARAM:
        copy = cx.add_weight(f"{out}_quantized", stored.type, stored.kind,
                             source_name=f"{out} (identity of {stored.source_name}, dequantized)")
        cx.emit(Op.DEQUANTIZE, [copy, *deq.inputs[1:]], dict(deq.attrs) or None)
        return
    cx.emit(Op.IDENTITY, cx.inputs())


def _constant(cx: NodeCx) -> None:
    """A Constant node is a constant weight of the program (no runtime cost, counted in weight bytes)."""
    out = cx.present_outputs()[0]
    t = cx.attr("value")
    arr: np.ndarray | None = None
    if isinstance(t, TensorProto):
        ttype = constant_type(t, cx.file, cx.name)
        arr = small_array(t)
    elif cx.attr("sparse_value") is not None:
        sp = cx.attr("sparse_value")
        ttype = TensorType(DTYPES.get(sp.values.data_type, DType.FP32), tuple(int(d) for d in sp.dims))
    else:
        for key, dtype, is_list in (("value_float", DType.FP32, False), ("value_floats", DType.FP32, True),
                                    ("value_int", DType.INT64, False), ("value_ints", DType.INT64, True),
                                    ("value_string", DType.STRING, False), ("value_strings", DType.STRING, True)):
            val = cx.attr(key)
            if val is not None:
                shape = (len(val),) if is_list else ()
                ttype = TensorType(dtype, shape)
                if dtype is not DType.STRING:
                    arr = np.asarray(val, dtype=np.int64 if dtype is DType.INT64 else np.float32).reshape(shape)
                break
        else:
            raise cx.error("Constant has no value attribute")
    v = cx.add_weight(out, ttype, ValueKind.CONST)
    cx.bind([v])
    if arr is not None and cx.folded is None:
        cx.folded = [arr]


@pure
def _cast(cx: NodeCx) -> None:
    out = cx.out_types()[0]
    cx.emit(Op.CAST, cx.inputs(), {"to": out.dtype.value})


@pure
def _bitcast(cx: NodeCx) -> None:
    cx.emit(Op.RESHAPE, cx.inputs(), {"bitcast": True})


def _reduce_attrs(cx: NodeCx) -> dict[str, object]:
    rank = cx.rank(0)
    if cx.n_inputs() > 1 and cx.input(1) is not None:
        axes = cx.known_ints(1)
    else:
        axes = cx.attr("axes")
    if not axes and not cx.attr("noop_with_empty_axes", 0):
        axes = list(range(rank))
    return {"axes": tuple(norm_axis(int(a), max(rank, 1)) for a in axes or ()),
            "keepdims": bool(cx.attr("keepdims", 1))}


def _reduce(op: Op, **fixed: object) -> Callable[[NodeCx], None]:
    def fn(cx: NodeCx) -> None:
        cx.emit(op, cx.inputs(), {**_reduce_attrs(cx), **fixed})
    return pure(fn)


@pure
def _reduce_log_sum(cx: NodeCx) -> None:
    """ReduceLogSum = log(sum(x)): a reduction, then a log of the (smaller) result."""
    out = cx.out_types()[0]
    s = cx.emit(Op.REDUCE_SUM, cx.inputs(), _reduce_attrs(cx), types=[out], bind=False, suffix="sum").outputs[0]
    cx.emit(Op.LOG, [s])


def _arg(op: Op) -> Callable[[NodeCx], None]:
    def fn(cx: NodeCx) -> None:
        rank = max(cx.rank(0), 1)
        cx.emit(op, cx.inputs(), {"axes": (norm_axis(int(cx.attr("axis", 0)), rank),),
                                  "keepdims": bool(cx.attr("keepdims", 1))})
    return pure(fn)


def _cumulative(op: Op) -> Callable[[NodeCx], None]:
    def fn(cx: NodeCx) -> None:
        axis = cx.known_ints(1)
        rank = max(cx.rank(0), 1)
        cx.emit(op, cx.inputs(), {"axis": norm_axis(axis[0], rank) if axis else 0,
                                  "exclusive": bool(cx.attr("exclusive", 0)), "reverse": bool(cx.attr("reverse", 0))})
    return pure(fn)


@pure
def _gather_nd(cx: NodeCx) -> None:
    cx.emit(Op.GATHER_ND, cx.inputs(), {"batch_dims": int(cx.attr("batch_dims", 0))})


def _scatter(op: Op) -> Callable[[NodeCx], None]:
    def fn(cx: NodeCx) -> None:
        attrs: dict[str, object] = {"reduce": str(cx.attr("reduction", "none"))}
        if op is Op.SCATTER_ELEMENTS:
            attrs["axis"] = norm_axis(int(cx.attr("axis", 0)), max(cx.rank(0), 1))
        cx.emit(op, cx.inputs(), attrs)
    return pure(fn)


@pure
def _tensor_scatter(cx: NodeCx) -> None:
    """TensorScatter(past_cache, update, write_indices): writes ``update`` into the cache."""
    past, update = cx.input(0), cx.input(1)
    idx = cx.input(2)
    cx.emit(Op.SCATTER_ND, [v for v in (past, idx, update) if v is not None],
            {"reduce": "none", "mode": str(cx.attr("mode", "linear"))})


@pure
def _compress(cx: NodeCx) -> None:
    axis = cx.attr("axis")
    cx.emit(Op.GATHER, cx.inputs(), {"axis": -1 if axis is None else norm_axis(int(axis), max(cx.rank(0), 1)),
                                      "mask": True})


@pure
def _topk(cx: NodeCx) -> None:
    k = cx.known_ints(1) if cx.opset >= 10 else [int(cx.attr("k", 1))]
    out = cx.out_types()[0]
    axis = norm_axis(int(cx.attr("axis", -1)), max(cx.rank(0), 1))
    kk = k[0] if k else out.shape[axis]
    cx.emit(Op.TOPK, cx.inputs(), {"k": kk if isinstance(kk, int) else 1, "axis": axis,
                                   "largest": bool(cx.attr("largest", 1))})


@pure
def _unique(cx: NodeCx) -> None:
    axis = cx.attr("axis")
    rank = max(cx.rank(0), 1)
    cx.emit(Op.UNIQUE, cx.inputs(), {"axis": -1 if axis is None else norm_axis(int(axis), rank),
                                     "sorted": bool(cx.attr("sorted", 1))})


@pure
def _fill(cx: NodeCx) -> None:
    cx.emit(Op.FILL, cx.inputs(), None)


def _constant_of_shape(cx: NodeCx) -> None:
    """ConstantOfShape over a shape stored in the file is a stored tensor (a weight, classified
    with the initializers: :mod:`.filled` says why); over a shape computed at run time, a fill.
    Not :func:`pure`: which it is depends on where the shape comes from, not on the signature."""
    present = cx.present_outputs()
    out = present[0] if present else ""
    stored = cx.lw.info.params.get(out) if out and cx.scope.parent is None else None
    out_type = cx.out_types()[0] if stored is not None else None
    if stored is not None and out_type is not None and out_type.is_static:
        kind, note = stored
        cx.bind([cx.add_weight(out, out_type, kind, source_name=note or f"{out} (ConstantOfShape)")])
        return
    cx.emit(Op.FILL, cx.inputs(), None)


@pure
def _random(cx: NodeCx) -> None:
    cx.emit(Op.RANDOM, cx.inputs(), {"distribution": cx.op_type})


@pure
def _trilu(cx: NodeCx) -> None:
    cx.emit(Op.TRIANGULAR, cx.inputs(), {"upper": bool(cx.attr("upper", 1))})


def _depth_to_space(op: Op) -> Callable[[NodeCx], None]:
    def fn(cx: NodeCx) -> None:
        cx.emit(op, cx.inputs(), {"blocksize": int(cx.attr("blocksize", 1)), "mode": str(cx.attr("mode", "DCR"))})
    return pure(fn)


TENSOR_LOWERINGS: dict[str, Callable[[NodeCx], None]] = {
    "Reshape": _reshape, "Flatten": _reshape, "Squeeze": _reshape, "Unsqueeze": _reshape,
    "Expand": one(Op.EXPAND), "Transpose": _transpose,
    "Concat": _axis_attr(Op.CONCAT), "Split": _split, "Slice": one(Op.SLICE), "Pad": _pad,
    "Tile": one(Op.TILE), "DepthToSpace": _depth_to_space(Op.DEPTH_TO_SPACE),
    "SpaceToDepth": _depth_to_space(Op.SPACE_TO_DEPTH), "Trilu": _trilu,
    "ReverseSequence": one(Op.FLIP, partial=True), "CenterCropPad": one(Op.PAD, mode="center_crop_pad"),
    "Identity": _identity, "Shape": one(Op.SHAPE_OF), "Size": one(Op.SHAPE_OF, what="size"),
    "Constant": _constant, "Cast": _cast, "CastLike": _cast, "BitCast": _bitcast,
    "ConstantOfShape": _constant_of_shape, "EyeLike": _fill, "OneHot": _fill, "MelWeightMatrix": _fill,
    "Range": _range, "RandomNormal": _random, "RandomUniform": _random, "RandomNormalLike": _random,
    "RandomUniformLike": _random, "Bernoulli": _random, "Multinomial": _random,
    "Gather": _axis_attr(Op.GATHER), "GatherElements": _axis_attr(Op.GATHER_ELEMENTS),
    "GatherND": _gather_nd, "Scatter": _scatter(Op.SCATTER_ELEMENTS),
    "ScatterElements": _scatter(Op.SCATTER_ELEMENTS), "ScatterND": _scatter(Op.SCATTER_ND),
    "TensorScatter": _tensor_scatter, "Compress": _compress, "NonZero": one(Op.NONZERO), "Unique": _unique,
    "TopK": _topk, "ReduceSum": _reduce(Op.REDUCE_SUM), "ReduceMean": _reduce(Op.REDUCE_MEAN),
    "ReduceMax": _reduce(Op.REDUCE_MAX), "ReduceMin": _reduce(Op.REDUCE_MIN),
    "ReduceProd": _reduce(Op.REDUCE_PROD), "ReduceL1": _reduce(Op.REDUCE_NORM, p=1),
    "ReduceL2": _reduce(Op.REDUCE_NORM, p=2), "ReduceSumSquare": _reduce(Op.REDUCE_NORM, p=2, root=False),
    "ReduceLogSumExp": _reduce(Op.REDUCE_LOGSUMEXP), "ReduceLogSum": _reduce_log_sum,
    "ArgMax": _arg(Op.ARGMAX), "ArgMin": _arg(Op.ARGMIN), "CumSum": _cumulative(Op.CUMSUM),
    "CumProd": _cumulative(Op.CUMPROD),
}
