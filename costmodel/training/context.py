"""What a gradient rule writes with: the training graph, the forward node it differentiates, and the
map from forward values to the copies recomputation made of them.

Why one object: every node of the backward must carry its phase, keep the module scope of the forward
node it serves (reports group ``model.layers.*.mlp.down_proj`` forward and backward alike), and read a
recomputed copy of a saved value where recomputation made one, so that liveness sees what is really
kept. Rules ask this context for all three instead of each rule knowing about phases or
recomputation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import IRError
from ...ir import DType, Graph, Node, Op, Source, TensorType, Value
from ...ir.dims import Shape
from .phases import BACKWARD, PHASE

__all__ = ["GradContext", "Grads"]

#: What a rule returns: one gradient per input of the forward node (None: none, or not wanted).
Grads = list[Value | None]


class GradContext:
    """Emits the nodes of one phase into ``graph`` on behalf of ``self.node`` (the forward node)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.phase = BACKWARD
        self.node: Node | None = None
        self.source = Source()
        #: forward value -> its recomputed copy (what the backward reads instead of a saved value)
        self.remap: dict[Value, Value] = {}
        #: labels of the forward nodes some of whose gradients no rule gave (an ``UNKNOWN`` node
        #: stands in): a rule may cover an op's usual form and not another, so the op having a rule
        #: does not make its backward modeled, and the step lists these too
        self.unmodeled: set[str] = set()

    # -- whose node we are writing ----------------------------------------------------------------
    def serve(self, node: Node | None, source: Source | None = None) -> None:
        """The forward node the next emitted nodes differentiate (names and scope follow it)."""
        self.node = node
        if source is not None:
            self.source = source
        elif node is not None:
            s = node.source
            self.source = Source(op=f"{s.op or node.op.value}.backward", name=s.name or node.name,
                                 scope=s.scope, file=s.file)

    def val(self, v: Value) -> Value:
        """The copy of forward value ``v`` the backward reads (recomputed, else the saved original)."""
        return self.remap.get(v, v)

    # -- emitting ---------------------------------------------------------------------------------
    def emit_types(self, op: Op, inputs: Sequence[Value | None], types: Sequence[TensorType],
                   attrs: Mapping[str, Any] | None = None, *, name: str = "") -> list[Value]:
        base = name or op.value
        if self.node is not None and not name.startswith(self.node.name):
            base = f"{self.node.name}_{base}"
        node = self.graph.add_node(op, inputs, types, {**(attrs or {}), PHASE: self.phase}, name=base,
                                   source=self.source)
        return list(node.outputs)

    def emit(self, op: Op, inputs: Sequence[Value | None], shape: Shape, dtype: DType,
             attrs: Mapping[str, Any] | None = None, *, name: str = "") -> Value:
        return self.emit_types(op, inputs, [TensorType(dtype, tuple(shape))], attrs, name=name)[0]

    def like(self, op: Op, inputs: Sequence[Value | None], model: Value, attrs: Mapping[str, Any] | None = None,
             *, name: str = "") -> Value:
        """One output typed like ``model`` (most gradients have their operand's type)."""
        return self.emit(op, inputs, model.shape, model.dtype, attrs, name=name)

    def scaled(self, x: Value, scalar: float, *, name: str = "scale") -> Value:
        return self.like(Op.MUL, [x], x, {"scalar": scalar}, name=name)

    # -- fitting a gradient to its operand ---------------------------------------------------------
    def fit(self, g: Value, target: Value) -> Value:
        """``g`` summed over the dims ``target`` was broadcast along, in ``target``'s dtype."""
        out = self.unbroadcast(g, target.shape)
        if out.dtype is not target.dtype:
            out = self.emit(Op.CAST, [out], out.shape, target.dtype, {"to": target.dtype.value}, name="grad_cast")
        return out

    def unbroadcast(self, g: Value, shape: Shape, axis: int | None = None) -> Value:
        """``g`` summed back to ``shape``: numpy broadcasting aligns an operand's dims to the right,
        an elementwise node's ``axis`` (a bias added along the channels, ``[N, C, H, W] + [C]``)
        aligns them from that axis (summing a conv bias's gradient over the last dims gave
        ``[1, 1, 1, W]`` where the bias has ``C`` elements)."""
        gs, ts = tuple(g.shape), tuple(shape)
        if gs == ts:
            return g
        lead = len(gs) - len(ts)
        if lead < 0:
            where = self.node.name if self.node is not None else "?"
            raise IRError(f"gradient {g.name!r} of node {where!r} has rank {len(gs)}, below its operand's "
                          f"{len(ts)}: cannot sum it back to the operand's shape")
        start = lead
        if axis is not None and 0 <= axis + (len(gs) if axis < 0 else 0) <= lead:
            start = axis + (len(gs) if axis < 0 else 0)
        span = range(start, start + len(ts))
        axes = [i for i in range(len(gs)) if i not in span or (ts[i - start] == 1 and gs[i] != 1)]
        out = g
        if axes:
            kept = tuple(1 if i in axes else d for i, d in enumerate(gs))
            out = self.emit(Op.REDUCE_SUM, [g], kept, g.dtype, {"axes": tuple(axes), "keepdims": True},
                            name="grad_sum")
        if tuple(out.shape) != ts:
            out = self.emit(Op.RESHAPE, [out], ts, out.dtype, name="grad_view")
        return out

    def add(self, a: Value, b: Value) -> Value:
        """Accumulate two gradients of one value (it had two readers)."""
        return self.like(Op.ADD, [a, b], a, name="grad_acc")
