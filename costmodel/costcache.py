"""What analysis computes once per graph, so that each binding of the dims costs little.

Why: a lowered model repeats a handful of node signatures thousands of times (every layer is the
same block), and a cost rule is a pure function of the op, its attrs, its input and output types
and which of its inputs are the same value (:meth:`~.opview.OpView.all_in_bytes` reads a value
once). So a graph is indexed once into classes of nodes with equal signatures; each ``analyze``
then runs each rule once per class, binds each distinct symbolic shape once, and finds peak memory
from a liveness schedule worked out once. The index is cached per graph and rebuilt when
``Graph.version`` moves (a node, input or output added). A caller that edits a node in place after
analysing its graph (passes return new graphs instead) calls :func:`forget`.

Graphs with control flow (If/Loop/Scan) keep the plain walk: their bodies are costed per trip.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from math import prod
from typing import Any
from weakref import WeakKeyDictionary

import numpy as np

from ..gcpause import paused_gc
from ..ir import IN_PLACE, VIEW_OPS, Graph, Node, Op, Shape, TensorType, Value, node_subgraphs
from ..ir.ops import storage_operand
from ..ir.shapes import shape_symbols
from .dequant_fusion import weight_derived
from .rules import RULES

__all__ = ["GraphIndex", "graph_index", "forget", "node_signature", "freeze_attrs", "trip_count_names", "paused_gc"]

CONTROL_FLOW = frozenset({Op.IF, Op.LOOP, Op.SCAN})

#: Plain values whose equality is exact; tagged with their type so ``True``, ``1`` and ``1.0``
#: (equal and equally hashed in Python) never share a key.
_SCALARS = (bool, int, float, str, bytes, type(None))


class _Unhashable(Exception):
    """An attr value with no exact hashable form (an array, a graph): its node is costed alone."""


_SCALAR_TYPES = frozenset(_SCALARS)
_UNSEEN = object()


def _freeze(v: Any) -> Hashable:
    t = type(v)
    if t in _SCALAR_TYPES:
        return (t, v)
    if t is list or t is tuple:
        types = tuple(map(type, v))
        if _SCALAR_TYPES.issuperset(types):   # the common case (perm, axes): no recursion
            return (t, types, tuple(v))
        return (t, tuple(map(_freeze, v)))
    if t is dict:
        return (t, tuple((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, Graph):
        raise _Unhashable
    try:
        hash(v)
    except TypeError:
        raise _Unhashable from None
    return (t, v)


def freeze_attrs(attrs: Mapping[str, Any]) -> Hashable | None:
    """A hashable key equal only for attrs a rule cannot tell apart, or None when there is none
    (an array, a nested graph)."""
    if not attrs:
        return ()
    try:
        return tuple((k, _freeze(v)) for k, v in attrs.items())
    except _Unhashable:
        return None


def node_signature(node: Node, type_id: Mapping[Value, int] | None = None) -> tuple | None:
    """Everything a cost rule reads of ``node``: op, attrs, input/output types and which inputs
    repeat a value. None when the attrs have no exact key (the node is then costed on its own).
    ``type_id`` (id of a value -> number of its distinct type) spares hashing each type again."""
    akey = freeze_attrs(node.attrs)
    if akey is None:
        return None
    ins = node.inputs
    if len(ins) > 1:
        aliasing: tuple[int, ...] = tuple(ins.index(v) for v in ins)
    else:
        aliasing = ()
    if type_id is None:
        return (node.op, akey, tuple(None if v is None else v.type for v in ins), aliasing,
                tuple(v.type for v in node.outputs))
    return (node.op, akey, tuple(None if v is None else type_id.get(v, v.type) for v in ins), aliasing,
            tuple(type_id[v] for v in node.outputs))


def trip_count_names(graph: Graph) -> set[str]:
    """Loop trip counts given by name: optional dims (a loop counts once, with a note, if unbound)."""
    out: set[str] = set()
    for node in graph.nodes:
        trips = node.attrs.get("trip_count")
        if isinstance(trips, str):
            out.add(trips)
        for sub in node_subgraphs(node):
            out |= trip_count_names(sub)
    return out


@dataclass
class GraphIndex:
    """One graph's analysis skeleton: symbols, node classes, distinct shapes and liveness."""

    version: int
    n_nodes: int
    symbols: frozenset[str]
    trip_names: set[str]
    #: No control flow: the class path applies (else every field below is empty).
    flat: bool
    #: Inputs, weights, then node outputs in order (the interpreter's order), and the index of
    #: each one's symbolic shape in ``shapes``.
    values: list[Value]
    value_shape: list[int]
    shapes: list[Shape]
    #: Per node, its class (-1: costed alone); per class, whether its op has no rule and how many
    #: nodes it has.
    node_class: list[int]
    no_rule: list[bool]
    counts: list[int]
    #: Liveness: per storage its type; the types of the graph inputs; per node index the
    #: storages allocated there; per free point (-1 .. n) the storages freed there.
    storage_types: list[TensorType]
    input_storages: list[int]
    allocs: list[tuple[int, ...]]
    frees: dict[int, list[int]]
    #: The nodes a re-bind costs by rule (the first of each class, each node costed alone) and the
    #: nodes whose op has no rule (listed as unmodeled), by position, in order.
    cost_points: list[int] = field(default_factory=list)
    unmodeled_at: list[int] = field(default_factory=list)

    #: The kernel partition of each fusion mode (:func:`..kernels.fuse`): which nodes run as one
    #: kernel depends on the graph's structure, never on the bound dims, so a serving plan's hundreds
    #: of bindings partition once (fuse was ~40% of a GPU capacity plan); the kernels' classes too
    #: (:func:`.execution.routing._shared_classes`).
    partitions: dict[Hashable, Any] = field(default_factory=dict, repr=False, compare=False)
    #: The liveness above as arrays, built on the first peak query (:meth:`_live_arrays`).
    _live: tuple[list[TensorType], np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = \
        field(default=None, repr=False, compare=False)

    def peak_activation_bytes(self, bound: Mapping[Shape, tuple[int, ...]]) -> int:
        """Peak bytes of live activations under one binding (``bound``: each symbolic shape of
        ``shapes`` to its value), as ``interpreter.peak_activation_bytes`` finds them.

        Why arrays: a re-bind of a 100,000-node graph walked 100,000 storages in Python. Storages
        are numbered in allocation order, so the live bytes after node ``i`` allocates are a prefix
        sum of allocations less a prefix sum of frees; sizes come from the few distinct storage
        types, and sums stay exact in int64 (checked, else the walk below)."""
        kinds, kind_of, alloc_end, free_order, free_end = self._live_arrays()
        kind_size = [t.dtype.nbytes(prod(bound[t.shape])) for t in kinds]
        if not kind_size or max(kind_size) * max(len(kind_of), 1) >= 1 << 62:
            return self._peak_walk(bound)
        sizes = np.asarray(kind_size, dtype=np.int64)[kind_of]
        cum_alloc = np.concatenate(([0], np.cumsum(sizes)))
        cum_free = np.concatenate(([0], np.cumsum(sizes[free_order])))
        peak = int(cum_alloc[len(self.input_storages)])
        if len(alloc_end):
            peak = max(peak, int((cum_alloc[alloc_end] - cum_free[free_end]).max()))
        return peak

    def _live_arrays(self) -> tuple[list[TensorType], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Distinct storage types, each storage's type, per node the storages allocated up to it,
        the freed storages in order of their free point, and per node those freed before it."""
        if self._live is None:
            kinds: list[TensorType] = []
            kind_ids: dict[TensorType, int] = {}
            by_identity: dict[int, int] = {}
            kind_of = np.empty(len(self.storage_types), dtype=np.int64)
            for sid, t in enumerate(self.storage_types):
                k = by_identity.get(id(t))
                if k is None:
                    k = by_identity[id(t)] = kind_ids.setdefault(t, len(kinds))
                    if k == len(kinds):
                        kinds.append(t)
                kind_of[sid] = k
            counts = np.fromiter((len(a) for a in self.allocs), dtype=np.int64, count=len(self.allocs))
            alloc_end = len(self.input_storages) + np.cumsum(counts)
            points = sorted(e for e in self.frees if e < len(self.allocs))
            free_order = np.fromiter((sid for e in points for sid in self.frees[e]), dtype=np.int64)
            freed_by = np.zeros(len(self.allocs) + 1, dtype=np.int64)   # freed at point e, indexed e + 1
            for e in points:
                freed_by[e + 1] = len(self.frees[e])
            free_end = np.cumsum(freed_by)[:len(self.allocs)]   # node i: those freed at points -1 .. i - 1
            self._live = (kinds, kind_of, alloc_end, free_order, free_end)
        return self._live

    def _peak_walk(self, bound: Mapping[Shape, tuple[int, ...]]) -> int:
        """The same peak, storage by storage, in Python ints (sizes too large for int64 sums)."""
        sizes = [t.dtype.nbytes(prod(bound[t.shape])) for t in self.storage_types]
        live = sum(sizes[s] for s in self.input_storages)
        peak = live
        frees = self.frees
        live -= sum(sizes[s] for s in frees.get(-1, ()))
        for i, allocated in enumerate(self.allocs):
            for s in allocated:
                live += sizes[s]
            if live > peak:
                peak = live
            for s in frees.get(i, ()):
                live -= sizes[s]
        return peak


_INDEXES: WeakKeyDictionary[Graph, GraphIndex] = WeakKeyDictionary()


def graph_index(graph: Graph) -> GraphIndex:
    """The cached index of ``graph``, rebuilt when the graph has changed since."""
    index = _INDEXES.get(graph)
    if index is None or index.version != graph.version or index.n_nodes != len(graph.nodes):
        index = _INDEXES[graph] = _build(graph)
    return index


def forget(graph: Graph) -> None:
    """Drop the cached index of ``graph`` (after editing one of its nodes in place)."""
    _INDEXES.pop(graph, None)


def _build(graph: Graph) -> GraphIndex:
    with paused_gc():
        return _index(graph)


def _index(graph: Graph) -> GraphIndex:
    flat = not any(node.op in CONTROL_FLOW for node in graph.nodes)
    if not flat:
        return GraphIndex(graph.version, len(graph.nodes), graph.symbols(), trip_count_names(graph), False,
                          [], [], [], [], [], [], [], [], [], {})
    index = GraphIndex(graph.version, len(graph.nodes), frozenset(), set(), True,
                       [], [], [], [], [], [], [], [], [], {})
    _classify(graph, index)
    return index


def _classify(graph: Graph, index: GraphIndex) -> None:
    """Classes of nodes, distinct shapes, liveness, and (from them) the graph's symbols and trip
    counts, in one walk over the nodes.

    Why one walk: at 100,000 nodes each pass over the nodes costs tens of milliseconds in attribute
    reads alone, and the first analysis of a graph pays for all of them. The liveness part is the
    interpreter's last-use walk on storages instead of bytes (views alias their base).
    """
    values = index.values
    value_shape = index.value_shape
    shapes = index.shapes
    type_ids: dict[TensorType, int] = {}
    type_shape: list[int] = []     # per distinct type, its shape's number
    shape_ids: dict[Shape, int] = {}
    # Values share their type objects (frontends cache them): a lookup by identity spares hashing
    # the type (a dataclass hash over dtype and dims) for almost every value. Every value's type
    # is numbered before a node reads it (the walk is in order), and held by the value meanwhile.
    by_identity: dict[int, int] = {}

    def number(t: TensorType) -> int:
        k = type_ids.get(t)
        if k is None:
            k = type_ids[t] = len(type_shape)
            s = shape_ids.get(t.shape)
            if s is None:
                s = shape_ids[t.shape] = len(shapes)
                shapes.append(t.shape)
            type_shape.append(s)
        by_identity[id(t)] = k
        return k

    # Liveness state: value -> storage number, storage -> last reader.
    storage: dict[Value | None, int] = {}
    end: dict[int, int] = {}
    types = index.storage_types
    for v in graph.inputs:
        k = number(v.type)
        values.append(v)
        value_shape.append(type_shape[k])
        storage[v] = len(types)
        index.input_storages.append(len(types))
        end[len(types)] = -1
        types.append(v.type)
    for v in graph.weights:
        k = number(v.type)
        values.append(v)
        value_shape.append(type_shape[k])
    storage_of = storage.get
    allocs = index.allocs
    no_storage = weight_derived(graph)   # dequantized weights: fused into their GEMMs, never stored
    node_class = index.node_class
    counts = index.counts
    classes: dict[tuple, int] = {}
    known = by_identity.get
    views = VIEW_OPS
    scalar_types = _SCALAR_TYPES
    frozen: dict[tuple, Hashable | None] = {}
    no_rule, cost_points, unmodeled_at = index.no_rule, index.cost_points, index.unmodeled_at
    for i, node in enumerate(graph.nodes):
        ins = node._inputs   # the ``inputs`` property, without a call per node
        outs = node.outputs
        out_ids = []
        for v in outs:
            t = v.type
            hit = known(id(t))   # types are shared objects: identity first, then value equality
            k = number(t) if hit is None else hit
            out_ids.append(k)
            values.append(v)
            value_shape.append(type_shape[k])
        # -- class (the key of node_signature, built from the type numbers above)
        attrs = node.attrs
        if not attrs:
            akey: Hashable | None = ()
        else:
            # Frontends copy one attrs dict per node but share its values: attrs holding the very
            # same objects under the same keys freeze alike, so the frozen key is looked up by the
            # values' identities (all alive in the graph for the whole walk).
            held = (*attrs, *map(id, attrs.values()))
            akey = frozen.get(held, _UNSEEN)
            if akey is _UNSEEN:
                try:   # freeze_attrs, with its common case (scalar values) inline
                    akey = tuple([(k, (vt, v) if (vt := type(v)) in scalar_types else _freeze(v))
                                  for k, v in attrs.items()])
                except _Unhashable:
                    akey = None
                frozen[held] = akey
        op = node.op
        if akey is None:   # attrs with no exact key, perhaps a nested graph: its symbols count too
            node_class.append(-1)
            cost_points.append(i)
            if RULES.get(op) is None:
                unmodeled_at.append(i)
            for sub in node_subgraphs(node):
                index.symbols |= sub.symbols()
                index.trip_names |= trip_count_names(sub)
            _note_trips(node, index.trip_names)
        else:
            sig = (op, akey, tuple([None if v is None else known(id(v.type), v.type) for v in ins]),
                   tuple(map(ins.index, ins)) if len(ins) > 1 else (), tuple(out_ids))
            c = classes.get(sig)
            if c is None:
                c = classes[sig] = len(counts)
                counts.append(0)
                no_rule.append(RULES.get(op) is None)
                cost_points.append(i)
                _note_trips(node, index.trip_names)
            counts[c] += 1
            node_class.append(c)
            if no_rule[c]:
                unmodeled_at.append(i)
        # -- liveness
        for operand in ins:
            sid = storage_of(operand)   # None for weights and absent inputs
            if sid is not None:
                end[sid] = i   # the walk is in order: a read here is the latest so far
        if outs and outs[0] in no_storage:
            allocs.append(())
            continue
        shared = 0 if op in views else storage_operand(op, node.attrs) if IN_PLACE in node.attrs else None
        base = ins[shared] if shared is not None and shared < len(ins) else None
        if base is not None and base in storage:     # a view, or an in-place op's updated operand
            alias = storage[base]
            for v in outs:
                storage[v] = alias
            allocs.append(())
            continue
        allocated = []
        for v in outs:
            sid = storage[v] = len(types)
            types.append(v.type)
            allocated.append(sid)
            end[sid] = i
        allocs.append(tuple(allocated))
    n = len(graph.nodes)
    for v in graph.outputs:
        sid = storage.get(v)
        if sid is not None:
            end[sid] = n
    frees = index.frees
    for sid, e in end.items():
        frees.setdefault(e, []).append(sid)
    symbols: set[str] = set(index.symbols)
    for shape in shapes:
        symbols |= shape_symbols(shape)
    index.symbols = frozenset(symbols)


def _note_trips(node: Node, names: set[str]) -> None:
    trips = node.attrs.get("trip_count")
    if isinstance(trips, str):
        names.add(trips)
