"""Where the lowerings ask :class:`~.masks.CausalMasks` whether a mask is causal.

Why a module of its own: :mod:`.masks` proves a mask causal by evaluating its subgraph; these hooks
decide when a node is worth asking about (a ``Softmax`` after an ``Add``/``Where``, an attention op
with a mask and no causal flag), with cheap filters so that most nodes never trigger a walk.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from onnx import NodeProto

from ...ir import CAUSAL, DType, Op, Value
from ..mask_pattern import Band, band_attrs
from .masks import _DEFAULT_DOMAINS, CausalMasks

if TYPE_CHECKING:
    from .lowering import OnnxLowerer
    from .node import NodeCx, Scope

__all__ = ["tag_mask_step", "tag_mask_input", "attention_mask_band"]


def _masks_of(cx: NodeCx) -> CausalMasks | None:
    """The model's mask test, for nodes of the top-level graph only (a body may read outer names,
    and the nodes a function expands into are not in the graph)."""
    return _masks_in(cx.lw, cx.scope)


def _masks_in(lw: OnnxLowerer, scope: Scope) -> CausalMasks | None:
    masks: CausalMasks | None = getattr(lw, "masks", None)
    if masks is None or scope.parent is not None:
        return None
    if masks.ir_value is None:
        masks.ir_value = scope.value   # the top-level scope: every ancestor is lowered by now
    return masks


def _may_mask(v: Value | None, *, ints: bool = False) -> bool:
    """A cheap filter before any walk: masks are boolean or float (or integer, for onnxruntime's
    ``mask_index``) tensors of rank 2 or more."""
    if v is None or v.type.rank < 2:
        return False
    dt = v.type.dtype
    return dt is DType.BOOL or dt.is_float or (ints and dt.is_int)


def tag_mask_step(cx: NodeCx) -> None:
    """For a ``Softmax``: when its input is an ``Add``/``Where`` with a causal mask operand (eager
    attention's mask step), mark the IR node of that add/where :data:`~narrowpipe.ir.CAUSAL` (and its
    :data:`~narrowpipe.ir.WINDOW`, for a sliding-window mask) so the fused attention kernel skips the
    masked blocks (:mod:`narrowpipe.costmodel.execution.gemm`)."""
    tag_mask_input(cx.lw, cx.scope, cx.values, cx.ins)


def tag_mask_input(lw: OnnxLowerer, scope: Scope, values: list[Value | None], ins: list[str]) -> None:
    """:func:`tag_mask_step` from the node's parts (what a stamped Softmax runs, :mod:`.stamp`)."""
    x = values[0] if values else None
    if x is None or x.producer is None or not ins:
        return
    ir = x.producer
    if ir.op not in (Op.ADD, Op.WHERE) or ir.attrs.get(CAUSAL):
        return
    masks = _masks_in(lw, scope)
    if masks is None:
        return
    node = masks.producer(ins[0])
    if node is None or node.domain not in _DEFAULT_DOMAINS or node.op_type not in ("Add", "Where"):
        return
    if len(node.input) != len(ir.inputs):
        return   # not the plain one-node lowering (an input is missing)
    band = _causal_operand(masks, node, ir.inputs)
    if band is not None:
        ir.attrs.update(band_attrs(band))


def _causal_operand(masks: CausalMasks, node: NodeProto, operands: Iterable[Value | None]) -> Band | None:
    """The band of an operand of the mask step that is a causal mask, the likely mask tested first (the
    second addend: ``scores + mask``; the condition of a where), so that a shared mask already
    proved causal answers before the walk up the scores side."""
    ops = list(operands)
    pairs = list(zip(node.input, ops))
    for name, v in reversed(pairs) if node.op_type == "Add" else pairs:
        band = masks.band(name, v) if name and _may_mask(v) else None
        if band is not None:
            return band
    if node.op_type == "Where" and len(ops) == 3 and _may_mask(ops[0]) and ops[0] is not None \
            and ops[0].type.dtype is DType.BOOL and ops[1] is not None and ops[1].type.is_one_element:
        return masks.band(node.input[0], ops[0], inverted=True)   # masked_fill(mask, fill): True blocks
    return None


def attention_mask_band(cx: NodeCx, *indices: int, nonzero: bool = False) -> Band | None:
    """The band of the first of an attention op's mask inputs ``indices`` that is a causal mask, else
    None (the caller checks the op's own causal flag first). ``nonzero`` for onnxruntime's integer
    ``mask_index``."""
    masks = _masks_of(cx)
    if masks is None:
        return None
    for i in indices:
        band = masks.band(cx.ins[i], cx.input(i), nonzero=nonzero) \
            if i < len(cx.ins) and cx.ins[i] and _may_mask(cx.input(i), ints=nonzero) else None
        if band is not None:
            return band
    return None
