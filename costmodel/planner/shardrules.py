"""Sharding propagation rules, one per op family: given how a node's operands are laid out, the
layout each operand must have for the node to run locally, and the layout of its results.

Why rules by op group rather than by layer names: Megatron's column/row pairs fall out of the
contraction rule alone. A contraction whose activation is whole and whose weight is split on a free
dim produces a result split on that dim (column parallel); the next contraction then sees its
activation split on a *contracted* dim, so its weight is split there too and its result is a partial
sum (row parallel) that one all-reduce completes. Heads stay split through reshapes, transposes,
rotary and attention because those rules carry a split dim through. Whatever a rule cannot run
split (a norm over a split dim, a concat along it, an op with no rule) asks for the whole tensor,
and the pass inserts the all-gather: never wrong, and visible as a collective in the program.

A rule returns a :class:`Decision`; the pass (:mod:`.sharding`) inserts the collectives that turn
each operand's layout into the wanted one and settles partial results right after their producer.
"""


from __future__ import annotations

from ...ir import GROUP, VIEW_OPS, Node, Op, OpGroup, Value
from .shardbase import LINEAR, Decision, Rule, RuleContext, axes_size, drop_duplicates, rest, whole
from .shardrules_data import DATA_RULES, equal_piece, reshape_map, same_size_dims
from .shardrules_grouped import expert_exchange, grouped_dot
from .shardspec import Spec

__all__ = ["Decision", "RuleContext", "decide", "reshape_map", "equal_piece"]


def _dot(ctx: RuleContext, node: Node) -> Decision:
    """dot_general: an axis on a batch pair or a free dim splits the result; on a contracted pair it
    leaves a partial sum. Each axis may split one thing only: a conflict is resolved on an activation
    (never a weight's layout, which was decided once), gathering along a contraction before a free
    dim, so a weight gradient ``dY^T X`` gathers ``X``'s sequence rather than leaving a partial
    weight-sized sum."""
    ctx.decide_weights(node)
    lhs, rhs = node.inputs[0], node.inputs[1]
    assert lhs is not None and rhs is not None
    a = node.attrs
    lc, rc = tuple(a["lhs_contract"]), tuple(a["rhs_contract"])
    lb, rb = tuple(a.get("lhs_batch", ())), tuple(a.get("rhs_batch", ()))
    lsh, rsh = ctx.shape(lhs), ctx.shape(rhs)
    lf = [d for d in range(len(lsh)) if d not in lc and d not in lb]
    rf = [d for d in range(len(rsh)) if d not in rc and d not in rb]
    side = {"l": list(ctx.spec(lhs).dims), "r": list(ctx.spec(rhs).dims)}
    weight = {"l": lhs.kind.is_weight, "r": rhs.kind.is_weight}
    both = weight["l"] and weight["r"]
    pairs = {"l": lc, "r": rc}
    for _ in range(8):
        for dl, dr in zip(lc, rc):      # a contracted pair that disagrees: the activation follows the weight
            if side["l"][dl] and side["r"][dr] and side["l"][dl] != side["r"][dr]:
                if not weight["l"] and not weight["r"]:
                    # two activations keep the axes they share: a weight gradient under context and
                    # sequence parallelism gathers the ``tp`` part of the tokens, never the ``cp`` part
                    # (each context-parallel rank sums its own tokens, Megatron-LM)
                    common = _common_prefix(side["l"][dl], side["r"][dr])
                    side["l"][dl] = side["r"][dr] = common
                    continue
                for s_, d in (("l", dl), ("r", dr)):
                    if not weight[s_] or both:
                        side[s_][d] = ()
        slots: dict[str, list[tuple[str, int, str]]] = {}
        for kind, ld, rd in (("c", lc, rc), ("b", lb, rb)):
            for dl, dr in zip(ld, rd):
                for x in dict.fromkeys((*side["l"][dl], *side["r"][dr])):
                    s_ = "l" if x in side["l"][dl] else "r"
                    slots.setdefault(x, []).append((s_, dl if s_ == "l" else dr, kind))
        for s_, free in (("l", lf), ("r", rf)):
            for d in free:
                for x in side[s_][d]:
                    slots.setdefault(x, []).append((s_, d, "f"))
        dup = next((x for x, cl in slots.items() if len(cl) > 1), None)
        summed = [x for x, cl in slots.items() if cl[0][2] == "c"]
        if dup is None and len(summed) > 1:     # one partial axis at a time: gather the others first
            dup = summed[-1]
            slots[dup] = slots[dup] + [("l", -1, "z")]
        if dup is None:
            break
        s_, d, kind = min((c for c in slots[dup] if c[2] != "z"),
                          key=lambda c: (weight[c[0]] and not both, {"c": 0, "f": 1, "b": 2}[c[2]], c[0] == "r"))
        side[s_][d] = tuple(y for y in side[s_][d] if y != dup)
        if kind == "c":                 # a contracted pair loses the axis on both sides
            other = "r" if s_ == "l" else "l"
            od = pairs[other][pairs[s_].index(d)]
            side[other][od] = tuple(y for y in side[other][od] if y != dup)
    else:
        return whole(ctx, node)
    partial: str | None = None
    for dl, dr in zip(lc, rc):
        axes = side["l"][dl] or side["r"][dr]
        if axes:
            partial = axes[0]
            side["l"][dl] = side["r"][dr] = axes          # the whole side is sliced locally (free)
    out: list[tuple[str, ...]] = []
    for dl, dr in zip(lb, rb):
        axes = side["l"][dl] or side["r"][dr]
        side["l"][dl] = axes if lsh[dl] > 1 else ()
        side["r"][dr] = axes if rsh[dr] > 1 else ()
        out.append(axes)
    out += [side["l"][d] for d in lf] + [side["r"][d] for d in rf]
    return Decision([Spec(tuple(side["l"])), Spec(tuple(side["r"])), *rest(ctx, node, 2)], [Spec(tuple(out), partial)])


def _common_prefix(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    """The outer axes two splits of one dim share (``(cp, tp)`` and ``(cp,)``: ``(cp,)``)."""
    out: list[str] = []
    for x, y in zip(a, b):
        if x != y:
            break
        out.append(x)
    return tuple(out)


def _attention(ctx: RuleContext, node: Node) -> Decision:
    """Heads (and batch) stay split; a query split over the sequence (context parallelism) needs
    every key and value: gathered over that axis, and their gradients come back as partial sums."""
    bsd = node.attrs.get("layout", "bhsd") == "bsd"
    off = 1 if node.op is Op.ATTENTION_BACKWARD else 0
    ins = node.inputs
    q = ins[off]
    assert q is not None
    qs = ctx.spec(q)
    head_dim, seq_dim = (2, 1) if bsd else (1, 2)
    heads_axes = qs.dims[head_dim]
    seq_axes = qs.dims[seq_dim]
    qwant = [qs.dims[0], (), (), ()]
    qwant[head_dim], qwant[seq_dim] = heads_axes, seq_axes
    want: list[Spec | None] = []
    kv_spec: Spec | None = None
    for i, v in enumerate(ins):
        if v is None:
            want.append(None)
            continue
        shape = ctx.shape(v)
        role = i - off
        if i < off or role == 0:
            want.append(Spec(tuple(qwant[:len(shape)])))
        elif role in (1, 2):
            dims = [qwant[0], (), (), ()][:len(shape)]
            heads = shape[head_dim] if not bsd else \
                int(node.attrs.get("kv_num_heads") or node.attrs.get("num_heads", 1))
            if heads_axes and heads % axes_size(ctx, heads_axes) == 0:
                dims[head_dim] = heads_axes
            kv_spec = Spec(tuple(dims))
            want.append(kv_spec)
        elif shape == ctx.shape(q):
            want.append(Spec(tuple(qwant[:len(shape)])))   # the saved output read by the backward
        else:
            want.append(Spec.replicated(len(shape)))     # a mask or bias: whole
    outs: list[Spec] = []
    for o in node.outputs:
        shape = ctx.shape(o)
        if node.op is Op.ATTENTION_BACKWARD and kv_spec is not None and len(outs) in (1, 2):
            outs.append(Spec(kv_spec.dims, seq_axes[-1] if seq_axes else None))
        else:
            outs.append(Spec(tuple(qwant[:len(shape)])))
    return Decision(want, outs)


def _elementwise(ctx: RuleContext, node: Node) -> Decision:
    """Operands line up from the right (numpy broadcast); a split dim of one operand splits the
    result, and the others are sliced to match (free) or, on a broadcast dim, read whole. A sum of
    partial sums over one axis stays partial (three projections' input gradients are added before
    the one all-reduce, as a fused QKV projection does)."""
    if node.op in LINEAR:
        raws = [ctx.raw(v) for v in node.inputs if v is not None]
        if raws and raws[0].partial and all(r == raws[0] for r in raws) and \
                all(ctx.shape(v) == ctx.shape(node.outputs[0]) for v in node.inputs if v is not None):
            return Decision([r for r in raws], [raws[0]])
    out_shape = ctx.shape(node.outputs[0])
    rank = len(out_shape)
    lookups = int(node.attrs.get("lookup_operands", 0) or 0)
    axis_attr = node.attrs.get("axis") if node.op in (Op.QUANTIZE, Op.DEQUANTIZE, Op.PRELU) else None
    n_args = len(node.inputs) - lookups
    dims: list[tuple[str, ...]] = [()] * rank
    for v in node.inputs[:n_args]:
        if v is None:
            continue
        shape, spec = ctx.shape(v), ctx.spec(v)
        off = rank - len(shape)
        for j, axes in enumerate(spec.dims):
            if axes and not dims[j + off] and shape[j] == out_shape[j + off]:
                dims[j + off] = axes
    dims = drop_duplicates(dims)
    if axis_attr is not None:
        dims = [()] * rank
    want: list[Spec | None] = []
    for i, v in enumerate(node.inputs):
        if v is None:
            want.append(None)
            continue
        shape = ctx.shape(v)
        if i >= n_args or axis_attr is not None:
            want.append(Spec.replicated(len(shape)))
            continue
        off = rank - len(shape)
        want.append(Spec(tuple(dims[j + off] if shape[j] == out_shape[j + off] and shape[j] > 1 else ()
                               for j in range(len(shape)))))
    return Decision(want, [Spec(tuple(dims[:len(ctx.shape(o))])) if len(ctx.shape(o)) == rank
                           else Spec.replicated(len(ctx.shape(o))) for o in node.outputs])


def _axes_attr(node: Node, rank: int) -> tuple[int, ...]:
    axes = node.attrs.get("axes")
    if axes is None:
        axis = node.attrs.get("axis")
        return tuple(range(rank)) if axis is None else (int(axis) % rank,)
    return tuple(int(a) % rank for a in axes) if axes else tuple(range(rank))


def _reduction(ctx: RuleContext, node: Node) -> Decision:
    """Reducing over a split dim leaves a partial result (settled by an all-reduce); scans and
    arg-reductions need the whole dim."""
    x = node.inputs[0]
    assert x is not None
    spec, shape = ctx.spec(x), ctx.shape(x)
    axes = _axes_attr(node, len(shape))
    if node.op in (Op.CUMSUM, Op.CUMPROD, Op.ARGMAX, Op.ARGMIN):
        dims = [() if d in axes else spec.dims[d] for d in range(len(shape))]
        return Decision([Spec(tuple(dims)), *rest(ctx, node, 1)],
                        [_result(ctx, o, dims, axes, len(shape), node) for o in node.outputs])
    split = [a for d in axes for a in spec.dims[d]]
    partial = split[0] if split else None
    # one pending sum at a time: the outermost axis stays partial, the others are gathered first (a
    # loss averaged over tokens split over ``cp`` and, under sequence parallelism, ``tp``)
    dims = [(spec.dims[d][:1] if spec.dims[d] and spec.dims[d][0] == partial else ()) if d in axes
            else spec.dims[d] for d in range(len(shape))]
    out = _result(ctx, node.outputs[0], dims, axes, len(shape), node)
    return Decision([Spec(tuple(dims)), *rest(ctx, node, 1)], [Spec(out.dims, partial)])


def _result(ctx: RuleContext, out: Value, dims: list[tuple[str, ...]], axes: tuple[int, ...], rank: int,
            node: Node) -> Spec:
    """The result layout of a reduction over ``axes`` (kept as size-1 dims or dropped)."""
    out_rank = len(ctx.shape(out))
    if out_rank == rank:
        return Spec(tuple(() if d in axes else dims[d] for d in range(rank)))
    kept = [dims[d] for d in range(rank) if d not in axes]
    return Spec(tuple(kept)) if len(kept) == out_rank else Spec.replicated(out_rank)


def _normalization(ctx: RuleContext, node: Node) -> Decision:
    """Rows stay split; the normalized dims must be whole, except a softmax, which runs split over
    its axis with its row max and sum all-reduced (Megatron's vocab-parallel cross entropy)."""
    x = node.inputs[0]
    assert x is not None
    spec, shape = ctx.spec(x), ctx.shape(x)
    rank = len(shape)
    axis = int(node.attrs.get("axis", -1)) % rank if rank else 0
    if node.op in (Op.BATCH_NORM, Op.GROUP_NORM, Op.INSTANCE_NORM, Op.LRN):
        return whole(ctx, node)
    normalized = range(axis, rank) if node.op in (Op.LAYER_NORM, Op.RMS_NORM) else (axis,)
    dims = list(spec.dims)
    stats: list[tuple[str, int]] = []
    split = [a for d in normalized for a in dims[d]]
    if node.op in (Op.SOFTMAX, Op.LOG_SOFTMAX) and len(split) == 1:
        rows = 1
        for d in range(rank):
            if d != axis:
                rows *= shape[d] // axes_size(ctx, dims[d])
        stats = [(split[0], rows), (split[0], rows)]
    else:
        for d in normalized:
            dims[d] = ()
    want: list[Spec | None] = [Spec(tuple(dims))]
    for v in node.inputs[1:]:
        want.append(None if v is None else _param_like(ctx, v, dims, rank))
    outs = [Spec(tuple(dims)) if len(ctx.shape(o)) == rank else Spec.replicated(len(ctx.shape(o)))
            for o in node.outputs]
    return Decision(want, outs, stats)


def _param_like(ctx: RuleContext, v: Value, dims: list[tuple[str, ...]], rank: int) -> Spec:
    """A norm's scale and shift line up with the trailing dims of its input."""
    shape = ctx.shape(v)
    off = rank - len(shape)
    return Spec(tuple(dims[j + off] if off >= 0 and shape[j] > 1 else () for j in range(len(shape))))


# -- data movement -----------------------------------------------------------------------------------

_BY_OP: dict[Op, Rule] = {Op.DOT: _dot, Op.GROUPED_DOT: grouped_dot, Op.ALL_TO_ALL: expert_exchange,
                          Op.ATTENTION: _attention,
                          Op.ATTENTION_BACKWARD: _attention,
                          Op.IDENTITY: _elementwise, Op.COPY: _elementwise, Op.SEND: _elementwise, **DATA_RULES}
_BY_GROUP: dict[OpGroup, Rule] = {OpGroup.ELEMENTWISE: _elementwise, OpGroup.REDUCTION: _reduction,
                                  OpGroup.NORMALIZATION: _normalization, OpGroup.DATA_MOVEMENT: same_size_dims}


def decide(ctx: RuleContext, node: Node) -> Decision:
    """The layouts ``node`` needs and gives; ops without a rule run whole."""
    rule = _BY_OP.get(node.op) or _BY_GROUP.get(GROUP[node.op])
    if rule is None or node.op in VIEW_OPS and node.op not in (Op.RESHAPE, Op.IDENTITY, Op.SLICE, Op.EXPAND):
        return whole(ctx, node)
    return rule(ctx, node)
