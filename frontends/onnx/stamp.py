"""Lowering a node signature once and stamping its IR nodes for every node that repeats it.

Why: a model repeats one block per layer, so a 100,000-node graph has a few dozen distinct node
signatures (op, opset, attributes, present outputs, input types, known input values). For a
lowering that is a pure function of the signature (it reads only attributes, input types, known
values and output types, and only emits nodes), the nodes it emits are the same for every node of
the signature but for the names, the source and the operand values. The first node of a signature
is lowered as usual while a :class:`Recorder` notes what it emits (op, which operands, attributes,
output types); every later one replays that :class:`Recipe` straight onto the graph.

Lowerings declare themselves pure with :func:`pure`; one that does anything else through its
:class:`~.node.NodeCx` (binds a value itself, adds a weight, settles its own types, lowers a body)
spoils its recording and is lowered node by node as before. Folded nodes and nodes with symbolic
known inputs are never stamped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import NodeProto

from ...ir import Graph, Node, Op, Source, TensorType, Value

if TYPE_CHECKING:
    from .node import NodeCx, Scope

__all__ = ["pure", "PURE", "Recipe", "Recorder", "stamp", "node_signature"]

#: After-stamp hook: (the lowerer, the scope, the node's operand values, its input names).
Hook = Callable[[Any, "Scope", list["Value | None"], list[str]], None]

#: The pure lowerings, each with the hook to run after stamping it (None: none).
PURE: dict[Callable[[NodeCx], None], Hook | None] = {}


def pure(fn: Callable[[NodeCx], None], *, after: Hook | None = None) -> Callable[[NodeCx], None]:
    """Declare ``fn`` a pure lowering (see the module docstring); ``after`` is what it does
    besides emitting (a stamped node runs it too). Returns ``fn``."""
    PURE[fn] = after
    return fn


def node_signature(key: str, opset: int, node: NodeProto, ins: list[str], outs: list[str],
                   values: list[Value | None], known: Callable[[str], np.ndarray | None]) -> tuple | None:
    """What a node's output types and a pure lowering's nodes follow from: op, opset,
    attributes, which outputs are present, input types, which inputs are the same value and
    known input values; None when a
    known input is symbolic (it has no exact key). Input types enter by identity: the caller
    keeps them alive while the key is in use (frontends share type objects)."""
    held: list[Any] | None = None
    for k, x in enumerate(ins):
        arr = known(x) if x else None
        if arr is not None:
            if arr.dtype == object:
                return None
            if held is None:
                held = []
            held.append((k, arr.dtype.str, arr.shape, arr.tobytes()))
    attrs = node.attribute
    return (key, opset, tuple([a.SerializeToString() for a in attrs]) if attrs else (),
            tuple([bool(o) for o in outs]), tuple([0 if v is None else id(v.type) for v in values]),
            tuple([values.index(v) for v in values]) if len(values) > 1 else (),   # x * x is not x * y
            tuple(held) if held is not None else ())


#: One emitted node: op, operand references (>= 0: the ONNX input slot; < 0: ``-1 - (step << 8 |
#: output)``, an output of an earlier step; None: an absent operand), attrs, output types, whether
#: its outputs are the ONNX node's outputs, and its name suffix.
Step = tuple[Op, tuple[int | None, ...], dict[str, Any] | None, list[TensorType], bool, str]


class Recipe:
    """What a pure lowering emitted for one signature, and its after-stamp hook."""

    __slots__ = ("steps", "after", "types")

    def __init__(self, steps: list[Step], after: Hook | None, types: tuple) -> None:
        self.steps = steps
        self.after = after
        self.types = types   # the signature's input types, alive while the recipe is (their ids key it)


class Recorder:
    """Notes what one NodeCx emits (see :meth:`~.node.NodeCx.emit`); ``valid`` is cleared by
    anything a recipe cannot replay."""

    __slots__ = ("steps", "made", "valid")

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.made: list[Node] = []
        self.valid = True

    def record(self, cx: NodeCx, node: Node, inputs: list[Value | None], attrs: dict[str, Any] | None,
               types: list[TensorType], bind: bool, suffix: str, out_names: list[str] | None) -> None:
        if not self.valid:
            return
        if not bind and out_names is not None or len(self.made) > 255 or len(node.outputs) > 256:
            self.valid = False
            return
        refs: list[int | None] = []
        for v in inputs:
            ref = _ref(v, cx.values, self.made)
            if ref is False:
                self.valid = False
                return
            refs.append(ref if ref is not None else None)
        self.steps.append((node.op, tuple(refs), dict(attrs) if attrs else None, list(types), bind, suffix))
        self.made.append(node)


def _ref(v: Value | None, values: list[Value | None], made: list[Node]) -> int | None | bool:
    if v is None:
        return None
    for i, x in enumerate(values):
        if x is v:
            return i
    for j, node in enumerate(made):
        for k, out in enumerate(node.outputs):
            if out is v:
                return -1 - (j << 8 | k)
    return False   # a value from elsewhere (a weight the lowering made): not replayable


def stamp(recipe: Recipe, graph: Graph, values: list[Value | None], name: str, source: Source,
          present: list[str], target: dict[str, Value]) -> None:
    """Replay ``recipe`` for one node: its IR nodes onto ``graph``, its outputs bound in ``target``."""
    made: list[Node] = []
    add = graph.add_node
    for op, refs, attrs, types, bind, suffix in recipe.steps:
        ins = [None if r is None else values[r] if r >= 0 else made[(-1 - r) >> 8].outputs[(-1 - r) & 255]
               for r in refs]
        node = add(op, ins, types, attrs, name=f"{name}_{suffix}" if suffix else name, source=source,
                   out_names=present if bind else None)
        if bind:
            for n, v in zip(present, node.outputs):
                target[n] = v
        made.append(node)
