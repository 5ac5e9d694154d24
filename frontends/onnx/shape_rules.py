"""The frontend's own output-shape rules, for where ONNX's inference leaves dims unknown.

Only the ops whose output dims are *computed* (reshape targets, broadcasts, ranges, slices,
concatenations, matmuls, convolution windows...) need a rule: ONNX already carries symbolic dims
through the ops that merely pass them along. Conventions are in :mod:`.shape_base`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from ...ir import DType
from .attention_shapes import ATTENTION_SHAPE_RULES
from .fold import as_dims, as_ints
from .reshape_open import open_reshape
from .shape_base import Dim, RuleContext, broadcast, inputs_shapes, length_of, max_dim, numel, rule_error, unknown_dims
from .shape_windows import WINDOW_RULES, conv_out_dim
from .shapes import Bounded, OutSpec
from .symdims import dim_add, dim_ceildiv, dim_floordiv, dim_max, dim_min, dim_mul, dim_sub

if TYPE_CHECKING:
    from .node import NodeCx

__all__ = ["SHAPE_RULES", "broadcast", "conv_out_dim", "numel", "rule_error"]


def _broadcast_rule(cx: RuleContext) -> list[OutSpec | None]:
    shapes = inputs_shapes(cx, [i for i in range(cx.n_inputs()) if cx.shape(i) is not None])
    if not shapes:
        return [None]
    return [(None, broadcast(cx, shapes))]


def _same_as_input(cx: RuleContext) -> list[OutSpec | None]:
    """The first output has the input's shape (its dtype comes from ONNX: Cast, IsNaN... change it)."""
    return [(None, cx.shape(0))] + [None] * (cx.n_outputs() - 1)


def _dropout(cx: RuleContext) -> list[OutSpec | None]:
    """Output and mask share the input's shape (the mask is bool from opset 10, else the input type)."""
    x = cx.shape(0)
    specs: list[OutSpec | None] = [(None, x), (DType.BOOL if cx.opset >= 10 else cx.dtype(0), x)]
    return specs[:max(cx.n_outputs(), 1)]


def _matmul(cx: RuleContext) -> list[OutSpec | None]:
    a, b = cx.shape(0), cx.shape(1)
    if a is None or b is None:
        return [None]
    if not a or not b:
        raise rule_error(cx, "MatMul operands must have rank >= 1")
    ka = a[-1]
    kb = b[0] if len(b) == 1 else b[-2]
    if isinstance(ka, int) and isinstance(kb, int) and ka != kb:
        raise rule_error(cx, f"MatMul inner dims differ: {list(map(str, a))} @ {list(map(str, b))}")
    if len(a) == 1 and len(b) == 1:
        return [(None, ())]
    if len(b) == 1:
        return [(None, tuple(a[:-1]))]
    if len(a) == 1:
        return [(None, tuple(b[:-2]) + (b[-1],))]
    batch = broadcast(cx, [tuple(a[:-2]), tuple(b[:-2])])
    return [(None, batch + (a[-2], b[-1]))]


def _gemm(cx: RuleContext) -> list[OutSpec | None]:
    a, b = cx.shape(0), cx.shape(1)
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return [None]
    ta, tb = int(cx.attr("transA", 0)), int(cx.attr("transB", 0))
    m, ka = (a[1], a[0]) if ta else (a[0], a[1])
    kb, n = (b[1], b[0]) if tb else (b[0], b[1])
    if isinstance(ka, int) and isinstance(kb, int) and ka != kb:
        raise rule_error(cx, f"Gemm inner dims differ: A{list(map(str, a))} (transA={ta}), "
                             f"B{list(map(str, b))} (transB={tb})")
    return [(None, (m, n))]


def _reshape(cx: RuleContext) -> list[OutSpec | None]:
    data = cx.shape(0)
    target = as_dims(cx.known(1)) if cx.opset >= 5 else cx.attr("shape")
    allowzero = int(cx.attr("allowzero", 0))
    if target is None:
        if cx.opset < 5:
            return [None]
        return [open_reshape(cast("NodeCx", cx), data, bool(allowzero))]
    out: list[Dim] = []
    minus = -1
    for i, d in enumerate(target):
        if isinstance(d, int) and d == 0 and not allowzero:
            if data is None or i >= len(data):
                return [None]
            out.append(data[i])
        elif isinstance(d, int) and d == -1:
            if minus >= 0:
                raise rule_error(cx, "Reshape target has more than one -1")
            minus = i
            out.append(-1)
        elif isinstance(d, int) and d < -1:
            raise rule_error(cx, f"Reshape target has a negative size {d}")
        else:
            out.append(d)
    if minus >= 0:
        if data is None:
            return [None]
        known = numel(tuple(d for i, d in enumerate(out) if i != minus))
        total = numel(data)
        try:
            out[minus] = dim_floordiv(total, known)
        except ZeroDivisionError:
            out[minus] = 0
        if isinstance(total, int) and isinstance(known, int) and known and total % known:
            raise rule_error(cx, f"cannot reshape {list(map(str, data))} ({total} elements) to {target}")
    elif data is not None:
        total, new = numel(data), numel(tuple(out))
        if isinstance(total, int) and isinstance(new, int) and total != new:
            raise rule_error(cx, f"cannot reshape {list(map(str, data))} ({total} elements) to "
                           f"{[str(d) for d in out]} ({new} elements)")
    return [(None, tuple(out))]


def _expand(cx: RuleContext) -> list[OutSpec | None]:
    data, target = cx.shape(0), as_dims(cx.known(1))
    if data is not None and target is None:
        n = length_of(cx, 1)
        return [unknown_dims(cx, None if n is None else max(n, len(data)))]
    if data is None or target is None:
        return [None]
    return [(None, broadcast(cx, [tuple(data), tuple(target)]))]


def _constant_of_shape(cx: RuleContext) -> list[OutSpec | None]:
    target = as_dims(cx.known(0))
    if target is None:
        return [unknown_dims(cx, length_of(cx, 0))]
    if any(isinstance(d, int) and d < 0 for d in target):
        raise rule_error(cx, f"ConstantOfShape with a negative size {target}")
    return [(None, tuple(target))]


def _tile(cx: RuleContext) -> list[OutSpec | None]:
    data, reps = cx.shape(0), as_dims(cx.known(1))
    if data is not None and reps is None:
        return [unknown_dims(cx, len(data))]
    if data is None or reps is None or len(reps) != len(data):
        return [None]
    return [(None, tuple(dim_mul(d, r) for d, r in zip(data, reps)))]


def _range(cx: RuleContext) -> list[OutSpec | None]:
    vals = [as_dims(cx.known(i)) for i in range(3)]
    scalars = [v[0] for v in vals if v is not None and len(v) == 1]
    if len(scalars) != 3:
        return [unknown_dims(cx, 1)]
    start, limit, delta = scalars
    if not isinstance(delta, int) or delta == 0:
        return [None]
    span = dim_sub(limit, start) if delta > 0 else dim_sub(start, limit)
    n = dim_ceildiv(span, abs(delta))
    if isinstance(n, int):
        n = max(n, 0)
    return [(None, (n,))]


def _concat(cx: RuleContext) -> list[OutSpec | None]:
    shapes = inputs_shapes(cx, range(cx.n_inputs()))
    if not shapes:
        return [None]
    rank = len(shapes[0])
    axis = int(cx.attr("axis", 0))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < max(rank, 1):
        raise rule_error(cx, f"Concat axis {cx.attr('axis')} out of range for rank {rank}")
    if any(len(s) != rank for s in shapes):
        raise rule_error(cx, f"Concat inputs differ in rank: {[list(map(str, s)) for s in shapes]}")
    total: Dim = 0
    for s in shapes:
        total = dim_add(total, s[axis])
    out = list(shapes[0])
    out[axis] = total
    return [(None, tuple(out))]


def _slice_len(dim: Dim, start: Dim, end: Dim, step: int) -> Dim:
    big = 1 << 62
    if isinstance(dim, int) and isinstance(start, int) and isinstance(end, int):
        return len(range(*slice(start, end, step).indices(dim)))
    if step != 1:
        if isinstance(start, int) and start == 0 and isinstance(end, int) and end >= big:
            return dim_ceildiv(dim, step)
        return None
    s = start if not (isinstance(start, int) and start < 0) else dim_add(dim, start)
    if isinstance(end, int) and end >= big:
        e: Dim = dim
    elif isinstance(end, int) and end < 0:
        e = dim_add(dim, end)
    else:
        e = dim_min(end, dim)
    if isinstance(s, int) and s == 0:
        return e
    return dim_max(dim_sub(e, s), 0)


def _slice(cx: RuleContext) -> list[OutSpec | None]:
    data = cx.shape(0)
    if data is None:
        return [None]
    if cx.opset < 10:
        starts, ends, axes, steps = cx.attr("starts"), cx.attr("ends"), cx.attr("axes"), None
    else:
        starts, ends = as_dims(cx.known(1)), as_dims(cx.known(2))
        axes = as_ints(cx.known(3)) if cx.n_inputs() > 3 and cx.known(3) is not None else None
        if cx.n_inputs() > 3 and cx.shape(3) is not None and axes is None and cx.known(3) is None:
            return [None]
        steps = as_ints(cx.known(4)) if cx.n_inputs() > 4 else None
        if cx.n_inputs() > 4 and steps is None:
            return [None]
    if starts is None or ends is None:
        return [(None, tuple(Bounded(d) for d in data))]
    axes = list(axes) if axes is not None else list(range(len(starts)))
    steps = list(steps) if steps is not None else [1] * len(starts)
    out: list[Dim] = list(data)
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = int(a) + len(data) if int(a) < 0 else int(a)
        if not 0 <= a < len(data):
            raise rule_error(cx, f"Slice axis {a} out of range for rank {len(data)}")
        if st == 0:
            raise rule_error(cx, "Slice step is 0")
        n = _slice_len(data[a], s, e, int(st))
        if n is None:
            return [None]
        out[a] = n
    return [(None, tuple(out))]


def _gather(cx: RuleContext) -> list[OutSpec | None]:
    data, idx = cx.shape(0), cx.shape(1)
    if data is None or idx is None:
        return [None]
    axis = int(cx.attr("axis", 0))
    axis = axis + len(data) if axis < 0 else axis
    if not 0 <= axis < len(data):
        raise rule_error(cx, f"Gather axis {cx.attr('axis', 0)} out of range for rank {len(data)}")
    return [(None, tuple(data[:axis]) + tuple(idx) + tuple(data[axis + 1:]))]


def _axes(cx: RuleContext, input_index: int) -> list[int] | None:
    if cx.opset >= 13 and cx.n_inputs() > input_index:
        return as_ints(cx.known(input_index))
    v = cx.attr("axes")
    return None if v is None else [int(x) for x in v]


def _unsqueeze(cx: RuleContext) -> list[OutSpec | None]:
    data, axes = cx.shape(0), _axes(cx, 1)
    if data is not None and axes is None:
        n = length_of(cx, 1)
        return [unknown_dims(cx, None if n is None else len(data) + n, max_dim(data))]
    if data is None or axes is None:
        return [None]
    r = len(data) + len(axes)
    out: list[Dim] = list(data)
    for a in sorted(x + r if x < 0 else x for x in axes):
        out.insert(a, 1)
    return [(None, tuple(out))]


def _squeeze(cx: RuleContext) -> list[OutSpec | None]:
    data = cx.shape(0)
    if data is None:
        return [None]
    axes = _axes(cx, 1)
    if axes is None:
        if cx.opset >= 13 and cx.n_inputs() > 1:
            n = length_of(cx, 1)
            return [unknown_dims(cx, None if n is None else len(data) - n, max_dim(data))]
        if any(not isinstance(d, int) for d in data):
            return [None]
        return [(None, tuple(d for d in data if d != 1))]
    drop = {a + len(data) if a < 0 else a for a in axes}
    return [(None, tuple(d for i, d in enumerate(data) if i not in drop))]


def _flatten(cx: RuleContext) -> list[OutSpec | None]:
    data = cx.shape(0)
    if data is None:
        return [None]
    axis = int(cx.attr("axis", 1))
    axis = axis + len(data) if axis < 0 else axis
    return [(None, (numel(tuple(data[:axis])), numel(tuple(data[axis:]))))]


def _transpose(cx: RuleContext) -> list[OutSpec | None]:
    data = cx.shape(0)
    if data is None:
        return [None]
    perm = cx.attr("perm") or list(reversed(range(len(data))))
    if sorted(perm) != list(range(len(data))):
        raise rule_error(cx, f"Transpose perm {list(perm)} is not a permutation of rank {len(data)}")
    return [(None, tuple(data[p] for p in perm))]


def _split(cx: RuleContext) -> list[OutSpec | None]:
    data = cx.shape(0)
    n = cx.n_outputs()
    if data is None:
        return [None] * n
    axis = int(cx.attr("axis", 0))
    axis = axis + len(data) if axis < 0 else axis
    sizes: list[Dim] | None = None
    if cx.opset >= 13 and cx.n_inputs() > 1 and cx.shape(1) is not None:
        sizes = as_dims(cx.known(1))
    elif cx.attr("split") is not None:
        sizes = [int(x) for x in cx.attr("split")]
    if sizes is None:
        if cx.opset >= 13 and cx.n_inputs() > 1 and cx.shape(1) is not None:
            return [(None, tuple(Bounded(d) if i == axis else d for i, d in enumerate(data)))] * n
        parts = int(cx.attr("num_outputs", n) or n)
        dim = data[axis]
        chunk = dim_ceildiv(dim, parts)
        sizes = [chunk] * (parts - 1) + [dim_sub(dim, dim_mul(chunk, parts - 1))]
    out: list[OutSpec | None] = []
    for s in sizes[:n]:
        shape = list(data)
        shape[axis] = s
        out.append((None, tuple(shape)))
    return out + [None] * (n - len(out))


def _pad(cx: RuleContext) -> list[OutSpec | None]:
    data = cx.shape(0)
    if data is None:
        return [None]
    pads = as_dims(cx.known(1)) if cx.opset >= 11 else cx.attr("pads", cx.attr("paddings"))
    if pads is None:
        return [unknown_dims(cx, len(data))]
    r = len(data)
    axes = as_ints(cx.known(3)) if cx.n_inputs() > 3 and cx.opset >= 18 else None
    if cx.n_inputs() > 3 and cx.opset >= 18 and cx.shape(3) is not None and axes is None:
        return [None]
    axes = [a + r if a < 0 else a for a in axes] if axes is not None else list(range(r))
    if len(pads) != 2 * len(axes):
        raise rule_error(cx, f"Pad has {len(pads)} pads for {len(axes)} axes")
    out = list(data)
    for k, a in enumerate(axes):
        out[a] = dim_add(dim_add(out[a], pads[k]), pads[k + len(axes)])
    return [(None, tuple(out))]


def _where(cx: RuleContext) -> list[OutSpec | None]:
    return _broadcast_rule(cx)


_BROADCAST_OPS = ("Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "And", "Or",
                  "Xor", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "BitShift",
                  "BitwiseAnd", "BitwiseOr", "BitwiseXor", "PRelu", "Where")
_SAME_OPS = ("Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Erf", "Cast", "CastLike",
             "Softmax", "LogSoftmax", "Identity", "LayerNormalization", "Gelu", "Not",
             "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Clip", "LeakyRelu", "Elu",
             "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Mish", "Selu", "Celu", "Swish",
             "IsNaN", "IsInf", "MeanVarianceNormalization", "LpNormalization", "InstanceNormalization",
             "BatchNormalization", "GroupNormalization", "RMSNormalization", "SimplifiedLayerNormalization",
             "CumSum", "CumProd",
             "Trilu", "Hardmax", "LRN", "Shrink", "ThresholdedRelu", "Tan", "Asin", "Acos", "Atan",
             "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "QuantizeLinear", "DequantizeLinear",
             "ScatterElements", "ScatterND", "Scatter", "BitwiseNot", "ReverseSequence")

SHAPE_RULES: dict[str, Callable[[Any], list[OutSpec | None]]] = {
    **{op: _broadcast_rule for op in _BROADCAST_OPS},
    **{op: _same_as_input for op in _SAME_OPS},
    "Dropout": _dropout, "MatMul": _matmul, "MatMulInteger": _matmul, "Gemm": _gemm, "Reshape": _reshape,
    "Expand": _expand,
    "ConstantOfShape": _constant_of_shape, "Tile": _tile, "Range": _range, "Concat": _concat,
    "Slice": _slice, "Gather": _gather, "Unsqueeze": _unsqueeze, "Squeeze": _squeeze,
    "Flatten": _flatten, "Transpose": _transpose, "Split": _split, "Pad": _pad, **WINDOW_RULES,
    **ATTENTION_SHAPE_RULES,
}
