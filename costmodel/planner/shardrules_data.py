"""Sharding rules of data movement and lookups: reshapes, transposes, slices, embedding gathers and
their gradient scatters, element picks, sorts. A split dim survives wherever the op keeps it whole
per device (a reshape that keeps it the leading factor, an equal split of a weight's columns, a
table split by rows where rows another device owns read as zero)."""

from __future__ import annotations

from ...ir import Node, Op
from .shardbase import Decision, RuleContext, axes_size, drop_duplicates, numel, rest, whole
from .shardspec import Spec

__all__ = ["DATA_RULES", "reshape_map", "equal_piece", "same_size_dims"]


def reshape_map(src: tuple[int, ...], dst: tuple[int, ...]) -> dict[int, int] | None:
    """Source dim -> result dim that carries its *leading* part, for the dims a reshape keeps whole
    or splits (``[B, S, H*D] -> [B, S, H, D]``: 2 -> 2) or merges as the outer factor. None when
    the shapes do not line up in groups."""
    out: dict[int, int] = {}
    i = j = 0
    while i < len(src) and j < len(dst):
        a, b = src[i], dst[j]
        gi, gj = [i], [j]
        while a != b:
            if a < b and i + 1 < len(src):
                i += 1
                a *= src[i]
                gi.append(i)
            elif b < a and j + 1 < len(dst):
                j += 1
                b *= dst[j]
                gj.append(j)
            else:
                return None
        lead_src = next((d for d in gi if src[d] > 1), gi[0])
        lead_dst = next((d for d in gj if dst[d] > 1), gj[0])
        out[lead_src] = lead_dst
        i += 1
        j += 1
    return out


def _reshape(ctx: RuleContext, node: Node) -> Decision:
    x, out = node.inputs[0], node.outputs[0]
    assert x is not None
    src, dst = ctx.shape(x), ctx.shape(out)
    spec = ctx.spec(x)
    mapping = reshape_map(src, dst) or {}
    want: list[tuple[str, ...]] = [()] * len(src)
    res: list[tuple[str, ...]] = [()] * len(dst)
    for d, axes in enumerate(spec.dims):
        if not axes or d not in mapping:
            continue
        k = axes_size(ctx, axes)
        if dst[mapping[d]] % k == 0:
            want[d] = axes
            res[mapping[d]] = axes
    return Decision([Spec(tuple(want)), *rest(ctx, node, 1)], [Spec(tuple(res))])


def _permute(ctx: RuleContext, node: Node) -> Decision:
    x = node.inputs[0]
    assert x is not None
    spec = ctx.spec(x)
    perm = tuple(node.attrs.get("perm") or reversed(range(spec.rank)))
    return Decision([spec.resolved(), *rest(ctx, node, 1)], [Spec(tuple(spec.dims[p] for p in perm))])


def equal_piece(src: tuple[int, ...], dst: tuple[int, ...]) -> int | None:
    """The one dim a slice cuts into equal pieces (``split(768, dim=2)`` of 2304), if it is one."""
    diff = [d for d, (a, b) in enumerate(zip(src, dst)) if a != b]
    if len(src) != len(dst) or len(diff) != 1 or dst[diff[0]] == 0 or src[diff[0]] % dst[diff[0]]:
        return None
    return diff[0]


def _slice(ctx: RuleContext, node: Node) -> Decision:
    """A piece of an equal split stays split when each device's part holds its share of every piece:
    the dim comes from a weight's free dim (its columns can be stored in any order, Megatron's
    interleaved QKV), not from token positions, and the piece divides by the axes."""
    x = node.inputs[0]
    if x is not None and len(node.inputs) == 1:
        src, dst = ctx.shape(x), ctx.shape(node.outputs[0])
        d = equal_piece(src, dst)
        spec = ctx.spec(x)
        if d is not None and spec.dims[d] and not ctx.is_token_dim(x, d) and dst[d] % axes_size(ctx, spec.dims[d]) == 0:
            return Decision([spec], [spec])
    return same_size_dims(ctx, node)


def _concat(ctx: RuleContext, node: Node) -> Decision:
    """Equal pieces joined along a weight's free dim, each split the same way, stay split: each
    device joins its share of every piece (the gradient of a fused gate-up projection's halves,
    Megatron's interleaved layout, as :func:`_slice` keeps the halves split)."""
    ins = [v for v in node.inputs if v is not None]
    out = node.outputs[0]
    rank = len(ctx.shape(out))
    if ins and all(len(ctx.shape(v)) == rank for v in ins) and rank:
        axis = int(node.attrs.get("axis", 0)) % rank
        spec = ctx.spec(ins[0]).resolved()
        piece = ctx.shape(ins[0])[axis]
        if spec.dims[axis] and not ctx.is_token_dim(out, axis) and piece % axes_size(ctx, spec.dims[axis]) == 0 \
                and all(ctx.spec(v).resolved() == spec and ctx.shape(v)[axis] == piece for v in ins):
            return Decision([None if v is None else spec for v in node.inputs], [spec])
    return same_size_dims(ctx, node)


def same_size_dims(ctx: RuleContext, node: Node) -> Decision:
    """Slice, pad, concat, expand, ...: a dim may stay split only where every operand and the
    result have the same size along it."""
    out_shape = ctx.shape(node.outputs[0])
    x = node.inputs[0]
    if x is None or len(ctx.shape(x)) != len(out_shape):
        return whole(ctx, node)
    spec = ctx.spec(x)
    dims = []
    for d, axes in enumerate(spec.dims):
        same = all(len(ctx.shape(v)) != len(out_shape) or ctx.shape(v)[d] == out_shape[d]
                   for v in node.inputs if v is not None)
        dims.append(axes if same else ())
    want: list[Spec | None] = []
    for v in node.inputs:
        if v is None:
            want.append(None)
        elif len(ctx.shape(v)) == len(out_shape):
            want.append(Spec(tuple(dims[d] if ctx.shape(v)[d] == out_shape[d] else () for d in range(len(dims)))))
        else:
            want.append(Spec.replicated(len(ctx.shape(v))))
    return Decision(want, [Spec(tuple(dims)) if len(ctx.shape(o)) == len(out_shape)
                           else Spec.replicated(len(ctx.shape(o))) for o in node.outputs])



def _expand(ctx: RuleContext, node: Node) -> Decision:
    """A broadcast (numpy rules: size-1 or new leading dims grow): the dims it keeps keep their split,
    and the dims it grows cost nothing to split, so each device makes only its part, laid out as the
    block's token tensors are (:meth:`.RuleContext.made_layout`): the gradient of ones that seeds a
    block's backward, or the loss's gradient spread over the tokens, is its own tokens' on each
    context-parallel rank, not a whole sequence that the next op gathers or slices. A dim repeated
    from a larger size (grouped-query heads) is read whole."""
    x, out = node.inputs[0], node.outputs[0]
    if x is None:
        return whole(ctx, node)
    src, dst = ctx.shape(x), ctx.shape(out)
    off = len(dst) - len(src)
    if off < 0:
        return same_size_dims(ctx, node)
    spec = ctx.spec(x)
    want: list[tuple[str, ...]] = [()] * len(src)
    dims: list[tuple[str, ...]] = [()] * len(dst)
    grown = []
    for j in range(len(dst)):
        i = j - off
        if i >= 0 and src[i] == dst[j]:
            want[i] = dims[j] = spec.dims[i]
        elif i < 0 or src[i] == 1:
            grown.append(j)
    made = ctx.made_layout(out)
    used = {a for d in dims for a in d}
    for j in grown:
        axes = tuple(a for a in made.dims[j] if a not in used)
        if axes and dst[j] % axes_size(ctx, axes) == 0:
            dims[j] = axes
            used.update(axes)
    return Decision([Spec(tuple(want)), *rest(ctx, node, 1)], [Spec(tuple(dims))])


def _gather_rows(ctx: RuleContext, node: Node) -> Decision:
    """An embedding lookup: a table split over its rows gives a partial result (rows another
    device owns read as zero; Megatron's vocab-parallel embedding), split over its columns a result
    split the same way; the indices' layout carries to the leading result dims."""
    ctx.decide_weights(node)
    table, idx = node.inputs[0], node.inputs[1]
    axis = int(node.attrs.get("axis", 0))
    if table is None or idx is None or axis != 0 or len(node.inputs) > 2:
        return whole(ctx, node)
    ts, ish = ctx.spec(table), ctx.spec(idx)
    row_axes = ts.dims[0]
    if row_axes and not table.kind.is_weight:
        ts = ts.with_dim(0, ())                 # rows of an activation: gather them first
        row_axes = ()
    out = [*ish.dims, *ts.dims[1:]]
    if len(out) != len(ctx.shape(node.outputs[0])):
        return whole(ctx, node)
    out = drop_duplicates(out)
    if row_axes and row_axes[0] in {a for d in out for a in d}:
        return whole(ctx, node)
    partial = row_axes[0] if len(row_axes) == 1 else None
    return Decision([ts, Spec(tuple(out[:ish.rank])), *rest(ctx, node, 2)], [Spec(tuple(out), partial)])


def _scatter_rows(ctx: RuleContext, node: Node) -> Decision:
    """An embedding's gradient, rows scatter-added into a zeroed table (``into="zeros"``): each
    device keeps only the rows it owns when the table is split as the forward split it (larger than
    the rows it receives), so it reads every update whole over ``tp``; updates split over another
    axis (context parallelism's sequence) leave a partial table, summed with the gradients."""
    if node.attrs.get("into") != "zeros" or int(node.attrs.get("axis", 0)) != 0 or len(node.inputs) != 2:
        return whole(ctx, node)
    idx, upd = node.inputs
    if idx is None or upd is None:
        return whole(ctx, node)
    out_shape = ctx.shape(node.outputs[0])
    us = ctx.spec(upd)
    ish = ctx.spec(idx)
    rest = [a for d in us.dims[:ish.rank] for a in d if a != "tp"]
    tp = ctx.sizes.get("tp", 1)
    rows = ("tp",) if tp > 1 and out_shape[0] % tp == 0 and out_shape[0] > numel(ctx.shape(idx)) else ()
    keep = [tuple(a for a in d if a != "tp") for d in us.dims]
    upd_want = Spec(tuple(keep[:ish.rank]) + ((),) * (us.rank - ish.rank))
    idx_want = Spec(tuple(keep[:ish.rank]))
    out = Spec((rows, *((),) * (len(out_shape) - 1)), rest[0] if len(rest) == 1 else None)
    if len(rest) > 1:
        return whole(ctx, node)
    return Decision([idx_want, upd_want], [out])


def _gather_elements(ctx: RuleContext, node: Node) -> Decision:
    """Picking one element along a split axis (the label's logit in a vocabulary-parallel cross
    entropy): the device that owns it contributes, the others read zero, and one all-reduce of the
    small result completes it (Megatron's vocab_parallel_cross_entropy)."""
    data, idx = node.inputs[0], node.inputs[1] if len(node.inputs) > 1 else None
    if data is None or idx is None or len(node.inputs) != 2:
        return whole(ctx, node)
    ds, shape = ctx.spec(data), ctx.shape(data)
    a = int(node.attrs.get("axis", 0)) % len(shape)
    if len(ds.dims[a]) != 1 or ctx.shape(idx)[a] != 1:
        return same_size_dims(ctx, node)
    dims = [() if d == a else ax for d, ax in enumerate(ds.dims)]
    return Decision([ds, Spec(tuple(dims))], [Spec(tuple(dims), ds.dims[a][0])])


def _scatter_elements(ctx: RuleContext, node: Node) -> Decision:
    """The gradient of an element pick, scattered into a zeroed tensor: each device writes only its
    part of the axis, so the result may be split along it (over ``tp`` when it divides) for free."""
    if node.attrs.get("into") != "zeros" or len(node.inputs) != 2 or node.inputs[0] is None or node.inputs[1] is None:
        return whole(ctx, node)
    upd = node.inputs[1]
    out_shape = ctx.shape(node.outputs[0])
    a = int(node.attrs.get("axis", 0)) % len(out_shape)
    us = ctx.spec(upd)
    if len(ctx.shape(upd)) != len(out_shape) or us.dims[a]:
        return whole(ctx, node)
    dims = list(us.dims)
    tp = ctx.sizes.get("tp", 1)
    if tp > 1 and out_shape[a] % tp == 0 and out_shape[a] > ctx.shape(upd)[a] and "tp" not in us.axes:
        dims[a] = ("tp",)
    return Decision([us, us], [Spec(tuple(dims))])


def _along_axis(ctx: RuleContext, node: Node) -> Decision:
    """Sort, top-k, ...: whole along their axis, split elsewhere."""
    x = node.inputs[0]
    assert x is not None
    spec, shape = ctx.spec(x), ctx.shape(x)
    axis = int(node.attrs.get("axis", -1)) % max(len(shape), 1)
    dims = [() if d == axis else a for d, a in enumerate(spec.dims)]
    return Decision([Spec(tuple(dims)), *rest(ctx, node, 1)],
                    [Spec(tuple(dims)) if len(ctx.shape(o)) == len(shape) else Spec.replicated(len(ctx.shape(o)))
                     for o in node.outputs])



DATA_RULES = {Op.RESHAPE: _reshape, Op.EXPAND: _expand, Op.PERMUTE: _permute, Op.GATHER: _gather_rows,
              Op.SORT: _along_axis, Op.TOPK: _along_axis, Op.SCATTER: _scatter_rows, Op.SLICE: _slice,
              Op.CONCAT: _concat, Op.GATHER_ELEMENTS: _gather_elements, Op.SCATTER_ELEMENTS: _scatter_elements}
