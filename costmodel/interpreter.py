"""The cost interpreter: one walk over the graph in topological order (JAX roofline style).

It binds every symbolic dim, hands each node to its cost rule with concrete shapes, recurses into
control-flow bodies, and tracks the last use of every buffer to find peak activation memory. Nodes
without a rule are collected as unmodeled (or raise, when ``strict``), never costed as zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from math import prod
from typing import cast

from ..errors import IRError, NarrowpipeError, ShapeError, UnsupportedOpError
from ..gcpause import paused_gc
from ..ir import Graph, Node, Op, OpGroup, Sym, TensorType, Value
from ..ir.dims import Dim
from ..ir.ops import storage_operand
from .cost import ZERO, Cost
from .costcache import GraphIndex, graph_index
from .dequant_fusion import weight_derived
from .experts import DEFAULT, ExpertBalance
from .limits import check_size_limits
from .opview import OpView
from .rules import RULES

__all__ = ["CostTable", "interpret", "ShapeBinder", "NegativeDimError", "op_cost", "peak_activation_bytes"]

_CONTROL_FLOW = (Op.IF, Op.LOOP, Op.SCAN)


class NegativeDimError(ShapeError):
    """A dim that evaluates below zero under the bindings: a size the program cannot have (a
    ``Conv1d(kernel=5)`` output ``seq - 4`` at ``seq=2``). Counting it would give negative FLOPs and
    bytes, so binding refuses. ``dim`` is the expression, ``size`` its value, ``at`` the bindings
    of its symbols."""

    def __init__(self, reason: str, *, dim: Dim, size: int, at: str, node: str | None = None,
                 op: str | None = None, file: str | None = None) -> None:
        super().__init__(reason, node=node, op=op, file=file)
        self.dim, self.size, self.at = dim, size, at


class ShapeBinder:
    """Evaluates symbolic shapes under one set of bindings, caching every distinct expression.

    A dim that comes out negative raises :class:`NegativeDimError` (0 stays legal: an empty tensor);
    :meth:`shape` names the node that produces the value."""

    def __init__(self, bindings: Mapping[str, int]) -> None:
        self.bindings = dict(bindings)
        self._dims: dict[Sym, int] = {}
        self._shapes: dict[tuple, tuple[int, ...]] = {}

    def shape(self, value: Value) -> tuple[int, ...]:
        try:
            return self.bind(value.type.shape)
        except NegativeDimError as exc:
            raise _named(exc, value) from None

    def bind(self, shape: tuple) -> tuple[int, ...]:
        hit = self._shapes.get(shape)
        if hit is not None:
            return hit
        out = []
        for d in shape:
            if isinstance(d, int):
                out.append(d)
            else:
                n = self._dims.get(d)
                if n is None:
                    n = d.evaluate(self.bindings)
                    self._dims[d] = n
                out.append(n)
        result = tuple(out)
        if result and min(result) < 0:
            raise self._negative(shape, result)
        self._shapes[shape] = result
        return result

    def _negative(self, shape: tuple, result: tuple[int, ...]) -> NegativeDimError:
        d, n = next((d, n) for d, n in zip(shape, result) if n < 0)
        names = sorted(d.symbols) if isinstance(d, Sym) else []
        at = ", ".join(f"{k}={self.bindings[k]}" for k in names if k in self.bindings)
        when = f" at {at}" if at else ""
        return NegativeDimError(f"dim {str(d)!r} is {n}{when}", dim=d, size=n, at=at)


def _named(exc: NegativeDimError, value: Value) -> NegativeDimError:
    """``exc`` told about the value it came from: the producing node, or the graph input."""
    when = f" at {exc.at}" if exc.at else ""
    node = value.producer
    if node is None:
        kind = value.kind.value
        return NegativeDimError(f"{kind} {value.name!r}: dim {str(exc.dim)!r} is {exc.size}{when}; "
                                f"a size cannot be negative", dim=exc.dim, size=exc.size, at=exc.at)
    return NegativeDimError(f"output dim {str(exc.dim)!r} is {exc.size}{when}; a size cannot be negative "
                            f"(a dim bound below what the model accepts?)", dim=exc.dim, size=exc.size,
                            at=exc.at, file=node.source.file or None, node=node.source.name or node.name,
                            op=node.source.op or node.label)   # the names the user's file has


@dataclass
class CostTable:
    """Per-node costs of one graph under one binding, plus what could not be costed."""

    graph: Graph
    bindings: dict[str, int]
    costs: dict[Node, Cost]
    shapes: dict[Value, tuple[int, ...]]
    unmodeled: list[Node] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    peak_activation_bytes: int = 0
    #: For each top-level If/Loop/Scan: its cost split by the groups of the ops in its bodies (times
    #: the trip count), so contractions inside a loop count as contractions, not as "other".
    body_groups: dict[Node, dict[OpGroup, Cost]] = field(default_factory=dict)
    #: Set when the graph was costed by class (:mod:`.costcache`): its index and each class's cost,
    #: so the report sums per class too.
    index: GraphIndex | None = None
    class_costs: list[Cost | None] = field(default_factory=list)
    #: The spread of routed rows over experts the grouped GEMMs were costed (and are timed) under.
    expert_balance: ExpertBalance = DEFAULT

    def total(self) -> Cost:
        total = ZERO
        for c in self.costs.values():
            total = total + c
        return total


def interpret(graph: Graph, bindings: Mapping[str, int], *, strict: bool = False,
              expert_balance: ExpertBalance = DEFAULT) -> CostTable:
    binder = ShapeBinder(bindings)
    table = CostTable(graph, dict(bindings), {}, {}, expert_balance=expert_balance)
    with paused_gc():  # the walk allocates a Cost and a shape per node and frees none
        index = graph_index(graph)
        if index.flat:
            _walk_classes(graph, index, binder, table, strict)
        else:
            _walk(graph, binder, table, strict, top=True)
            table.peak_activation_bytes = peak_activation_bytes(graph, table.shapes)
    check_size_limits(graph, table.shapes)
    return table


def _walk(graph: Graph, binder: ShapeBinder, table: CostTable, strict: bool, top: bool,
          groups: dict[OpGroup, Cost] | None = None) -> Cost:
    """Cost every node; with ``groups``, also accumulate the cost per op group (for bodies)."""
    shapes = table.shapes
    for v in graph.inputs:
        shapes[v] = binder.shape(v)
    for v in graph.weights:
        shapes[v] = binder.shape(v)
    total = ZERO
    for node in graph.nodes:
        for v in node.outputs:
            shapes[v] = binder.shape(v)
        inner: dict[OpGroup, Cost] | None = {} if node.op in _CONTROL_FLOW else None
        try:
            cost = _node_cost(node, binder, table, strict, inner)
        except NarrowpipeError:
            raise
        except Exception as exc:  # a rule fed an ill-formed node: name it rather than crash
            raise IRError(f"cannot cost node {node.name!r} ({node.label}, from {node.source.describe()}): "
                          f"{type(exc).__name__}: {exc}") from exc
        if top:
            table.costs[node] = cost
            if inner is not None:
                table.body_groups[node] = inner
        if groups is not None:
            for g, c in (inner or {node.group: cost}).items():
                groups[g] = groups.get(g, ZERO) + c
        total = total + cost
    return total


def _walk_classes(graph: Graph, index: GraphIndex, binder: ShapeBinder, table: CostTable, strict: bool) -> None:
    """The walk of a graph without control flow, one rule call per class of equal nodes (the
    first node of each class, in order, so errors name the same node as the plain walk)."""
    try:
        bound = {s: binder.bind(s) for s in index.shapes}
    except NegativeDimError:
        for v in index.values:   # in program order: name the first value with the negative dim
            binder.shape(v)
        raise
    by_id = [bound[s] for s in index.shapes]
    table.shapes = dict(zip(index.values, map(by_id.__getitem__, index.value_shape)))
    nodes = graph.nodes
    class_costs: list[Cost | None] = [None] * len(index.counts)
    alone: dict[int, Cost] = {}
    for i in index.cost_points:   # in node order: an error names the node the plain walk would
        node = nodes[i]
        try:
            cost = _node_cost(node, binder, table, strict)
        except NarrowpipeError:
            raise
        except Exception as exc:  # a rule fed an ill-formed node: name it rather than crash
            raise IRError(f"cannot cost node {node.name!r} ({node.label}, from {node.source.describe()}): "
                          f"{type(exc).__name__}: {exc}") from exc
        c = index.node_class[i]
        if c >= 0:
            class_costs[c] = cost
        else:
            alone[i] = cost
    costed = cast("list[Cost]", class_costs)   # every class's first node is a cost point
    if alone:
        table.costs = {node: costed[c] if c >= 0 else alone[i]
                       for i, (node, c) in enumerate(zip(nodes, index.node_class))}
    else:
        table.costs = dict(zip(nodes, map(costed.__getitem__, index.node_class)))
    table.unmodeled = [nodes[i] for i in index.unmodeled_at]   # in node order, as the plain walk lists them
    table.index = index
    table.class_costs = class_costs
    table.peak_activation_bytes = index.peak_activation_bytes(bound)


def _node_cost(node: Node, binder: ShapeBinder, table: CostTable, strict: bool,
               groups: dict[OpGroup, Cost] | None = None) -> Cost:
    op = node.op
    if op in _CONTROL_FLOW:
        return _control_flow_cost(node, binder, table, strict, groups if groups is not None else {})
    rule = RULES.get(op)
    if rule is None:
        if strict:
            raise UnsupportedOpError(f"no cost rule for {node.label!r}", node=node.source.name or node.name,
                                     op=node.label, file=node.source.file or None)
        table.unmodeled.append(node)
        return ZERO
    shapes = table.shapes
    view = OpView(node, [None if v is None else shapes.get(v) or binder.shape(v) for v in node.inputs],
                  [shapes[v] for v in node.outputs], table.expert_balance)
    return rule(view)


def _control_flow_cost(node: Node, binder: ShapeBinder, table: CostTable, strict: bool,
                       groups: dict[OpGroup, Cost]) -> Cost:
    """If: the costlier branch. Loop/Scan: the body times its trip count (once if unknown, noted).
    ``groups`` receives the cost split by the groups of the body's ops."""
    attrs = node.attrs
    if node.op is Op.IF:
        branches = [attrs[k] for k in ("then_branch", "else_branch") if isinstance(attrs.get(k), Graph)]
        walked = []
        for b in branches:
            split: dict[OpGroup, Cost] = {}
            walked.append((_walk(b, binder, table, strict, top=False, groups=split), split))
        if not walked:
            return ZERO
        cost, split = max(walked, key=lambda cs: (cs[0].flops, cs[0].bytes))
        if len(walked) == 2 and walked[0][0] != walked[1][0]:
            table.notes.append(f"if {node.name!r}: the condition is read at run time; the costlier branch "
                               f"counted ({cost.flops:,} FLOPs, {cost.bytes:,} bytes)")
        groups.update(split)
        return cost
    body = attrs.get("body")
    if not isinstance(body, Graph):
        table.unmodeled.append(node)
        return ZERO
    split = {}
    cost = _walk(body, binder, table, strict, top=False, groups=split)
    trips = attrs.get("trip_count")
    if isinstance(trips, str):
        name, trips = trips, binder.bindings.get(trips)
        spec = table.graph.dims.get(name)
        if name.endswith("_trips") and spec is not None and trips is not None and trips == spec.default:
            table.notes.append(f"{node.op.value} {node.name!r}: trip count read at run time, body counted "
                               f"{trips} time(s), the default of {name} ({spec.doc}); bind it with "
                               f"--set {name}=N")
    if node.op is Op.SCAN and trips is None:
        axis_len = attrs.get("scan_length")
        trips = axis_len if isinstance(axis_len, int) else None
    if not isinstance(trips, int) or trips < 0:
        trips = binder.bindings.get(f"{node.name}_trips")   # the user's count, read before any note
        if trips is None:
            table.notes.append(f"{node.op.value} {node.name!r}: trip count unknown, body counted once "
                               f"(bind it with --set {node.name}_trips=N)")
            trips = 1
    groups.update({g: c.scaled(int(trips)) for g, c in split.items()})
    return cost.scaled(int(trips))


def peak_activation_bytes(graph: Graph, shapes: Mapping[Value, tuple[int, ...]]) -> int:
    """Peak bytes of live activations (inputs included, weights excluded) from last uses.

    Views alias the storage of their first input and ``in_place`` ops that of the operand they update
    (``relu_`` gets no buffer of its own); a storage is freed after the last node reading any of its
    aliases, unless it backs a graph output.
    """
    storage: dict[Value, Value] = {}  # value -> the value owning its storage
    size: dict[Value, int] = {}
    end: dict[Value, int] = {}
    n = len(graph.nodes)
    for v in graph.inputs:
        storage[v] = v
        size[v] = v.type.dtype.nbytes(prod(shapes[v]))
        end[v] = -1
    weights = set(graph.weights) | weight_derived(graph)   # a dequantized weight is fused, never stored
    starts: dict[Value, int] = {}
    for i, node in enumerate(graph.nodes):
        for operand in node.inputs:
            if operand is None or operand in weights:
                continue
            sid = storage.get(operand)
            if sid is not None and end.get(sid, -1) < i:
                end[sid] = i
        if node.outputs and node.outputs[0] in weights:
            continue
        shared = storage_operand(node.op, node.attrs)
        base = node.inputs[shared] if shared is not None and shared < len(node.inputs) else None
        for v in node.outputs:
            if base is not None and base in storage:
                storage[v] = storage[base]
            else:
                storage[v] = v
                size[v] = v.type.dtype.nbytes(prod(shapes[v]))
                starts[v] = i
                end.setdefault(v, i)
    for v in graph.outputs:
        sid = storage.get(v)
        if sid is not None:
            end[sid] = n
    frees: dict[int, int] = {}
    for sid, e in end.items():
        frees[e] = frees.get(e, 0) + size.get(sid, 0)
    live = sum(size[v] for v in graph.inputs)
    peak = live
    allocs: dict[int, int] = {}
    for sid, s in starts.items():
        allocs[s] = allocs.get(s, 0) + size[sid]
    live -= frees.get(-1, 0)
    for i in range(n):
        live += allocs.get(i, 0)
        peak = max(peak, live)
        live -= frees.get(i, 0)
    return peak



def op_cost(op: Op, inputs: list[TensorType], outputs: list[TensorType],
            attrs: Mapping[str, object] | None = None) -> Cost:
    """The cost rule's verdict for one op on concrete types, for callers that measure a single op
    (calibration records what each microbenchmark did in the same units as every report)."""
    g = Graph(op.value)
    node = g.add_node(op, [g.add_input(f"in{i}", t) for i, t in enumerate(inputs)], outputs, attrs)
    g.set_outputs(node.outputs)
    return interpret(g, {}, strict=True).costs[node]
