"""Gradients of normalizations, softmaxes and reductions.

A normalization's backward is one kernel in every framework (``native_layer_norm_backward``,
``_softmax_backward_data``), so it is one node here: the forward op with ``role="grad"``, reading the
output gradient and what the kernel needs (the input for a norm, the output for a softmax), writing
the gradients the attr ``grads`` lists (``input``, ``weight``, ``bias``). Its FLOPs per element are
listed beside the forward's in :mod:`narrowpipe.costmodel.rules`. Reductions follow torch's formulas:
a sum's gradient is a broadcast view of the output gradient, a mean's one division over it.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod

from ...ir import DType, Node, Op, TensorType, Value
from ...ir.dims import Shape
from .context import GradContext, Grads

__all__ = ["NORM_GRADS"]

_NORMS = (Op.LAYER_NORM, Op.RMS_NORM, Op.GROUP_NORM, Op.INSTANCE_NORM, Op.BATCH_NORM)
_GRAD_NAMES = ("input", "weight", "bias")


def _norm(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """One backward kernel for dx, dweight and dbias (running statistics get none)."""
    x, dy = node.inputs[0], dys[0]
    assert x is not None and dy is not None
    which = [i for i in range(min(3, len(node.inputs))) if wants[i]]
    if not which:
        return [None] * len(node.inputs)
    which = sorted({0, *which})   # the kernel's first output is dx (the IR's norms keep it first)
    types = []
    for i in which:
        v = node.inputs[i]
        assert v is not None
        types.append(TensorType(v.dtype, v.shape))
    reads = [dy, *(cx.val(v) for v in node.inputs[:2] if v is not None)]
    attrs = {k: v for k, v in node.attrs.items() if k != "phase"}
    attrs.update(role="grad", grads=tuple(_GRAD_NAMES[i] for i in which))
    outs = cx.emit_types(node.op, reads, types, attrs, name="grad")
    out: Grads = [None] * len(node.inputs)
    for i, g in zip(which, outs):
        out[i] = g if wants[i] else None
    return out


def _softmax(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """``_softmax_backward_data(dy, y)``: one kernel over the output gradient and the saved output."""
    dy = dys[0]
    assert dy is not None
    if not wants[0]:
        return [None]
    attrs = {k: v for k, v in node.attrs.items() if k != "phase"}
    return [cx.like(node.op, [dy, cx.val(node.outputs[0])], dy, {**attrs, "role": "grad", "grads": ("input",)},
                    name="grad")]


def _axes(node: Node, rank: int) -> tuple[int, ...]:
    axes = node.attrs.get("axes")
    if axes is None:
        axis = node.attrs.get("axis")
        return tuple(range(rank)) if axis is None else (int(axis) % max(rank, 1),)
    if isinstance(axes, int):
        axes = (axes,)
    return tuple(sorted(int(a) % max(rank, 1) for a in axes)) or tuple(range(rank))


def _spread(cx: GradContext, v: Value, x: Value, axes: tuple[int, ...], name: str) -> Value:
    """A reduced value broadcast back over ``x``'s shape: a reshape (re-inserting the reduced dims) and
    an expand, both views that move nothing."""
    keep: Shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    if tuple(v.shape) != keep:
        v = cx.emit(Op.RESHAPE, [v], keep, v.dtype, name=f"{name}_view")
    if keep != tuple(x.shape):
        v = cx.emit(Op.EXPAND, [v], x.shape, v.dtype, name=f"{name}_expand")
    return v


def _reduced_size(x: Value, axes: tuple[int, ...]) -> float | None:
    dims = [x.shape[a] for a in axes]
    return float(prod(dims)) if all(isinstance(d, int) for d in dims) else None  # type: ignore[arg-type]


def _reduce(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    x, y, dy = node.inputs[0], node.outputs[0], dys[0]
    assert x is not None and dy is not None
    if not wants[0]:
        return [None] * len(node.inputs)
    xv, op = cx.val(x), node.op
    axes = _axes(node, x.type.rank)
    g = _spread(cx, dy, x, axes, "grad_dy")
    if op is Op.REDUCE_SUM:
        dx = g
    elif op is Op.REDUCE_MEAN:                      # grad.expand(sizes) / N
        n = _reduced_size(x, axes)
        dx = cx.like(Op.DIV, [g], x, {"scalar": n} if n else {"role": "mean_grad"}, name="grad")
    elif op in (Op.REDUCE_MAX, Op.REDUCE_MIN):     # where(x == max, grad, 0)
        mask = cx.emit(Op.EQ, [xv, _spread(cx, cx.val(y), x, axes, "grad_y")], x.shape, DType.BOOL, name="grad_mask")
        dx = cx.like(Op.WHERE, [mask, g], x, name="grad")
    elif op is Op.REDUCE_VAR:                       # 2 / (N - 1) * grad * (x - mean)
        mean = cx.emit(Op.REDUCE_MEAN, [xv], tuple(1 if i in axes else d for i, d in enumerate(x.shape)), x.dtype,
                       {"axes": axes, "keepdims": True}, name="grad_mean")
        t = cx.like(Op.SUB, [xv, mean], x, name="grad_centered")
        dx = cx.like(Op.MUL, [cx.like(Op.MUL, [g, t], x, name="grad_prod")], x, {"scalar": 2.0}, name="grad")
    elif op is Op.REDUCE_NORM:                      # x * (grad / norm), the 2-norm
        t = cx.like(Op.DIV, [g, _spread(cx, cx.val(y), x, axes, "grad_y")], x, name="grad_ratio")
        dx = cx.like(Op.MUL, [xv, t], x, name="grad")
    elif op is Op.REDUCE_LOGSUMEXP:                 # grad * exp(x - result)
        t = cx.like(Op.SUB, [xv, _spread(cx, cx.val(y), x, axes, "grad_y")], x, name="grad_shift")
        dx = cx.like(Op.MUL, [g, cx.like(Op.EXP, [t], x, name="grad_exp")], x, name="grad")
    else:
        return [None] * len(node.inputs)            # no formula: the walker's unmodeled path
    return [dx, *([None] * (len(node.inputs) - 1))]


def _cumsum(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """torch's ``cumsum_backward``: ``grad.flip(d).cumsum(d).flip(d)``, all in the input's shape. A scan
    reduces nothing, so the reductions' spreading of the gradient over reduced dims does not apply
    (it asked to reshape ``[2, 4, 16]`` to ``[2, 4, 1]`` and every cumsum training step failed)."""
    x, dy = node.inputs[0], dys[0]
    assert x is not None and dy is not None
    if not wants[0]:
        return [None] * len(node.inputs)
    attrs = {"axis": node.attrs.get("axis", 0)}
    t = cx.like(Op.FLIP, [dy], x, attrs, name="grad_flip")
    t = cx.like(Op.CUMSUM, [t], x, attrs, name="grad_cumsum")
    return [cx.like(Op.FLIP, [t], x, attrs, name="grad"), *([None] * (len(node.inputs) - 1))]


Rule = Callable[[GradContext, Node, list[Value | None], list[bool]], Grads]
NORM_GRADS: dict[Op, Rule] = {
    **dict.fromkeys(_NORMS, _norm), Op.SOFTMAX: _softmax, Op.LOG_SOFTMAX: _softmax,
    **dict.fromkeys((Op.REDUCE_SUM, Op.REDUCE_MEAN, Op.REDUCE_MAX, Op.REDUCE_MIN, Op.REDUCE_VAR, Op.REDUCE_NORM,
                     Op.REDUCE_LOGSUMEXP), _reduce), Op.CUMSUM: _cumsum,
}
