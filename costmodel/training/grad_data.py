"""Gradients of data movement, gathers, pooling and collectives.

Views stay views (a reshape's gradient is a reshape, a concat's are slices of the gradient), the
copies torch makes stay copies (a slice's gradient is written into a zero tensor of the input's
shape: ``slice_backward``, spelled ``PAD``), and an embedding lookup's gradient is a scatter-add of
the gathered rows' gradients into a zeroed table (``embedding_dense_backward``): it reads the indices
and the row gradients and writes the whole table. Collectives follow their transposes: an
all-gather's gradient is a reduce-scatter and back; an all-reduce that sums partial results of
tensor parallelism passes the gradient through (Megatron's ``g`` operator; its conjugate ``f``, an
identity forward, is where the backward all-reduce sits, and the planner inserts it).
"""

from __future__ import annotations

from collections.abc import Callable

from ...ir import Node, Op, Value
from .context import GradContext, Grads

__all__ = ["DATA_GRADS"]


def _attrs(node: Node, **extra: object) -> dict[str, object]:
    return {**{k: v for k, v in node.attrs.items() if k != "phase"}, **extra}


def _reshape(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """The inverse view. A view that reinterprets the dtype (``view_as_complex``: two fp32 become one
    complex64, ``view_as_real`` back) has the opposite reinterpretation as its backward (torch's
    derivatives.yaml: ``view_as_real(grad)`` and ``view_as_complex(grad)``), so the gradient takes
    the input's dtype there; a plain view keeps the gradient's own dtype."""
    x, dy = node.inputs[0], dys[0]
    assert x is not None and dy is not None
    if not wants[0]:
        return [None] * len(node.inputs)
    y = node.outputs[0]
    dtype = x.dtype if y is not None and y.dtype is not x.dtype else dy.dtype
    return [cx.emit(Op.RESHAPE, [dy], x.shape, dtype, name="grad"), *([None] * (len(node.inputs) - 1))]


def _passthrough(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """expand, identity: the gradient itself (the walker sums an expand's broadcast dims back)."""
    return [dys[0] if i == 0 and w else None for i, w in enumerate(wants)]


def _slice(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """``slice_backward``: zeros of the input's shape with the gradient written in. The pieces of one
    split (``piece`` attr) are joined into one concat when their gradients are summed (the walker's
    :func:`join_pieces`), as torch's ``split_backward`` does."""
    x, dy = node.inputs[0], dys[0]
    assert x is not None and dy is not None
    if not wants[0]:
        return [None] * len(node.inputs)
    attrs = {"role": "slice_grad", **({"piece": node.attrs["piece"]} if "piece" in node.attrs else {})}
    return [cx.emit(Op.PAD, [dy], x.shape, dy.dtype, attrs, name="grad"),
            *([None] * (len(node.inputs) - 1))]


def _permute(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    x, dy = node.inputs[0], dys[0]
    assert x is not None and dy is not None
    if not wants[0]:
        return [None]
    perm = tuple(node.attrs.get("perm", ()))
    inverse = tuple(perm.index(i) for i in range(len(perm))) if perm else ()
    return [cx.emit(Op.PERMUTE, [dy], x.shape, dy.dtype, {"perm": inverse}, name="grad")]


def _concat(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """Each input's gradient is its slice of the output gradient (a view)."""
    dy = dys[0]
    assert dy is not None
    out: Grads = []
    for i, v in enumerate(node.inputs):
        if v is None or not wants[i]:
            out.append(None)
            continue
        out.append(cx.emit(Op.SLICE, [dy], v.shape, dy.dtype, {"axis": node.attrs.get("axis", 0)}, name=f"grad{i}"))
    return out


def _split(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """The pieces' gradients concatenated (zeros for a piece no one differentiated)."""
    x = node.inputs[0]
    assert x is not None
    if not wants[0]:
        return [None] * len(node.inputs)
    parts = [g if g is not None else cx.emit(Op.FILL, [], o.shape, o.dtype, {"value": 0}, name=f"grad_zero{i}")
             for i, (g, o) in enumerate(zip(dys, node.outputs))]
    return [cx.emit(Op.CONCAT, parts, x.shape, x.dtype, {"axis": node.attrs.get("axis", 0)}, name="grad"),
            *([None] * (len(node.inputs) - 1))]


def _same_op(op: Op | None = None) -> Callable[[GradContext, Node, list[Value | None], list[bool]], Grads]:
    """An op whose gradient is the same movement run on the gradient (flip, roll, triu) or its
    inverse (depth-to-space and back, pad and slice)."""
    def rule(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
        x, dy = node.inputs[0], dys[0]
        assert x is not None and dy is not None
        if not wants[0]:
            return [None] * len(node.inputs)
        g = cx.emit(op or node.op, [dy], x.shape, dy.dtype, _attrs(node), name="grad")
        return [g, *([None] * (len(node.inputs) - 1))]
    return rule


def _gather(scatter: Op) -> Callable[[GradContext, Node, list[Value | None], list[bool]], Grads]:
    """The gathered rows' gradients scatter-added into a zeroed table (indices get none)."""
    def rule(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
        table, dy = node.inputs[0], dys[0]
        assert table is not None and dy is not None
        if not wants[0]:
            return [None] * len(node.inputs)
        idx = [cx.val(v) for v in node.inputs[1:] if v is not None]
        g = cx.emit(scatter, [*idx, dy], table.shape, dy.dtype, _attrs(node, reduce="add", into="zeros"),
                    name="grad")
        return [g, *([None] * (len(node.inputs) - 1))]
    return rule


def _scatter(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """A slice/select scatter (``out[:, t] = y``, or torch's functional ``slice_scatter``): the base
    gets the gradient with the written region zeroed, the update gets that region (torch's formulas:
    ``grad.slice_scatter(zeros_like(src))`` and ``grad.slice(...)``). Index-driven forms (more
    operands, or a gradient's ``into`` zeros) are left to the unmodeled path."""
    dy = dys[0]
    if dy is None or len(node.inputs) != 2 or "into" in node.attrs:
        return [None] * len(node.inputs)
    base, src = node.inputs
    assert base is not None and src is not None
    out: Grads = [None, None]
    if wants[0]:
        zeros = cx.emit(Op.FILL, [], src.shape, dy.dtype, {"value": 0}, name="grad_zero")
        out[0] = cx.like(Op.SCATTER, [dy, zeros], dy, {"reduce": "none"}, name="grad")
    if wants[1]:
        out[1] = cx.emit(Op.SLICE, [dy], src.shape, dy.dtype, name="grad_update")
    return out


def _scatter_indexed(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """scatter / index_put / masked_scatter (inputs: data, the indices or mask, the updates last):
    the data gets the gradient with the written places zeroed (torch's ``grad.scatter(index, 0)``,
    ``index_put(..., 0)``, ``masked_fill(mask, 0)``), or the gradient itself for an accumulating
    write; the updates get the gradient gathered at those places (``gather``, ``grad[indices]``,
    ``masked_select``). Other reductions (multiply, max) are left to the unmodeled path."""
    dy, data = dys[0], node.inputs[0]
    reduce = node.attrs.get("reduce", "none")
    if dy is None or data is None or "into" in node.attrs or reduce not in ("none", "add"):
        return [None] * len(node.inputs)
    idx = [cx.val(v) for v in node.inputs[1:-1] if v is not None]
    updates = node.inputs[-1] if len(node.inputs) > 2 else None
    out: Grads = [None] * len(node.inputs)
    if wants[0]:
        out[0] = dy if reduce == "add" else cx.like(node.op, [dy, *idx], dy, {"reduce": "none", "role": "grad"},
                                                    name="grad")
    if updates is not None and wants[-1]:
        gather = Op.GATHER_ELEMENTS if node.op is Op.SCATTER_ELEMENTS else Op.GATHER_ND
        attrs = {"axis": node.attrs["axis"]} if "axis" in node.attrs else {}
        out[-1] = cx.emit(gather, [dy, *idx], updates.shape, dy.dtype, {**attrs, "role": "grad"}, name="grad_update")
    return out


def _resize(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """``upsample_*_backward``: one kernel reading the output gradient, writing the input's (sizes
    and scales operands get none)."""
    x, dy = node.inputs[0], dys[0]
    if x is None or dy is None or not wants[0]:
        return [None] * len(node.inputs)
    return [cx.like(Op.RESIZE, [dy], x, _attrs(node, role="grad"), name="grad"), *([None] * (len(node.inputs) - 1))]


def _tile(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """``repeat_backward`` (repeat, tile, repeat_interleave): the gradient's copies summed back onto
    the input, one reduction reading the output gradient and writing the input's (torch reshapes
    the gradient to split each repeated dim, a view, and sums the repeat dims)."""
    x, dy = node.inputs[0], dys[0]
    if x is None or dy is None or not wants[0] or x.type.rank > dy.type.rank:
        return [None] * len(node.inputs)
    g = cx.emit(Op.REDUCE_SUM, [dy], x.shape, dy.dtype, {"role": "tile_grad"}, name="grad")
    return [g, *([None] * (len(node.inputs) - 1))]


def _select(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """top-k and sort: the values' gradient scattered back to where the indices say (torch's
    ``value_selecting_reduction_backward``); the indices output carries none."""
    x, dy = node.inputs[0], dys[0]
    assert x is not None
    if not wants[0] or dy is None or len(node.outputs) < 2:
        return [None] * len(node.inputs)   # no indices to scatter by: left to the unmodeled path
    g = cx.emit(Op.SCATTER_ELEMENTS, [cx.val(node.outputs[1]), dy], x.shape, dy.dtype,
                {"axis": node.attrs.get("axis", -1), "reduce": "none", "into": "zeros"}, name="grad")
    return [g, *([None] * (len(node.inputs) - 1))]


def _pool(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """``max_pool2d_with_indices_backward`` / ``avg_pool2d_backward``: one kernel reading the output
    gradient and the input (for the argmax), writing the input's gradient."""
    x, dy = node.inputs[0], dys[0]
    assert x is not None and dy is not None
    if not wants[0]:
        return [None] * len(node.inputs)
    return [cx.like(Op.POOL, [dy, cx.val(x)], x, _attrs(node, role="grad"), name="grad"),
            *([None] * (len(node.inputs) - 1))]


_TRANSPOSE_COLLECTIVE = {Op.ALL_GATHER: Op.REDUCE_SCATTER, Op.REDUCE_SCATTER: Op.ALL_GATHER,
                         Op.ALL_TO_ALL: Op.ALL_TO_ALL}

Rule = Callable[[GradContext, Node, list[Value | None], list[bool]], Grads]
DATA_GRADS: dict[Op, Rule] = {
    Op.RESHAPE: _reshape, Op.EXPAND: _passthrough, Op.IDENTITY: _passthrough, Op.SLICE: _slice,
    Op.PERMUTE: _permute, Op.CONCAT: _concat, Op.SPLIT: _split, Op.PAD: _same_op(Op.SLICE),
    Op.FLIP: _same_op(), Op.ROLL: _same_op(), Op.TRIANGULAR: _same_op(),
    Op.DEPTH_TO_SPACE: _same_op(Op.SPACE_TO_DEPTH), Op.SPACE_TO_DEPTH: _same_op(Op.DEPTH_TO_SPACE),
    Op.GATHER: _gather(Op.SCATTER), Op.GATHER_ELEMENTS: _gather(Op.SCATTER_ELEMENTS),
    Op.GATHER_ND: _gather(Op.SCATTER_ND), Op.SCATTER: _scatter, Op.TILE: _tile,
    Op.SCATTER_ELEMENTS: _scatter_indexed, Op.SCATTER_ND: _scatter_indexed, Op.INDEX_PUT: _scatter_indexed,
    Op.RESIZE: _resize, Op.TOPK: _select, Op.SORT: _select,
    Op.POOL: _pool, Op.ALL_REDUCE: _passthrough,
    **{op: _same_op(t) for op, t in _TRANSPOSE_COLLECTIVE.items()},
}
