"""Lowerings of aten tensor ops: views, data movement, gather/scatter, reductions, creation, casts."""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any

import torch.fx as fx

from ...ir import IN_PLACE, STRIDED_VIEW, Op, TensorType
from .aten_args import arg, ints, norm_axes, norm_axis, rank_of, scalar, tensor_meta
from .inplace import writes_into_view
from .lowering import AtenLowerer, op_key

__all__ = ["TENSOR_LOWERINGS"]


def _first(op: Op, **fixed: object):
    """One canonical op over the first tensor argument."""
    def fn(cx: AtenLowerer, n: fx.Node) -> None:
        cx.emit(op, [cx.value(n.args[0])], n, dict(fixed) or None)
    return fn


def _fft(default: int | tuple[int, ...] | None, dim_arg: int = 2):
    """``torch.fft`` transforms (``fft``, ``fft2``, ``fftn`` and their inverse/real variants; the
    ``_fft_*`` primitives take ``dim`` second): one FFT op over the transformed ``axes``, whose cost
    rule applies the per-axis convention. ``dim=None`` with sizes ``s`` transforms the last ``len(s)``
    axes, without them all axes (torch's convention)."""
    def fn(cx: AtenLowerer, n: fx.Node) -> None:
        rank = max(rank_of(n.args[0]), 1)
        dims = arg(n, dim_arg, "dim", default)
        sizes = arg(n, 1, "s", None) if dim_arg == 2 else None
        if dims is None and isinstance(sizes, (list, tuple)) and sizes:
            dims = tuple(range(rank - len(sizes), rank))
        cx.emit(Op.FFT, [cx.value(n.args[0])], n, {"axes": list(norm_axes(dims, rank))})
    return fn


def _all_tensors(op: Op):
    def fn(cx: AtenLowerer, n: fx.Node) -> None:
        cx.emit(op, cx.values(list(n.args) + list(n.kwargs.values())), n)
    return fn


def _alias(cx: AtenLowerer, n: fx.Node) -> None:
    cx.alias(n, cx.value(n.args[0]))


def _to(cx: AtenLowerer, n: fx.Node) -> None:
    """A dtype change is a cast; a device/layout-only ``to`` returns the same tensor."""
    x = cx.value(n.args[0])
    out = cx.out_types(n)
    if x is not None and out and out[0] == x.type:
        copy = n.kwargs.get("copy") or str(n.target).startswith("aten._to_copy")
        if not copy:
            cx.alias(n, x)
            return
        cx.emit(Op.COPY, [x], n)
        return
    cx.emit(Op.CAST, [x], n, {"to": out[0].dtype.value} if out else None)


def _copy(cx: AtenLowerer, n: fx.Node) -> None:
    """``copy_(dst, src)`` and its functional ``copy``: ``src``'s data in ``dst``'s shape and dtype
    (``dst`` only gives the place). Written into a view (``x[:, t] = y``), the write-back's scatter
    moves the data, so the value is ``src`` itself (cast, broadcast) and no copy is counted twice."""
    x = cx.value(arg(n, 1, "src"))
    out = cx.out_types(n)
    if x is None or not out:
        cx.emit(Op.COPY, [cx.value(n.args[0])], n)
        return
    if x.dtype is not out[0].dtype:
        x = cx.emit(Op.CAST, [x], n, {"to": out[0].dtype.value}, types=[TensorType(out[0].dtype, x.shape)],
                    bind=False, name=f"{n.name}_cast").outputs[0]
    if tuple(x.shape) != tuple(out[0].shape):
        x = cx.emit(Op.EXPAND, [x], n, types=[out[0]], bind=False, name=f"{n.name}_expand").outputs[0]
    if writes_into_view(n):
        cx.alias(n, x)
        return
    cx.emit(Op.COPY, [x], n)


def _contiguous(cx: AtenLowerer, n: fx.Node) -> None:
    """Copies only when the input's strides (recorded by export) are not already contiguous."""
    t = tensor_meta(n.args[0])
    if t is not None:
        try:
            contiguous = bool(t.is_contiguous())
        except Exception:  # symbolic strides that cannot be decided: assume a copy
            contiguous = False
        if contiguous:
            cx.alias(n, cx.value(n.args[0]))
            return
    cx.emit(Op.COPY, [cx.value(n.args[0])], n)


def _permute(cx: AtenLowerer, n: fx.Node) -> None:
    r = rank_of(n.args[0])
    target = str(n.target)
    if "permute" in target:
        perm = tuple(norm_axis(d, r) for d in arg(n, 1, "dims"))
    elif ".int" in target or "transpose" in target or "swap" in target:
        d0, d1 = (norm_axis(d, r) for d in n.args[1:3]) if len(n.args) >= 3 else (0, 1)
        perm_l = list(range(r))
        perm_l[d0], perm_l[d1] = perm_l[d1], perm_l[d0]
        perm = tuple(perm_l)
    else:  # t / numpy_T
        perm = tuple(reversed(range(r)))
    # torch's transpose and permute return views (strides swapped); the *_copy forms copy
    view = {} if "_copy" in target else {STRIDED_VIEW: True}
    cx.emit(Op.PERMUTE, [cx.value(n.args[0])], n, {"perm": perm, **view})


def _concat(cx: AtenLowerer, n: fx.Node) -> None:
    tensors = cx.values(arg(n, 0, "tensors"))
    rank = rank_of(n)
    cx.emit(Op.CONCAT, tensors, n, {"axis": norm_axis(arg(n, 1, "dim", 0), max(rank, 1))})


def _split(cx: AtenLowerer, n: fx.Node) -> None:
    """torch's split/chunk/unbind return views: one free slice per piece."""
    x = cx.value(n.args[0])
    outs = []
    for i, t in enumerate(cx.out_types(n)):
        outs.append(cx.emit(Op.SLICE, [x], n, {"piece": i}, types=[t], bind=False,
                            name=f"{n.name}_{i}").outputs[0])
    cx.bind(n, outs)


def _reduce(op: Op, axes_arg: int | None = 1, keep_arg: int | None = 2):
    def fn(cx: AtenLowerer, n: fx.Node) -> None:
        r = rank_of(n.args[0])
        axes = norm_axes(arg(n, axes_arg, "dim") if axes_arg is not None else None, r)
        keep = bool(arg(n, keep_arg, "keepdim", False)) if keep_arg is not None else False
        cx.emit(op, [cx.value(n.args[0])], n, {"axes": axes, "keepdims": keep})
    return fn


def _max_min(reduce_op: Op, binary_op: Op):
    """max(x) and max(x, dim) reduce; max(x, other) is elementwise."""
    def fn(cx: AtenLowerer, n: fx.Node) -> None:
        if len(n.args) > 1 and cx.value(n.args[1]) is not None:
            cx.emit(binary_op, cx.values(n.args[:2]), n)
            return
        _reduce(reduce_op)(cx, n)
    return fn


def _scan(op: Op):
    def fn(cx: AtenLowerer, n: fx.Node) -> None:
        cx.emit(op, [cx.value(n.args[0])], n, {"axis": norm_axis(n.args[1], max(rank_of(n.args[0]), 1))})
    return fn


def _embedding(cx: AtenLowerer, n: fx.Node) -> None:
    cx.emit(Op.GATHER, [cx.value(n.args[0]), cx.value(n.args[1])], n, {"axis": 0})


def _index_select(cx: AtenLowerer, n: fx.Node) -> None:
    r = rank_of(n.args[0])
    cx.emit(Op.GATHER, [cx.value(n.args[0]), cx.value(n.args[2])], n, {"axis": norm_axis(n.args[1], max(r, 1))})


def _gather(cx: AtenLowerer, n: fx.Node) -> None:
    r = rank_of(n.args[0])
    cx.emit(Op.GATHER_ELEMENTS, [cx.value(n.args[0]), cx.value(n.args[2])], n,
            {"axis": norm_axis(n.args[1], max(r, 1))})


def _index(cx: AtenLowerer, n: fx.Node) -> None:
    """Advanced indexing x[i0, i1, ...]: a gather by every index tensor given."""
    index_args = arg(n, 1, "indices")
    indices = [cx.value(i) for i in index_args]
    cx.emit(Op.GATHER_ND, [cx.value(n.args[0]), *[i for i in indices if i is not None]], n,
            {"indexed_dims": tuple(k for k, i in enumerate(index_args) if i is not None)})


def _index_put(cx: AtenLowerer, n: fx.Node) -> None:
    indices = [cx.value(i) for i in arg(n, 1, "indices") if i is not None]
    accumulate = bool(arg(n, 3, "accumulate", False))
    cx.emit(Op.INDEX_PUT, [cx.value(n.args[0]), *[i for i in indices if i is not None], cx.value(n.args[2])], n,
            {"reduce": "add" if accumulate else "none"})


def _scatter(reduce: str) -> Callable[[AtenLowerer, fx.Node], None]:
    def fn(cx: AtenLowerer, n: fx.Node) -> None:
        ins = cx.values(n.args)
        red = reduce or (str(arg(n, 4, "reduce", "none")) if "reduce" in str(n.target) else "none")
        attrs: dict[str, Any] = {"reduce": red}
        packet = op_key(n.target)[1]
        if packet.endswith("_") and not packet.endswith("__"):
            attrs[IN_PLACE] = 0      # index_copy_ (a static KV cache's update) writes into its operand
        cx.emit(Op.SCATTER_ELEMENTS, ins, n, attrs)
    return fn


def _creation(op: Op, uninitialized: bool = False) -> Callable[[AtenLowerer, fx.Node], None]:
    """Tensors made from nothing (or only from another's shape): their inputs are not read."""
    def fn(cx: AtenLowerer, n: fx.Node) -> None:
        attrs: dict[str, Any] = {"uninitialized": True} if uninitialized else {}
        if op is Op.FILL and n.args and not isinstance(n.args[-1], fx.Node):
            attrs["value"] = scalar(n.args[-1]) if not isinstance(n.args[-1], (list, tuple)) else 0
        cx.emit(op, [], n, attrs or None)
    return fn


def _where(cx: AtenLowerer, n: fx.Node) -> None:
    if len(n.args) == 1:
        cx.emit(Op.NONZERO, [cx.value(n.args[0])], n)
        return
    cx.emit(Op.WHERE, cx.values(n.args[:3]), n, cx.mask_attrs(n) or None)


def _sort(cx: AtenLowerer, n: fx.Node) -> None:
    r = max(rank_of(n.args[0]), 1)
    dim = arg(n, 1, "dim", -1)
    dim = dim if isinstance(dim, int) else -1
    cx.emit(Op.SORT, [cx.value(n.args[0])], n, {"axis": norm_axis(dim, r)})


def _topk(cx: AtenLowerer, n: fx.Node) -> None:
    r = max(rank_of(n.args[0]), 1)
    k = n.args[1]
    cx.emit(Op.TOPK, [cx.value(n.args[0])], n,
            {"k": k if isinstance(k, int) else scalar(k), "axis": norm_axis(arg(n, 2, "dim", -1), r)})


def _meshgrid(cx: AtenLowerer, n: fx.Node) -> None:
    """torch's meshgrid returns views: input ``i`` reshaped to its own dim (``ij``; ``xy`` swaps the
    first two) and expanded over the grid, one free reshape and expand per output."""
    ins = [cx.value(t) for t in arg(n, 0, "tensors")]
    xy = str(arg(n, 1, "indexing", "ij")) == "xy"
    outs = []
    for i, (x, t) in enumerate(zip(ins, cx.out_types(n))):
        d = {0: 1, 1: 0}.get(i, i) if xy and t.rank >= 2 else i
        line = TensorType(t.dtype, tuple(dim if k == d else 1 for k, dim in enumerate(t.shape)))
        v = cx.emit(Op.RESHAPE, [x], n, types=[line], bind=False, name=f"{n.name}_{i}_line").outputs[0]
        outs.append(cx.emit(Op.EXPAND, [v], n, types=[t], bind=False, name=f"{n.name}_{i}").outputs[0])
    cx.bind(n, outs)


def _im2col(cx: AtenLowerer, n: fx.Node) -> None:
    """``F.unfold``: every kernel window's pixels copied into a column, ``[(N,) C, H, W] -> [(N,) C*k, L]``.
    No arithmetic; it reads the image and writes the columns, a ``TILE`` (each pixel repeated into
    the windows that hold it) to ``[(N,) C, k, L]`` and a free view to the op's shape. Its gradient is
    then the tile's, a sum of the columns back onto the image (torch's ``col2im``)."""
    x = cx.value(n.args[0])
    assert x is not None
    out_t = cx.out_types(n)[0]
    channels = x.type.shape[-3]
    k = prod(int(d) for d in ints(arg(n, 1, "kernel_size"), 2))
    split = out_t.with_shape((*out_t.shape[:-2], channels, k, out_t.shape[-1]))
    cols = cx.emit(Op.TILE, [x], n, {"role": "im2col"}, types=[split], bind=False, name=f"{n.name}_columns")
    cx.emit(Op.RESHAPE, cols.outputs, n)


def _diff(cx: AtenLowerer, n: fx.Node) -> None:
    cx.emit(Op.SUB, cx.values(n.args), n, {"role": "diff"})


TENSOR_LOWERINGS = {
    # views (free)
    **{name: _first(Op.RESHAPE) for name in (
        "view", "reshape", "_unsafe_view", "_reshape_alias", "squeeze", "unsqueeze", "flatten",
        "unflatten", "view_as", "reshape_as", "view_as_real", "view_as_complex", "real", "imag",
        "view_copy", "squeeze_copy", "unsqueeze_copy", "_reshape_copy")},
    **{name: _first(Op.SLICE) for name in (
        "slice", "select", "narrow", "diagonal", "as_strided", "unfold", "slice_copy", "select_copy",
        "narrow_copy", "diagonal_copy", "as_strided_copy")},
    **{name: _first(Op.EXPAND) for name in ("expand", "expand_as", "broadcast_to", "expand_copy")},
    **{name: _alias for name in ("alias", "detach", "lift_fresh_copy", "lift_fresh", "positive",
                                   "resolve_conj", "resolve_neg", "alias_copy", "detach_copy",
                                   "_conj", "conj")},
    "to": _to, "_to_copy": _to, "type_as": _to, "_to_dtype": _to,
    "contiguous": _contiguous, "clone": _first(Op.COPY), "copy": _copy,
    "permute": _permute, "transpose": _permute, "t": _permute, "numpy_T": _permute, "swapaxes": _permute,
    "swapdims": _permute, "movedim": _permute, "permute_copy": _permute, "transpose_copy": _permute,
    "cat": _concat, "concat": _concat, "concatenate": _concat, "stack": _concat, "hstack": _concat,
    "vstack": _concat,
    "split": _split, "split_with_sizes": _split, "chunk": _split, "unbind": _split, "tensor_split": _split,
    "unsafe_split": _split, "unsafe_chunk": _split, "split_with_sizes_copy": _split, "unbind_copy": _split,
    "repeat": _first(Op.TILE), "tile": _first(Op.TILE), "repeat_interleave": _first(Op.TILE),
    "flip": _first(Op.FLIP), "roll": _first(Op.ROLL), "tril": _first(Op.TRIANGULAR),
    "triu": _first(Op.TRIANGULAR), "constant_pad_nd": _first(Op.PAD), "pad": _first(Op.PAD),
    "reflection_pad1d": _first(Op.PAD), "reflection_pad2d": _first(Op.PAD), "reflection_pad3d": _first(Op.PAD),
    "replication_pad1d": _first(Op.PAD), "replication_pad2d": _first(Op.PAD), "replication_pad3d": _first(Op.PAD),
    "pixel_shuffle": _first(Op.DEPTH_TO_SPACE), "pixel_unshuffle": _first(Op.SPACE_TO_DEPTH),
    # gather / scatter
    "embedding": _embedding, "index_select": _index_select, "gather": _gather, "index": _index,
    "take": _all_tensors(Op.GATHER), "masked_select": _all_tensors(Op.GATHER_ND),
    "index_put": _index_put, "_unsafe_index_put": _index_put, "_unsafe_index": _index,
    "scatter": _scatter("none"), "scatter_add": _scatter("add"), "scatter_reduce": _scatter(""),
    "index_add": _scatter("add"), "index_copy": _scatter("none"), "index_fill": _scatter("none"),
    "masked_scatter": _scatter("none"), "slice_scatter": _all_tensors(Op.SCATTER),
    "select_scatter": _all_tensors(Op.SCATTER), "diagonal_scatter": _all_tensors(Op.SCATTER),
    "embedding_bag": _all_tensors(Op.EMBEDDING_BAG), "_embedding_bag": _all_tensors(Op.EMBEDDING_BAG),
    # reductions and scans
    "sum": _reduce(Op.REDUCE_SUM), "nansum": _reduce(Op.REDUCE_SUM), "mean": _reduce(Op.REDUCE_MEAN),
    "nanmean": _reduce(Op.REDUCE_MEAN), "amax": _reduce(Op.REDUCE_MAX), "amin": _reduce(Op.REDUCE_MIN),
    "max": _max_min(Op.REDUCE_MAX, Op.MAXIMUM), "min": _max_min(Op.REDUCE_MIN, Op.MINIMUM),
    "prod": _reduce(Op.REDUCE_PROD), "var": _reduce(Op.REDUCE_VAR), "std": _reduce(Op.REDUCE_VAR),
    "var_mean": _reduce(Op.REDUCE_VAR), "std_mean": _reduce(Op.REDUCE_VAR),
    "norm": _reduce(Op.REDUCE_NORM, 2, 3), "linalg_vector_norm": _reduce(Op.REDUCE_NORM, 2, 3),
    "frobenius_norm": _reduce(Op.REDUCE_NORM), "logsumexp": _reduce(Op.REDUCE_LOGSUMEXP),
    "argmax": _reduce(Op.ARGMAX), "argmin": _reduce(Op.ARGMIN), "any": _reduce(Op.REDUCE_MAX),
    "all": _reduce(Op.REDUCE_MIN), "count_nonzero": _reduce(Op.REDUCE_SUM),
    "_is_all_true": _reduce(Op.REDUCE_MIN, None, None), "_is_any_true": _reduce(Op.REDUCE_MAX, None, None),
    "aminmax": _reduce(Op.REDUCE_MAX), "cumsum": _scan(Op.CUMSUM), "cumprod": _scan(Op.CUMPROD),
    "cummax": _scan(Op.CUMSUM), "cummin": _scan(Op.CUMSUM), "logcumsumexp": _scan(Op.CUMSUM),
    # creation
    "arange": _creation(Op.IOTA), "linspace": _creation(Op.IOTA), "logspace": _creation(Op.IOTA),
    **{name: _creation(Op.FILL) for name in (
        "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "new_ones", "new_zeros",
        "new_full", "scalar_tensor", "fill", "eye")},
    **{name: _creation(Op.FILL, uninitialized=True) for name in (
        "empty", "empty_like", "new_empty", "empty_strided", "empty_permuted", "new_empty_strided")},
    **{name: _creation(Op.RANDOM) for name in (
        "rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "bernoulli", "normal",
        "uniform", "multinomial", "randperm", "exponential", "native_dropout_mask", "poisson")},
    "where": _where, "nonzero": _first(Op.NONZERO), "argwhere": _first(Op.NONZERO),
    "nonzero_static": _first(Op.NONZERO), "sort": _sort, "argsort": _sort, "msort": _sort,
    "topk": _topk, "unique": _first(Op.UNIQUE), "_unique": _first(Op.UNIQUE),
    "_unique2": _first(Op.UNIQUE), "unique_consecutive": _first(Op.UNIQUE), "unique_dim": _first(Op.UNIQUE),
    "diff": _diff, "meshgrid": _meshgrid, "im2col": _im2col,
    **{f"fft_{k}fft": _fft(-1) for k in ("", "i", "r", "ir", "h", "ih")},
    **{f"fft_{k}fft2": _fft((-2, -1)) for k in ("", "i", "r", "ir", "h", "ih")},
    **{f"fft_{k}fftn": _fft(None) for k in ("", "i", "r", "ir", "h", "ih")},
    "_fft_r2c": _fft(None, 1), "_fft_c2r": _fft(None, 1), "_fft_c2c": _fft(None, 1),
}
