"""Folding of small shape-computation tensors, with symbolic elements.

Exporters build the targets of ``Reshape``, ``Expand``, ``Slice``, ``Range`` and ``ConstantOfShape``
at run time from ``Shape`` of an input. To keep those targets exact and symbolic (``[batch,
sequence, 12, 64]`` rather than ``[?, ?, 12, 64]``) the frontend evaluates these small integer
tensors as it walks the graph: numpy arrays whose elements are ints or :class:`Poly` dims. This is
shape arithmetic only; it never touches weights (tensors above :data:`FOLD_LIMIT` elements are never
folded) and it never decides a comparison that depends on the binding of a dim.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any

import numpy as np

from .fold_math import MATH_FOLDERS
from .fold_values import FoldContext, Unfoldable, as_dims, as_ints, need, opt_ints, pack, scalar, shape_array, to_elem
from .symdims import Poly, dim_mul
from .types import FOLD_LIMIT

__all__ = ["FOLDERS", "FROM_TYPE", "Unfoldable", "fold", "as_dims", "as_ints", "shape_array"]


def _shape(cx: FoldContext) -> list[np.ndarray]:
    s = cx.shape(0)
    if s is None:
        raise Unfoldable("rank unknown")
    r = len(s)
    start, end = int(cx.attr("start", 0)), cx.attr("end")
    start = max(0, min(r, start + r if start < 0 else start))
    end = r if end is None else max(0, min(r, int(end) + r if int(end) < 0 else int(end)))
    return [shape_array(list(s[start:end]))]


def _size(cx: FoldContext) -> list[np.ndarray]:
    s = cx.shape(0)
    if s is None:
        raise Unfoldable("rank unknown")
    n: Any = 1
    for d in s:
        n = dim_mul(n, to_elem(d))
    return [pack(np.array(n, dtype=object))]


def _gather(cx: FoldContext) -> list[np.ndarray]:
    data, idx = need(cx, 0), need(cx, 1)
    axis = int(cx.attr("axis", 0))
    idx = idx.astype(np.int64)
    n = data.shape[axis] if data.ndim else 0
    idx = np.where(idx < 0, idx + n, idx)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise Unfoldable("index out of range")
    return [np.take(data, idx, axis=axis)]


def _slice(cx: FoldContext) -> list[np.ndarray]:
    data = need(cx, 0)
    if cx.opset < 10:
        starts, ends, axes, steps = cx.attr("starts"), cx.attr("ends"), cx.attr("axes"), None
    else:
        starts, ends = opt_ints(cx, 1), opt_ints(cx, 2)
        axes = opt_ints(cx, 3) if cx.n_inputs() > 3 else None
        steps = opt_ints(cx, 4) if cx.n_inputs() > 4 else None
    if starts is None or ends is None:
        raise Unfoldable("slice bounds unknown")
    axes = list(axes) if axes is not None else list(range(len(starts)))
    steps = list(steps) if steps is not None else [1] * len(starts)
    index: list[slice] = [slice(None)] * data.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        if st == 0:
            raise Unfoldable("zero step")
        index[a % data.ndim] = slice(int(s), int(e), int(st))
    return [data[tuple(index)]]


def _concat(cx: FoldContext) -> list[np.ndarray]:
    arrs = [need(cx, i) for i in range(cx.n_inputs())]
    axis = int(cx.attr("axis", 0))
    if any(a.dtype == object for a in arrs):
        arrs = [a.astype(object) for a in arrs]
    return [np.concatenate(arrs, axis=axis)]


def _unsqueeze(cx: FoldContext) -> list[np.ndarray]:
    data = need(cx, 0)
    axes = opt_ints(cx, 1, "axes") if cx.opset >= 13 else cx.attr("axes")
    if axes is None:
        raise Unfoldable("axes unknown")
    r = data.ndim + len(axes)
    shape = list(data.shape)
    for a in sorted(x % r for x in axes):
        shape.insert(a, 1)
    return [data.reshape(shape)]


def _squeeze(cx: FoldContext) -> list[np.ndarray]:
    data = need(cx, 0)
    axes = opt_ints(cx, 1, "axes") if cx.opset >= 13 else cx.attr("axes")
    if axes is None:
        return [data.reshape([d for d in data.shape if d != 1])]
    drop = {a % max(data.ndim, 1) for a in axes}
    return [data.reshape([d for i, d in enumerate(data.shape) if i not in drop])]


def _reshape(cx: FoldContext) -> list[np.ndarray]:
    data = need(cx, 0)
    shape = as_ints(cx.known(1)) if cx.opset >= 5 else cx.attr("shape")
    if shape is None:
        raise Unfoldable("shape unknown")
    shape = [data.shape[i] if d == 0 and not cx.attr("allowzero", 0) else d for i, d in enumerate(shape)]
    return [data.reshape(shape)]


def _flatten(cx: FoldContext) -> list[np.ndarray]:
    data = need(cx, 0)
    axis = int(cx.attr("axis", 1)) % (data.ndim + 1) if data.ndim else 0
    return [data.reshape(prod(data.shape[:axis]), prod(data.shape[axis:]))]


def _transpose(cx: FoldContext) -> list[np.ndarray]:
    data = need(cx, 0)
    perm = cx.attr("perm")
    return [np.transpose(data, perm)]


def _expand(cx: FoldContext) -> list[np.ndarray]:
    data, shape = need(cx, 0), as_ints(cx.known(1))
    if shape is None:
        raise Unfoldable("shape unknown")
    target = np.broadcast_shapes(data.shape, tuple(shape))
    if prod(target) > FOLD_LIMIT:
        raise Unfoldable("too large")
    return [np.broadcast_to(data, target).copy()]


def _tile(cx: FoldContext) -> list[np.ndarray]:
    data, reps = need(cx, 0), as_ints(cx.known(1))
    if reps is None or prod(data.shape) * prod(reps) > FOLD_LIMIT:
        raise Unfoldable("repeats unknown or too large")
    return [np.tile(data, reps)]


def _constant_of_shape(cx: FoldContext) -> list[np.ndarray]:
    shape = as_ints(cx.known(0))
    if shape is None or prod(shape) > FOLD_LIMIT or any(d < 0 for d in shape):
        raise Unfoldable("shape unknown or too large")
    value = cx.attr_array("value")
    fill = value.reshape(-1)[0] if value is not None and value.size else np.float32(0)
    return [np.full(shape, fill, dtype=np.asarray(fill).dtype)]


def _range(cx: FoldContext) -> list[np.ndarray]:
    start, limit, delta = (scalar(np.asarray(need(cx, i)).reshape(-1)[0]) for i in range(3))
    if any(isinstance(x, Poly) for x in (start, limit, delta)):
        raise Unfoldable("symbolic range")
    if delta == 0:
        raise Unfoldable("zero delta")
    n = max(int(np.ceil((limit - start) / delta)), 0)
    if n > FOLD_LIMIT:
        raise Unfoldable("too large")
    return [np.arange(start, limit, delta, dtype=np.asarray(need(cx, 0)).dtype)[:n]]


FOLDERS: dict[str, Callable[[FoldContext], list[np.ndarray]]] = {
    "Shape": _shape, "Size": _size, "Gather": _gather, "Slice": _slice, "Concat": _concat,
    "Unsqueeze": _unsqueeze, "Squeeze": _squeeze, "Reshape": _reshape, "Flatten": _flatten,
    "Transpose": _transpose, "Expand": _expand, "Tile": _tile, "ConstantOfShape": _constant_of_shape,
    "Range": _range, **MATH_FOLDERS,
}
FROM_TYPE = frozenset({"Shape", "Size"})


def fold(cx: FoldContext) -> list[np.ndarray] | None:
    """The node's outputs as small arrays, or None when any of them cannot be known."""
    fn = FOLDERS.get(cx.op_type)
    if fn is None:
        return None
    try:
        with np.errstate(all="ignore"):
            out = fn(cx)
    except (Unfoldable, ValueError, TypeError, IndexError, OverflowError, ZeroDivisionError,
            AttributeError, KeyError, RecursionError, MemoryError):
        return None
    if any(np.asarray(a).size > FOLD_LIMIT for a in out):
        return None
    return [np.asarray(a) for a in out]
