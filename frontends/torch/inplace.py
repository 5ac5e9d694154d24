"""In-place writes reach the tensor they write into, also through views.

Why: ``torch.export`` keeps eager mutation. ``out[:, t] = y`` is ``select(out, 1, t)`` then
``copy_(select, y)``, and the code after it reads ``out``'s node, not the write's. Lowered one node
at a time, the written data would land in a value nobody reads: dead in the IR, its producers
without gradient, freed early by liveness (QA: a training step 12288 FLOPs where torch counts 20480,
the first Linear got no gradient). Functionalization (``run_decompositions``) rewrites such a write
as a ``select_scatter`` of the base; this module does the same during the walk. After an in-place
op, the view's new value is written back up its chain of views: a scatter (marked ``in_place``, as
the eager write updates the storage where it lies) for a slice or select, the inverse reshape or
permute for those, nothing for an alias. Each node of the chain is then rebound to its new value,
so every later reader sees the written data.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import torch.fx as fx

from ...ir import IN_PLACE, VIEW_OPS, Op, Value
from .aten_args import op_key

if TYPE_CHECKING:
    from .lowering import AtenLowerer

__all__ = ["is_in_place", "writes_into_view", "write_back"]

#: aten ops whose result shares storage with their first argument (a write into one is a write
#: into the other). ``reshape`` is here: when it copies, torch gives it no in-place writers.
VIEW_PACKETS = frozenset({
    "view", "reshape", "_unsafe_view", "_reshape_alias", "squeeze", "unsqueeze", "flatten", "unflatten",
    "view_as", "reshape_as", "view_as_real", "view_as_complex", "real", "imag",
    "slice", "select", "narrow", "diagonal", "as_strided", "unfold", "expand", "expand_as", "broadcast_to",
    "alias", "detach", "permute", "transpose", "t", "numpy_T", "swapaxes", "swapdims", "movedim",
    "contiguous", "to", "type_as",
})


def is_in_place(node: fx.Node) -> bool:
    """An aten op that updates its first argument (``mul_``, ``copy_``, ``index_copy_``)."""
    if node.op != "call_function" or node.target is operator.getitem:
        return False
    packet = op_key(node.target)[1]
    return packet.endswith("_") and not packet.endswith("__") and "::" not in packet


def _parent(node: fx.Node) -> fx.Node | None:
    """The node whose storage ``node``'s result shares: a view's source, an in-place op's target.
    (A split's pieces are left out: torch refuses in-place writes into them under autograd.)"""
    if node.op != "call_function" or not node.args or node.target is operator.getitem:
        return None
    if op_key(node.target)[1] in VIEW_PACKETS or is_in_place(node):
        first = node.args[0]
        return first if isinstance(first, fx.Node) else None
    return None


def writes_into_view(node: fx.Node) -> bool:
    """Whether ``node`` (an in-place op, or ``copy`` before a scatter) writes through a view, so
    that :func:`write_back` puts the data into the base and the op itself moves nothing."""
    target = node.args[0] if node.args else None
    return isinstance(target, fx.Node) and _parent(target) is not None


def write_back(cx: AtenLowerer, node: fx.Node) -> None:
    """After in-place ``node`` was lowered (its value is the written tensor's new value): rebind its
    target and every tensor the target views to their new values."""
    new = cx.value(node)
    target = node.args[0] if node.args else None
    _mark_in_place(cx, new, cx.value(target) if isinstance(target, fx.Node) else None)
    while isinstance(target, fx.Node) and new is not None:
        old = cx.value(target)
        parent = _parent(target)
        cx.env[target] = new
        base = cx.value(parent) if parent is not None else None
        if parent is None or base is None:
            return
        if old is not base:                           # else an alias (detach, a no-op ``to``)
            new = _into(cx, node, base, old, new)
        target = parent


def _mark_in_place(cx: AtenLowerer, new: Value | None, old: Value | None) -> None:
    """The node computing an in-place op's result updates its first operand where it lies
    (``relu_``: liveness gives it no buffer of its own; QA: peak 65536 B where 40960 are live)."""
    producer = new.producer if new is not None else None
    if producer is None or old is None or new is old or producer.op in VIEW_OPS or IN_PLACE in producer.attrs:
        return
    if producer.inputs and producer.inputs[0] is old and producer.outputs[0].type == old.type:
        cx.graph.set_attr(producer, IN_PLACE, 0)


def _into(cx: AtenLowerer, node: fx.Node, base: Value, old: Value | None, new: Value) -> Value | None:
    """``base`` with view ``old`` of it replaced by ``new``; None where ``old`` is no view of
    ``base`` (a ``to`` or ``contiguous`` that copied: writes into the copy stay there)."""
    producer = old.producer if old is not None else None
    attrs: dict[str, Any] = {"role": "write_back"}
    if producer is None or producer.op not in (Op.RESHAPE, Op.PERMUTE, Op.SLICE, Op.EXPAND):
        return None
    if producer.op is Op.RESHAPE:
        op = Op.RESHAPE
    elif producer.op is Op.PERMUTE and "perm" in producer.attrs:
        perm = tuple(producer.attrs["perm"])
        op, attrs["perm"] = Op.PERMUTE, tuple(perm.index(i) for i in range(len(perm)))
    else:
        op = Op.SCATTER
        attrs.update({"reduce": "none", IN_PLACE: 0})
    inputs = [new] if op is not Op.SCATTER else [base, new]
    return cx.emit(op, inputs, node, attrs, types=[base.type], bind=False, name=f"{node.name}_write").outputs[0]
