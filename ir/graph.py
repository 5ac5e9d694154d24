"""The dataflow graph: values typed by :class:`TensorType`, nodes holding one canonical op each.

Kept small and Pythonic (onnx-ir style, no protobuf): a :class:`Graph` owns its inputs, weights,
nodes in topological order and outputs. Nodes carry where they came from (:class:`Source`) so errors
and reports can point at the user's model, and an optional :class:`Placement` so the planner can
put every node on devices of a mesh. Control-flow ops keep their bodies as nested graphs in attrs.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..errors import IRError
from .dim_spec import DimSpec
from .dims import Shape
from .dtypes import DType
from .ops import Op, OpGroup
from .roles import DimRole, names_with_role, role_size
from .types import TensorType

__all__ = ["ValueKind", "Value", "Node", "Graph", "Source", "Placement", "DimSpec", "Use"]


class ValueKind(enum.Enum):
    INPUT = "input"          # a user input of the program
    PARAM = "param"          # a trainable parameter (counted in ``params``)
    BUFFER = "buffer"        # persistent non-trainable state (running stats, rotary tables)
    CONST = "const"          # a constant tensor baked into the program
    ACTIVATION = "activation"  # produced by a node

    @property
    def is_weight(self) -> bool:
        return self in (ValueKind.PARAM, ValueKind.BUFFER, ValueKind.CONST)


@dataclass(frozen=True, slots=True)
class Source:
    """Where a node came from: the source op, its node name, module scope and file."""

    op: str = ""
    name: str = ""
    scope: str = ""
    file: str = ""

    def describe(self) -> str:
        parts = [p for p in (self.file, self.scope, self.name, self.op) if p]
        return " / ".join(parts)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a node runs: device ids, and how its output is sharded over named mesh axes.

    ``sharding`` maps an output dim index to the mesh axis it is split over; an empty mapping means
    replicated. Planning passes fill this in; single-device analysis leaves it ``None``.
    """

    devices: tuple[int, ...] = (0,)
    mesh_axes: tuple[str, ...] = ()
    sharding: tuple[tuple[int, str], ...] = ()
    stage: int | None = None


class Use(NamedTuple):
    """One read of a value: input ``index`` of ``node``."""

    node: Node
    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose (python/mypy#4507)


_new_use = tuple.__new__   # Use(node, i) without the NamedTuple's Python-level __new__ (hot)


class Value:
    """An SSA value: a graph input, a weight, or the ``index``-th output of ``producer``.

    ``uses`` lists every node input that reads it (nested bodies included), kept current by the
    graph's mutation API, so rewrites find consumers without rescanning the program.
    """

    __slots__ = ("name", "type", "kind", "producer", "index", "source_name", "uses")

    def __init__(self, name: str, type: TensorType, kind: ValueKind = ValueKind.ACTIVATION,
                 producer: Node | None = None, index: int = 0, source_name: str = "") -> None:
        self.name = name
        self.type = type
        self.kind = kind
        self.producer = producer
        self.index = index
        self.source_name = source_name or name
        self.uses: list[Use] = []

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def shape(self) -> Shape:
        return self.type.shape

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


class Node:
    """One canonical op applied to input values, producing output values.

    ``inputs`` is a tuple: inputs change only through :meth:`Graph.set_input` (or
    :meth:`Graph.replace_all_uses`), which keep the use-lists and the graph version current.
    ``owner`` is the graph the node was added to (a nested body for control-flow bodies).
    """

    __slots__ = ("name", "op", "_inputs", "outputs", "attrs", "source", "placement", "owner")

    def __init__(self, name: str, op: Op, inputs: Iterable[Value | None], outputs: Iterable[Value],
                 attrs: Mapping[str, Any] | None = None, source: Source | None = None,
                 placement: Placement | None = None) -> None:
        self.name = name
        self.op = op
        self._inputs: tuple[Value | None, ...] = tuple(inputs)
        self.outputs: list[Value] = list(outputs)
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.source = source or Source()
        self.placement = placement
        self.owner: Graph | None = None

    @property
    def inputs(self) -> tuple[Value | None, ...]:
        return self._inputs

    @property
    def group(self) -> OpGroup:
        return self.op.group

    @property
    def label(self) -> str:
        """The name users know: the source op when the node is unmodeled, else the canonical op."""
        if self.op is Op.UNKNOWN:
            return str(self.attrs.get("source_op") or self.source.op or "unknown")
        return self.op.value

    def __repr__(self) -> str:
        return f"Node({self.name}: {self.op.value})"


class Graph:
    """A program: inputs and weights flow through nodes (kept in topological order) to outputs."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.inputs: list[Value] = []
        self.weights: list[Value] = []
        self.nodes: list[Node] = []
        self.outputs: list[Value] = []
        self.dims: dict[str, DimSpec] = {}
        self.meta: dict[str, Any] = {}
        self._names: set[str] = set()
        self.version = 0

    # -- building -------------------------------------------------------------------------------
    def fresh_name(self, base: str) -> str:
        """A value/node name unique in this graph, derived from ``base``."""
        name = base or "v"
        if name not in self._names:
            self._names.add(name)
            return name
        i = 1
        while f"{name}_{i}" in self._names:
            i += 1
        name = f"{name}_{i}"
        self._names.add(name)
        return name

    def add_input(self, name: str, type: TensorType, kind: ValueKind = ValueKind.INPUT,
                  source_name: str = "") -> Value:
        value = Value(self.fresh_name(name), type, kind, source_name=source_name or name)
        (self.weights if kind.is_weight else self.inputs).append(value)
        self.version += 1
        return value

    def add_node(self, op: Op, inputs: Iterable[Value | None], out_types: Iterable[TensorType],
                 attrs: Mapping[str, Any] | None = None, *, name: str = "",
                 source: Source | None = None, out_names: Iterable[str] | None = None) -> Node:
        """Append a node (callers add in topological order) and create its output values."""
        if not isinstance(op, Op):
            raise IRError(f"not a canonical op: {op!r}")
        node = Node(self.fresh_name(name or op.value), op, inputs, (), attrs, source)
        names = out_names if out_names is None or isinstance(out_names, (list, tuple)) else list(out_names)
        n_names = len(names) if names is not None else 0
        for i, t in enumerate(out_types):
            base = names[i] if i < n_names else (node.name if i == 0 else f"{node.name}.{i}")  # type: ignore[index]
            node.outputs.append(Value(self.fresh_name(base), t, ValueKind.ACTIVATION, node, i))
        self.nodes.append(node)
        node.owner = self
        for i, v in enumerate(node._inputs):
            if v is not None:
                v.uses.append(_new_use(Use, (node, i)))
        self.version += 1
        return node

    def set_outputs(self, values: Iterable[Value]) -> None:
        self.outputs = list(values)
        self.version += 1

    # -- mutation (every change bumps ``version`` so cached analyses are dropped) ---------------
    def _touch(self, node: Node | None = None) -> None:
        self.version += 1
        if node is not None and node.owner is not None and node.owner is not self:
            node.owner.version += 1

    def set_input(self, node: Node, index: int, value: Value | None) -> None:
        """Make input ``index`` of ``node`` read ``value``, keeping both use-lists current."""
        old = node.inputs[index]
        if old is value:
            return
        if old is not None:
            old.uses.remove(Use(node, index))
        if value is not None:
            value.uses.append(Use(node, index))
        node._inputs = node._inputs[:index] + (value,) + node._inputs[index + 1:]
        self._touch(node)

    def set_attr(self, node: Node, key: str, value: Any) -> None:
        """Set an attribute through the graph so analyses that read attributes are recomputed."""
        node.attrs[key] = value
        self._touch(node)

    def replace_all_uses(self, old: Value, new: Value) -> int:
        """Point every reader of ``old`` (nested bodies and graph outputs included) at ``new``."""
        if old is new:
            return 0
        uses = list(old.uses)
        for use in uses:
            self.set_input(use.node, use.index, new)
        replaced = len(uses)
        if any(v is old for v in self.outputs):
            self.outputs = [new if v is old else v for v in self.outputs]
            replaced += 1
        self._touch()
        return replaced

    def remove_unread(self, candidates: list[Node]) -> None:
        """Remove each of ``candidates`` once nothing reads it (a rewrite's replaced nodes; one
        still read elsewhere, or producing a graph output, stays)."""
        pending, changed = [n for n in dict.fromkeys(candidates) if n.owner is self], True
        while changed:
            done = [n for n in pending if all(not v.uses and v not in self.outputs for v in n.outputs)]
            for n in done:
                self.remove(n)
                pending.remove(n)
            changed = bool(done)

    def remove(self, node: Node) -> None:
        """Delete ``node``; refused while any of its outputs is still read or is a graph output."""
        if node.owner is not self or node not in self.nodes:
            raise IRError(f"node {node.name!r} ({node.op.value}) is not in graph {self.name!r}")
        for v in node.outputs:
            if v.uses or any(o is v for o in self.outputs):
                users = ", ".join(sorted({u.node.name for u in v.uses})) or "graph outputs"
                raise IRError(f"cannot remove node {node.name!r} ({node.op.value}): output "
                              f"{v.name!r} is still used by {users}")
        for i, operand in enumerate(node.inputs):
            if operand is not None:
                operand.uses.remove(Use(node, i))
        for sub in node_subgraphs(node):
            _unlink_body(sub)
        self.nodes.remove(node)
        node.owner = None
        self._touch()

    def clone(self) -> Graph:
        """A deep copy: fresh values, nodes and nested bodies with the same names, types and attrs.

        Values from enclosing graphs that a nested body reads stay shared (they are not ours)."""
        return _clone(self, {})

    def save(self, path: Any) -> Any:
        """Write narrowpipe JSON, which ``narrowpipe.load(path)`` reads back whole: export once with
        torch or ONNX, analyze anywhere without them. See :func:`.serialize.save_json`."""
        from .serialize import save_json
        return save_json(self, path)

    def declare_dim(self, spec: DimSpec) -> None:
        self.dims[spec.name] = spec
        self.version += 1

    # -- queries --------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def values(self) -> Iterator[Value]:
        yield from self.inputs
        yield from self.weights
        for node in self.nodes:
            yield from node.outputs

    def symbols(self) -> frozenset[str]:
        """Every symbolic dim name used by any value of the graph (and nested graphs)."""
        out: set[str] = set()
        for v in self.values():
            out |= v.type.symbols
        for node in self.nodes:
            for sub in node_subgraphs(node):
                out |= sub.symbols()
        return frozenset(out)

    def users(self) -> dict[Value, list[Node]]:
        """Map each value to the nodes that read it, in program order."""
        uses: dict[Value, list[Node]] = {}
        for node in self.nodes:
            for v in node.inputs:
                if v is not None:
                    uses.setdefault(v, []).append(node)
        return uses

    def param_count(self) -> int:
        """Elements in trainable parameters (what ``sum(p.numel() for p in m.parameters())`` gives)."""
        bindings = self.default_bindings()
        return sum(v.type.numel(bindings) for v in self.weights if v.kind is ValueKind.PARAM)

    def default_bindings(self) -> dict[str, int]:
        return {name: spec.default for name, spec in self.dims.items() if spec.default is not None}

    def dims_with_role(self, role: DimRole | str) -> list[str]:
        """Names of the declared dims with ``role`` (or its name): what planners bind, never names."""
        return names_with_role(self.dims.values(), role)

    def role_size(self, role: DimRole | str, bindings: Mapping[str, int] | None = None) -> int:
        """The size of ``role`` under ``bindings`` (else defaults): a product over its dims, 1 if none."""
        return role_size(self.dims.values(), role, bindings)

    def __repr__(self) -> str:
        return (f"Graph({self.name!r}: {len(self.inputs)} inputs, {len(self.weights)} weights, "
                f"{len(self.nodes)} nodes, {len(self.outputs)} outputs)")


def _unlink_body(graph: Graph) -> None:
    """Drop the uses a removed control-flow body held on values of enclosing graphs."""
    for node in graph.nodes:
        for i, v in enumerate(node.inputs):
            if v is not None and Use(node, i) in v.uses:
                v.uses.remove(Use(node, i))
        for sub in node_subgraphs(node):
            _unlink_body(sub)


def _clone(graph: Graph, env: dict[Value, Value]) -> Graph:
    out = Graph(graph.name)
    out.dims = dict(graph.dims)
    out.meta = copy.deepcopy(graph.meta)
    out._names = set(graph._names)
    for src, dst in ((graph.inputs, out.inputs), (graph.weights, out.weights)):
        for v in src:
            env[v] = Value(v.name, v.type, v.kind, source_name=v.source_name)
            dst.append(env[v])
    for node in graph.nodes:
        new = Node(node.name, node.op, [None if v is None else env.get(v, v) for v in node.inputs], (),
                   _clone_attr(node.attrs, env), node.source, node.placement)
        for v in node.outputs:
            env[v] = Value(v.name, v.type, v.kind, new, v.index, v.source_name)
            new.outputs.append(env[v])
        out.nodes.append(new)
        new.owner = out
        for i, operand in enumerate(new.inputs):
            if operand is not None:
                operand.uses.append(Use(new, i))
    out.outputs = [env.get(v, v) for v in graph.outputs]
    return out


def _clone_attr(value: Any, env: dict[Value, Value]) -> Any:
    if isinstance(value, Graph):
        return _clone(value, dict(env))   # a body sees the enclosing graph's values
    if isinstance(value, Value):
        return env.get(value, value)
    if isinstance(value, dict):
        return {k: _clone_attr(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_clone_attr(v, env) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_clone_attr(v, env) for v in value)
    return copy.deepcopy(value)


def node_subgraphs(node: Node) -> list[Graph]:
    """Nested graphs held in a node's attrs (bodies of If/Loop/Scan)."""
    out: list[Graph] = []
    for v in node.attrs.values():
        if isinstance(v, Graph):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(x for x in v if isinstance(x, Graph))
    return out
