"""Reverse-mode differentiation of an IR graph, op by op, into canonical ops.

Why by hand rather than from torch: the gradient must exist for every graph narrowpipe holds (ONNX
files, the model builder's configurations nobody exported, sharded programs) and must be counted by
the same cost rules as the forward. The walk is the textbook one: decide which values need a
gradient (those depending on a trainable float parameter), walk the forward nodes in reverse, hand
each node its outputs' gradients and get its inputs' gradients back from the op's rule, and sum the
gradients of a value read more than once. An op without a rule gets an ``UNKNOWN`` node producing
its inputs' gradients, so the walk continues and reports list ``<op> backward`` as unmodeled: never
silently dropped.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Sequence

from ...ir import Graph, Node, Op, OpGroup, Source, TensorType, Value, ValueKind, ops_in_group
from .context import GradContext, Grads
from .grad_data import DATA_GRADS
from .grad_elementwise import ELEMENTWISE_GRADS, NON_DIFFERENTIABLE
from .grad_grouped import grouped_dot_grad
from .grad_linear import attention_grad, conv_grad, dot_grad
from .grad_norm import NORM_GRADS
from .phases import FORWARD, PHASE

__all__ = ["BACKWARD_RULES", "FROZEN_META", "requires_grad", "backward", "has_backward_rule", "trainable",
           "param_scope"]

_ELEMENTWISE = ops_in_group(OpGroup.ELEMENTWISE)

Rule = Callable[[GradContext, Node, list[Value | None], list[bool]], Grads]
BACKWARD_RULES: dict[Op, Rule] = {
    Op.DOT: dot_grad, Op.GROUPED_DOT: grouped_dot_grad, Op.CONV: conv_grad, Op.ATTENTION: attention_grad,
    **ELEMENTWISE_GRADS, **NORM_GRADS, **DATA_GRADS,
}


def has_backward_rule(op: Op) -> bool:
    return op in BACKWARD_RULES or op in NON_DIFFERENTIABLE


#: ``graph.meta`` key: the state-dict names of the parameters the source model froze (torch's
#: ``requires_grad=False``, kept by ``torch.export`` and ``.pt2`` files), which the frontend records
#: so that a training step leaves them without gradient as torch does (a frozen DETR backbone).
FROZEN_META = "frozen_params"


def trainable(graph: Graph, frozen: Iterable[str] = ()) -> list[Value]:
    """The float parameters that get gradients: ``ValueKind.PARAM`` weights neither frozen in the
    source model (``graph.meta["frozen_params"]``) nor matched by any ``frozen`` pattern (fnmatch on
    the state-dict name, e.g. ``"model.embed_tokens.*"``)."""
    patterns = list(frozen)
    frozen_in_model = set(graph.meta.get(FROZEN_META, ()))
    out = []
    for w in graph.weights:
        if w.kind is not ValueKind.PARAM or not w.dtype.is_float or w.source_name in frozen_in_model:
            continue
        if any(fnmatch.fnmatchcase(name, p) for p in patterns for name in (w.source_name, w.name)):
            continue
        out.append(w)
    return out


def param_scope(p: Value) -> str:
    """The module a parameter belongs to (``model.layers.0.mlp.up_proj`` for ``...up_proj.weight``)."""
    return p.source_name.rpartition(".")[0]


def requires_grad(nodes: Sequence[Node], params: Iterable[Value]) -> set[Value]:
    """Values that depend on a trainable parameter through differentiable ops and hold floats:
    integer inputs, buffers, masks and index arithmetic never get gradients."""
    need: set[Value] = set(params)
    for node in nodes:
        if node.op in NON_DIFFERENTIABLE:
            continue
        if any(v is not None and v in need for v in node.inputs):
            need.update(o for o in node.outputs if o.dtype.is_float)
    return need


class _Accumulator:
    """Gradient contributions per value, summed (and fitted to the value's shape and dtype) once
    every reader has contributed: when the walk reaches the value's producer, or at the end.

    The sum runs in the readers' forward order (the walk delivers them in reverse), so that
    contributions of sibling readers made before a later one are added first: a post-norm layer's
    input feeds the q, k and v projections and then the residual add, and under tensor parallelism
    the three projections' partial input gradients are added (still partial) and settled by one
    all-reduce before the residual's gradient joins, as a fused QKV projection's backward does."""

    def __init__(self, cx: GradContext) -> None:
        self.cx = cx
        self.parts: dict[Value, list[Value]] = {}

    def add(self, v: Value, g: Value) -> None:
        self.parts.setdefault(v, []).append(g)

    def __contains__(self, v: Value) -> bool:
        return v in self.parts

    def total(self, v: Value) -> Value | None:
        parts = self.parts.pop(v, None)
        if not parts:
            return None
        parts = join_pieces(self.cx, v, parts[::-1])
        fitted = [self.cx.fit(g, v) for g in parts]
        total = fitted[0]
        for g in fitted[1:]:
            total = self.cx.add(total, g)
        return total


def join_pieces(cx: GradContext, v: Value, parts: list[Value]) -> list[Value]:
    """The gradients of a split's pieces as one concat (zeros for pieces without one) instead of a
    zero-padded copy per piece summed: what torch's ``split_backward`` writes, once."""
    pads = {g.producer.attrs["piece"]: g.producer for g in parts
            if g.producer is not None and g.producer.op is Op.PAD and "piece" in g.producer.attrs}
    if len(pads) < 2:
        return parts
    slices = sorted((u.node for u in v.uses if u.node.op is Op.SLICE and "piece" in u.node.attrs
                     and u.node.attrs.get(PHASE) == FORWARD), key=lambda n: n.attrs["piece"])
    shapes = [n.outputs[0].shape for n in slices]
    diff = {i for s in shapes for i, (a, b) in enumerate(zip(s, v.shape)) if a != b}
    if any(len(s) != len(v.shape) for s in shapes) or len(diff) != 1 or \
            [n.attrs["piece"] for n in slices] != list(range(len(slices))):
        return parts
    pieces = []
    for n in slices:
        pad = pads.get(n.attrs["piece"])
        out = n.outputs[0]
        pieces.append(pad.inputs[0] if pad is not None and pad.inputs[0] is not None else
                      cx.emit(Op.FILL, [], out.shape, out.dtype, {"value": 0}, name="grad_zero_piece"))
    for pad in pads.values():
        cx.graph.remove(pad)
    rest = [g for g in parts if g.producer not in pads.values()]
    return [*rest, cx.emit(Op.CONCAT, pieces, v.shape, pieces[0].dtype, {"axis": diff.pop()}, name="grad_split")]


def _unmodeled(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool],
               grads: Grads | None = None) -> Grads:
    """An ``UNKNOWN`` node giving the gradients no rule gave, so reports list ``<op> backward``."""
    grads = list(grads) if grads is not None else [None] * len(node.inputs)
    missing = [i for i, w in enumerate(wants) if w and grads[i] is None]
    if not missing:
        return grads
    types = []
    for i in missing:
        v = node.inputs[i]
        assert v is not None
        types.append(TensorType(v.dtype, v.shape))
    cx.unmodeled.add(node.label)
    reads = [g for g in dys if g is not None] + [cx.val(v) for v in node.inputs if v is not None]
    outs = cx.emit_types(Op.UNKNOWN, reads, types, {"source_op": f"{node.label} backward"}, name="grad")
    for i, g in zip(missing, outs):
        grads[i] = g
    return grads


def backward(cx: GradContext, nodes: Sequence[Node], seeds: dict[Value, Value], need: set[Value],
             params: Sequence[Value], before: Callable[[Node], None] | None = None,
             inputs: Sequence[Value] = ()) -> dict[Value, Value]:
    """Emit the backward of ``nodes`` (forward order) given the ``seeds`` (value -> its gradient);
    return each parameter's gradient, and each of ``inputs``' (activation inputs handed in by an
    earlier piece of the model: their readers' gradients are summed here, where the whole model
    sums them at their producer). ``before(node)`` runs just before a node's backward (where
    recomputation puts the forward it needs)."""
    acc = _Accumulator(cx)
    for v, g in seeds.items():
        acc.add(v, g)
    for node in reversed(nodes):
        if not any(o in acc for o in node.outputs):
            continue
        wants = [v is not None and v in need and v.dtype.is_float for v in node.inputs]
        if not any(wants) or node.op in NON_DIFFERENTIABLE:
            for o in node.outputs:
                acc.parts.pop(o, None)
            continue
        if before is not None:
            before(node)
        cx.serve(node)
        dys = [acc.total(o) for o in node.outputs]
        rule = BACKWARD_RULES.get(node.op)
        grads = rule(cx, node, dys, wants) if rule is not None else None
        grads = _unmodeled(cx, node, dys, wants, grads)
        for operand, grad, w in zip(node.inputs, grads, wants):
            if w and operand is not None and grad is not None:
                axis = node.attrs.get("axis")
                if isinstance(axis, int) and node.op in _ELEMENTWISE and operand.type.rank < grad.type.rank:
                    # an operand aligned from an axis (a conv's channel bias): only this node knows
                    # where, so its gradient is summed back here, not by the accumulator
                    grad = cx.unbroadcast(grad, operand.shape, axis)
                acc.add(operand, grad)
    out: dict[Value, Value] = {}
    for p in params:
        cx.serve(None, Source(op="grad_accumulation", name=p.source_name, scope=param_scope(p)))
        total = acc.total(p)
        if total is not None:
            out[p] = total
    for v in inputs:
        cx.serve(None, Source(op="input_grad", name=v.name))
        total = acc.total(v)
        if total is not None:
            out[v] = total
    return out
