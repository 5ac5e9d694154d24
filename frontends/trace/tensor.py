"""Lowering recorded tensor ops: copies, concatenation, padding, gathers and scatters, creation,
random fills, pooling, top-k/sort, and the zero-cost views and allocations.

Views and allocations become ``identity``/``fill`` nodes with no work and no traffic, so their
measured time reads as dispatch overhead instead of disappearing.
"""

from __future__ import annotations

from math import ceil
from typing import Any

from ...ir import DType, Graph, Op
from ...ir.windows import pool_spatial
from .call import Builder, Call, GraphBuilder, bool_arg, dtype_code, int_arg, ints, per_dim, registrar

__all__ = ["BUILDERS", "view"]

#: aten name -> builder, for data movement, gathers, creation, pooling and selection.
BUILDERS: dict[str, Builder] = {}
_register = registrar(BUILDERS)


@_register("copy_")
def _copy(c: Call) -> Graph | None:
    dst, src = c.t(0), c.t(1)
    if dst is None or src is None:
        return None
    b = GraphBuilder(c)
    cast = src.dtype is not None and dst.dtype is not None and src.dtype != dst.dtype
    return b.done(b.node(Op.CAST if cast else Op.COPY, [b.input(src)], dst.shape, dst.dtype or c.default_dtype,
                         {"to": dst.dtype.value} if cast and dst.dtype else None))


@_register("clone", "tril", "triu", "flip", "roll")
def _same_shape_copy(c: Call) -> Graph | None:
    x = c.t(0)
    if x is None:
        return None
    op = {"tril": Op.TRIANGULAR, "triu": Op.TRIANGULAR, "flip": Op.FLIP, "roll": Op.ROLL}.get(c.key, Op.COPY)
    b = GraphBuilder(c)
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
        d = int_arg(c.c(1), 0) % (rank + 1)
        out = (*parts[0].shape[:d], len(parts), *parts[0].shape[d:])
    else:
        d = int_arg(c.c(1), 0) % max(rank, 1)
        out = tuple(sum(p.shape[d] for p in parts) if i == d else s for i, s in enumerate(parts[0].shape))
    b = GraphBuilder(c)
    ins = [b.input(p) for p in parts]
    return b.done(b.node(Op.CONCAT, ins, out, ins[0].type.dtype, {"axis": d}))


@_register("constant_pad_nd")
def _pad(c: Call) -> Graph | None:
    x, pads = c.t(0), ints(c.c(1)) or ()
    if x is None or len(pads) % 2 or len(pads) // 2 > len(x.shape):
        return None
    out = list(x.shape)
    for i in range(len(pads) // 2):
        out[-1 - i] += pads[2 * i] + pads[2 * i + 1]
    b = GraphBuilder(c)
    return b.done(b.node(Op.PAD, [b.input(x)], out, x.dtype or c.default_dtype))


@_register("embedding", "index_select", "gather")
def _gather(c: Call) -> Graph | None:
    if c.key == "embedding":
        table, idx = c.t(0), c.t(1)
        out = (*idx.shape, *table.shape[1:]) if table and idx else None
        op = Op.GATHER
    elif c.key == "index_select":
        table, idx = c.t(0), c.t(2)
        d = int_arg(c.c(1), 0)
        out = tuple(idx.shape[0] if i == d % len(table.shape) else s for i, s in enumerate(table.shape)) \
            if table and idx and table.shape and idx.shape else None
        op = Op.GATHER
    else:
        table, idx = c.t(0), c.t(2)
        out, op = (idx.shape if idx else None), Op.GATHER_ELEMENTS
    if table is None or idx is None or out is None:
        return None
    b = GraphBuilder(c)
    return b.done(b.node(op, [b.input(table), b.input(idx)], out, table.dtype or c.default_dtype))


@_register("scatter", "scatter_add", "scatter_reduce", "index_add", "index_copy")
def _scatter(c: Call) -> Graph | None:
    x, idx, src = c.t(0), c.t(2), c.t(3)
    if x is None or idx is None:
        return None
    b = GraphBuilder(c)
    ins = [b.input(x), b.input(idx)] + ([b.input(src)] if src is not None else [])
    reduce = "add" if c.key in ("scatter_add", "index_add", "scatter_reduce") else "none"
    return b.done(b.node(Op.SCATTER_ELEMENTS, ins, x.shape, x.dtype or c.default_dtype, {"reduce": reduce}))


@_register("histc")
def _histc(c: Call) -> Graph | None:
    """A histogram into ``bins`` bins: a scatter-add of ones (as the frontend lowers ``aten.histc``)."""
    x = c.t(0)
    if x is None:
        return None
    b = GraphBuilder(c)
    bins = int_arg(c.c(1), 100)
    return b.done(b.node(Op.SCATTER_ELEMENTS, [b.input(x)], (bins,), x.dtype or c.default_dtype,
                         {"reduce": "add", "role": "histogram"}))


@_register("fill", "zero", "zeros_like", "ones_like", "full_like", "zeros", "ones", "full", "scalar_tensor")
def _fill(c: Call) -> Graph | None:
    x = c.t(0)
    shape = x.shape if x is not None else () if c.key == "scalar_tensor" else ints(c.c(0))
    if shape is None:
        return None
    dtype = x.dtype if x is not None and x.dtype else dtype_code(c.c(2 if c.key == "full" else 1), c.default_dtype)
    b = GraphBuilder(c)
    return b.done(b.node(Op.FILL, [], shape, dtype))


@_register("normal", "uniform", "bernoulli", "random", "exponential", "rand", "randn", "rand_like",
           "randn_like")
def _random(c: Call) -> Graph | None:
    x = c.t(0)
    shape = x.shape if x is not None else ints(c.c(0))
    if shape is None:
        return None
    b = GraphBuilder(c)
    return b.done(b.node(Op.RANDOM, [], shape, (x.dtype if x is not None else None) or c.default_dtype))


@_register("native_dropout")
def _dropout(c: Call) -> Graph | None:
    x = c.t(0)
    if x is None:
        return None
    b = GraphBuilder(c)
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
    window: dict[str, Any] = {}
    if "adaptive" in c.key:
        out_sp = per_dim(c.c(1), n, 1)
        kernel = tuple(ceil(i / max(o, 1)) for i, o in zip(spatial_in, out_sp))
    else:
        kernel = per_dim(c.c(1), n, 1)
        stride = tuple(s or k for s, k in zip(per_dim(c.c(2), n, 0), kernel))   # [] means the kernel size
        window = {"stride": stride, "padding": per_dim(c.c(3), n, 0),
                  "dilation": per_dim(c.c(4), n, 1) if c.key.startswith("max") else (1,) * n,
                  "ceil_mode": bool_arg(c.c(5) if c.key.startswith("max") else c.c(4))}
        if any(len(v) != n or min(v) < 1 for v in (kernel, stride, window["dilation"])) or \
                len(window["padding"]) != n:
            return None
        # torch's size: with ceil_mode, a last window that would start in the end padding is dropped
        out_sp = tuple(s for sizes in pool_spatial({"kernel": kernel, **window}, spatial_in)
                       for s in sizes[-1:] if isinstance(s, int))
    if len(out_sp) != n or any(o <= 0 for o in out_sp):
        return None
    b = GraphBuilder(c)
    kind = "max" if "max" in c.key else "avg"
    shape, dtype = (*x.shape[:2], *out_sp), x.dtype or c.default_dtype
    attrs = {"kind": kind, "kernel": tuple(kernel), **window}
    if c.key.endswith("_with_indices"):   # the int64 argmax positions are written too, as the torch frontend has them
        return b.done(*b.outputs(Op.POOL, [b.input(x)], [(shape, dtype), (shape, DType.INT64)], attrs))
    return b.done(b.node(Op.POOL, [b.input(x)], shape, dtype, attrs))


@_register("topk", "sort")
def _select(c: Call) -> Graph | None:
    """Values and their int64 indices, as the torch frontend emits them: both are written (an fp32
    sort of n elements reads 4n bytes and writes 4n of values and 8n of indices)."""
    x = c.t(0)
    if x is None or not x.shape:
        return None
    b = GraphBuilder(c)
    dtype = x.dtype or c.default_dtype
    if c.key == "topk":
        k, axis = int_arg(c.c(1), 1), int_arg(c.c(2), -1) % len(x.shape)
        out = tuple(k if i == axis else d for i, d in enumerate(x.shape))
        op, attrs = Op.TOPK, {"k": k, "axis": axis}
    else:
        stable = len(c.inputs) == 4 and c.t(3) is None      # sort.stable(self, *, stable, dim, descending)
        out, op, attrs = x.shape, Op.SORT, {"axis": int_arg(c.c(2 if stable else 1), -1) % len(x.shape)}
    return b.done(*b.outputs(op, [b.input(x)], [(out, dtype), (out, DType.INT64)], attrs))


def view(c: Call) -> Graph:
    """Views and allocations: an identity on the first tensor (or an uninitialized fill): cost zero."""
    b = GraphBuilder(c)
    x = c.tensors()[0] if c.tensors() else None
    if x is None:
        return b.done(b.node(Op.FILL, [], (), DType.FP32, {"uninitialized": True}))
    return b.done(b.node(Op.IDENTITY, [b.input(x)], x.shape, x.dtype or c.default_dtype))
