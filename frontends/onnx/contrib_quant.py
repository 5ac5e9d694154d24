"""Quantized ops: Quantize/DequantizeLinear's scale checks, and the com.microsoft integer and
QOperator ops (``quantize_static``'s QOperator format, ``quantize_dynamic``'s DynamicQuantizeMatMul).

Each lowers like its float op over integer operands: a contraction is an integer DOT into int32
(2*M*K*N FLOPs, the float model's), its zero points read by the DOT itself (:mod:`.contractions`),
then a rescale (DEQUANTIZE) to float or a requantize (QUANTIZE) to the output's integer type; the
other QLinear ops are their float op marked ``quantized``. Their output shapes are in
:mod:`.contrib_shapes`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import ShapeError
from ...ir import OPERAND_MAJOR, DType, Op, TensorType, Value
from .contractions import dot, int32_matmul, zero_points
from .contrib_shapes import MS
from .nn import NN_LOWERINGS
from .node import NodeCx
from .stamp import pure
from .tensor import norm_axis

__all__ = ["QUANT_LOWERINGS", "check_quant_scale"]


def _dims_str(shape: tuple[Any, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def check_quant_scale(cx: NodeCx, x_i: int = 0, scale_i: int = 1, zp_i: int = 2) -> None:
    """A Quantize/DequantizeLinear scale must fit its input (ONNX's spec): a scalar (per tensor), a
    1-D scale as long as the input's ``axis`` (per axis), or, with ``block_size`` B, the input's
    shape with ``axis`` cut to ceil(size / B) blocks; the zero point has the scale's shape. A
    mismatch is a broken model, raised naming the node, never costed as some other layout."""
    xs, ss = cx.shape(x_i), cx.shape(scale_i)
    if xs is None or ss is None:
        return
    block = int(cx.attr("block_size", 0) or 0)
    rank = len(xs)
    axis = norm_axis(int(cx.attr("axis", 1)), max(rank, 1))
    what = f"scale {_dims_str(ss)} for input {_dims_str(xs)}"
    if block > 0:
        if len(ss) != rank or not 0 <= axis < rank:
            raise cx.error(f"{what}: a blocked scale (block_size {block}) needs the input's rank", ShapeError)
        want = tuple(-(-d // block) if i == axis and isinstance(d, int) else d for i, d in enumerate(xs))
        if any(isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(ss, want)):
            raise cx.error(f"{what} with block_size {block} on axis {axis}: needs {_dims_str(want)}", ShapeError)
    elif len(ss) == 1 and ss[0] != 1 or len(ss) > 1:
        if len(ss) != 1 or not 0 <= axis < rank:
            raise cx.error(f"{what}: a per-axis scale is 1-D along an axis of the input", ShapeError)
        if isinstance(ss[0], int) and isinstance(xs[axis], int) and ss[0] != xs[axis]:
            raise cx.error(f"{what}: a per-axis scale on axis {axis} needs {xs[axis]} values", ShapeError)
    zs = cx.shape(zp_i) if cx.n_inputs() > zp_i and cx.input(zp_i) is not None else None
    if zs is not None and len(zs) == len(ss) and any(isinstance(a, int) and isinstance(b, int) and a != b
                                                     for a, b in zip(zs, ss)):
        raise cx.error(f"zero point {_dims_str(zs)} differs from its {what}", ShapeError)


def _quant_linear(op: Op) -> Callable[[NodeCx], None]:
    def fn(cx: NodeCx) -> None:
        check_quant_scale(cx)
        cx.emit(op, cx.inputs())
    return pure(fn)


def _rescaled(cx: NodeCx, acc: Value, scales: list[Value], bias: Value | None) -> None:
    """int32 accumulator -> the float output: a rescale (one multiply), then the bias."""
    out = cx.out_types()
    y = cx.emit(Op.DEQUANTIZE, [acc, *scales], {"role": "rescale"}, types=out, bind=bias is None).outputs[0]
    if bias is not None:
        cx.emit(Op.ADD, [y, bias], {"role": "bias"}, suffix="bias")


def _dynamic_quantize_matmul(cx: NodeCx) -> None:
    """DynamicQuantizeMatMul(A float, B int8/uint8, b_scale, b_zp, bias): onnxruntime's kernel
    quantizes A to uint8 as it runs (MlasFindMinMaxElement: one min/max pass over A, then a quantize
    pass), runs a u8 x s8 (or u8) integer GEMM into int32 and rescales by a_scale * b_scale."""
    a, b = cx.input(0), cx.input(1)
    assert a is not None and b is not None
    # one pass finds both the min and the max (role "minmax"); the scale and zero point follow from them
    minmax = cx.emit(Op.REDUCE_MAX, [a], {"axes": tuple(range(a.type.rank)), "keepdims": False, "role": "minmax"},
                     types=[TensorType(a.type.dtype, ())], bind=False, suffix="minmax").outputs[0]
    aq = cx.emit(Op.QUANTIZE, [a, minmax], {"role": "dynamic"}, types=[TensorType(DType.UINT8, a.type.shape)],
                 bind=False, suffix="quant_a").outputs[0]
    acc = int32_matmul(cx, aq, b, zero_points(cx, None, 3))
    _rescaled(cx, acc, [minmax, *cx.inputs(2)], cx.input(4))


def _matmul_integer_to_float(cx: NodeCx) -> None:
    """MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zp, b_zp, bias): an int32 matmul, rescaled."""
    a, b = cx.input(0), cx.input(1)
    assert a is not None and b is not None
    acc = int32_matmul(cx, a, b, zero_points(cx, 4, 5))
    _rescaled(cx, acc, cx.inputs(2, 3), cx.input(6))


def _qgemm(cx: NodeCx) -> None:
    """QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C, y_scale, y_zp): Gemm's int32 DOT (alpha folds into
    the scale), the int32 bias C, then a requantize to y's type, or a rescale to float without y_scale."""
    a, b = cx.input(0), cx.input(3)
    if a is None or b is None or a.type.rank != 2 or b.type.rank != 2:
        raise cx.error("QGemm needs 2-D A and B", ShapeError)
    ta, tb = int(cx.attr("transA", 0)), int(cx.attr("transB", 0))
    out = cx.out_types()[0]
    acc_t = [TensorType(DType.INT32, out.shape)]
    acc = dot(cx, a, b, (0,) if ta else (1,), (1,) if tb else (0,), types=acc_t, bind=False, suffix="int32",
              extra={"transA": bool(ta), "transB": bool(tb), OPERAND_MAJOR: ("mn" if ta else "k", "k" if tb else "mn")},
              zero_points=zero_points(cx, 2, 5)).outputs[0]
    c = cx.input(6)
    if c is not None:
        acc = cx.emit(Op.ADD, [acc, c], {"role": "bias"}, types=acc_t, bind=False, suffix="bias").outputs[0]
    if cx.input(7) is not None:
        cx.emit(Op.QUANTIZE, [acc, *cx.inputs(1, 4, 7, 8)], {"role": "requantize"})
    else:
        cx.emit(Op.DEQUANTIZE, [acc, *cx.inputs(1, 4)], {"role": "rescale"})


def _qlinear(op: Op) -> Callable[[NodeCx], None]:
    """QLinearAdd/Mul(a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp) and unary QLinear ops: the float op."""
    def fn(cx: NodeCx) -> None:
        data = cx.inputs(0, 3) if op in (Op.ADD, Op.MUL) else cx.inputs(0)
        cx.emit(op, data, {"quantized": True})
    return fn


def _qlinear_softmax(cx: NodeCx) -> None:
    """QLinearSoftmax(x, x_s, x_zp, y_s, y_zp): softmax over ``axis`` (onnxruntime's kernel looks
    exp up in a 256-entry table; its count is the float op's)."""
    rank = max(cx.rank(0), 1)
    default = -1 if int(cx.attr("opset", 13)) >= 13 else 1
    cx.emit(Op.SOFTMAX, cx.inputs(0), {"axis": norm_axis(int(cx.attr("axis", default)), rank), "quantized": True})


def _qlinear_global_pool(cx: NodeCx) -> None:
    """QLinearGlobalAveragePool(x, x_s, x_zp, y_s, y_zp): a global average over the spatial dims
    (``channels_last``: the dims between batch and channels)."""
    attrs: dict[str, Any] = {"kind": "avg", "global_pool": True, "quantized": True}
    if cx.attr("channels_last", 0):
        attrs["channels_last"] = True
    cx.emit(Op.POOL, cx.inputs(0), attrs)


def _qlinear_avg_pool(cx: NodeCx) -> None:
    """QLinearAveragePool(x, x_s, x_zp, y_s, y_zp): AveragePool's window over the integer input."""
    NN_LOWERINGS["AveragePool"](cx)   # it reads the data operand only


def _qlinear_concat(cx: NodeCx) -> None:
    """QLinearConcat(y_s, y_zp, (x, x_s, x_zp)...): a concat of the data operands."""
    data = [v for v in (cx.input(i) for i in range(2, cx.n_inputs(), 3)) if v is not None]
    rank = max(data[0].type.rank if data else 1, 1)
    cx.emit(Op.CONCAT, data, {"axis": norm_axis(int(cx.attr("axis", 0)), rank), "quantized": True})


def _qlinear_where(cx: NodeCx) -> None:
    """QLinearWhere(cond, x, x_s, x_zp, y, y_s, y_zp, z_s, z_zp): where(cond, x, y)."""
    cx.emit(Op.WHERE, cx.inputs(0, 1, 4), {"quantized": True})


def _qlinear_reduce_mean(cx: NodeCx) -> None:
    """QLinearReduceMean(x, x_s, x_zp, y_s, y_zp) with ``axes`` and ``keepdims`` attributes."""
    rank = max(cx.rank(0), 1)
    axes = cx.attr("axes") or list(range(rank))
    cx.emit(Op.REDUCE_MEAN, cx.inputs(0), {"axes": tuple(norm_axis(int(a), rank) for a in axes),
                                           "keepdims": bool(cx.attr("keepdims", 1)), "quantized": True})


QUANT_LOWERINGS: dict[str, Callable[[NodeCx], None]] = {
    "QuantizeLinear": _quant_linear(Op.QUANTIZE), "DequantizeLinear": _quant_linear(Op.DEQUANTIZE),
    MS + "DynamicQuantizeMatMul": _dynamic_quantize_matmul, MS + "MatMulIntegerToFloat": _matmul_integer_to_float,
    MS + "QGemm": _qgemm, MS + "QLinearAdd": _qlinear(Op.ADD), MS + "QLinearMul": _qlinear(Op.MUL),
    MS + "QLinearSigmoid": _qlinear(Op.SIGMOID), MS + "QLinearLeakyRelu": _qlinear(Op.LEAKY_RELU),
    MS + "QLinearSoftmax": _qlinear_softmax, MS + "QLinearGlobalAveragePool": _qlinear_global_pool,
    MS + "QLinearAveragePool": _qlinear_avg_pool, MS + "QLinearConcat": _qlinear_concat,
    MS + "QLinearWhere": _qlinear_where, MS + "QLinearReduceMean": _qlinear_reduce_mean,
}
