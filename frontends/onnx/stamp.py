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

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import NodeProto

from ...ir import Graph, Node, Op, Source, TensorType, Value
from .fold import FOLDERS, FROM_TYPE
from .node_names import module_scope, node_scope, source_op

if TYPE_CHECKING:
    from .lowering import OnnxLowerer
    from .node import NodeCx, Scope
    from .read import NodeFields

__all__ = ["pure", "PURE", "Recipe", "Recorder", "lower_stamped", "node_signature"]

#: After-stamp hook: (the lowerer, the scope, the node's operand values, its input names).
Hook = Callable[[Any, "Scope", list["Value | None"], list[str]], None]

#: The pure lowerings, each with the hook to run after stamping it (None: none).
PURE: dict[Callable[[NodeCx], None], Hook | None] = {}


def pure(fn: Callable[[NodeCx], None], *, after: Hook | None = None) -> Callable[[NodeCx], None]:
    """Declare ``fn`` a pure lowering (see the module docstring); ``after`` is what it does
    besides emitting (a stamped node runs it too). Returns ``fn``."""
    PURE[fn] = after
    return fn


def node_signature(key: str, opset: int, attrs: Any, ins: list[str], outs: list[str],
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
    return (key, opset, tuple([a.SerializeToString() for a in attrs]) if attrs else (),
            tuple([bool(o) for o in outs]) if "" in outs else len(outs),
            tuple([0 if v is None else id(v.type) for v in values]),
            tuple([values.index(v) for v in values]) if len(values) > 1 else (),   # x * x is not x * y
            tuple(held) if held is not None else ())


#: One emitted node: op, operand references (>= 0: the ONNX input slot; < 0: ``-1 - (step << 8 |
#: output)``, an output of an earlier step; None: an absent operand), attrs, output types, whether
#: its outputs are the ONNX node's outputs, and its name suffix.
Step = tuple[Op, tuple[int | None, ...], dict[str, Any] | None, list[TensorType], bool, str]


class Recipe:
    """What a pure lowering emitted for one signature, and its after-stamp hook."""

    __slots__ = ("steps", "after", "types", "single")

    def __init__(self, steps: list[Step], after: Hook | None, types: tuple) -> None:
        self.steps = steps
        self.after = after
        self.types = types   # the signature's input types, alive while the recipe is (their ids key it)
        op, refs, attrs, out_types, bind, suffix = steps[0]
        #: The common recipe, one node over the ONNX node's inputs in order that is the ONNX node:
        #: its op, attrs and output types (None: replay the steps).
        self.single = (op, attrs, out_types) if len(steps) == 1 and bind and not suffix and \
            refs == tuple(range(len(types))) else None


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


def lower_stamped(lw: OnnxLowerer, nodes: Sequence[NodeProto], fields: list[NodeFields], scope: Scope,
                  graph: Graph) -> None:
    """Lower the top-level graph's nodes, stamping every node whose signature has a recipe and
    handing the others to :meth:`~.lowering.OnnxLowerer.lower_node` (which records new recipes).

    Why a loop of its own: at 100,000 nodes every step per node counts, so the stamped path reads
    the node's fields, keys it and replays it here, with no NodeCx and no per-node call into the
    lowerer."""
    stamps = lw.stamps
    assert stamps is not None and scope.parent is None
    table, opsets, file = lw.table, lw.info.opsets, lw.info.file
    lower_node = lw.lower_node
    target = scope.values
    lookup, known = target.get, scope.known.get
    add = graph.add_node
    scopes: dict[str, str] = {}
    #: per (domain, op type): its table key, source op, opset, whether its lowering is pure, and
    #: 0 (never folded), 1 (folded when every input is known) or 2 (always folded)
    kinds: dict[str | tuple[str, str], tuple[str, str, int, bool, int]] = {}
    for i, (node, row) in enumerate(zip(nodes, fields)):
        op_type, domain, given, ins, outs, attrs = row
        kind = kinds.get((domain, op_type) if domain else op_type)
        if kind is None:
            key = op_type if not domain else f"{domain}::{op_type}"
            folds = 0 if domain or op_type not in FOLDERS else 2 if op_type in FROM_TYPE else 1
            kind = (key, source_op(domain, op_type), opsets.get(domain, 1), table.get(key) in PURE, folds)
            kinds[(domain, op_type) if domain else op_type] = kind
        key, op_name, opset, is_pure, folds = kind
        if not is_pure or folds == 2:
            lower_node(node, i, scope, graph, fields=row)
            continue
        values = list(map(lookup, ins))   # lookup("") is None: an absent optional input
        if None in values and any(x and v is None for x, v in zip(ins, values)):
            lower_node(node, i, scope, graph, fields=row)   # an undefined input: its error, or a sort
            continue
        sig = node_signature(key, opset, attrs, ins, outs, values, known)
        # a folded node (every input known: its known values are the last part of the key) is lowered alone
        recipe = stamps.get(sig) if sig is not None and not (folds and len(sig[-1]) == len(ins) - ins.count("")) \
            else None
        if recipe is None:
            lower_node(node, i, scope, graph, fields=row)
            continue
        name = given or f"{op_type}_{i}"
        if node.metadata_props:                      # a dynamo export: the module stack is there
            module = node_scope(node, given)
        else:
            path = given.rpartition("/")[0]
            cached = scopes.get(path)
            if cached is None:
                cached = scopes[path] = module_scope(given)
            module = cached
        source = Source(op_name, name, module, file)
        present = [o for o in outs if o] if "" in outs else outs
        single = recipe.single
        if single is not None:
            made_node = add(single[0], values, single[2], single[1], name=name, source=source, out_names=present)
            for n, v in zip(present, made_node.outputs):
                target[n] = v
            if recipe.after is not None:
                recipe.after(lw, scope, values, ins)
            continue
        made: list[Node] = []
        for op, refs, attrs, types, bind, suffix in recipe.steps:
            made_node = add(op, [None if r is None else values[r] if r >= 0 else
                                 made[(-1 - r) >> 8].outputs[(-1 - r) & 255] for r in refs],
                            types, attrs, name=f"{name}_{suffix}" if suffix else name, source=source,
                            out_names=present if bind else None)
            if bind:
                for n, v in zip(present, made_node.outputs):
                    target[n] = v
            made.append(made_node)
        if recipe.after is not None:
            recipe.after(lw, scope, values, ins)
