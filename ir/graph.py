"""The dataflow graph: values typed by :class:`TensorType`, nodes holding one canonical op each.

Kept small and Pythonic (onnx-ir style, no protobuf): a :class:`Graph` owns its inputs, weights,
nodes in topological order and outputs. Nodes carry where they came from (:class:`Source`) so errors
and reports can point at the user's model, and an optional :class:`Placement` so the planner can
put every node on devices of a mesh. Control-flow ops keep their bodies as nested graphs in attrs.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import IRError
from .dims import Shape
from .dtypes import DType
from .ops import Op, OpGroup
from .roles import DimRole, names_with_role, role_size
from .types import TensorType

__all__ = ["ValueKind", "Value", "Node", "Graph", "Source", "Placement", "DimSpec"]


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


@dataclass(frozen=True, slots=True)
class DimSpec:
    """A symbolic dim of the graph: its default value (e.g. the export's example size), range and role."""

    name: str
    default: int | None = None
    min: int | None = None
    max: int | None = None
    doc: str = ""
    role: DimRole = DimRole.OTHER


class Value:
    """An SSA value: a graph input, a weight, or the ``index``-th output of ``producer``."""

    __slots__ = ("name", "type", "kind", "producer", "index", "source_name")

    def __init__(self, name: str, type: TensorType, kind: ValueKind = ValueKind.ACTIVATION,
                 producer: Node | None = None, index: int = 0, source_name: str = "") -> None:
        self.name = name
        self.type = type
        self.kind = kind
        self.producer = producer
        self.index = index
        self.source_name = source_name or name

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def shape(self) -> Shape:
        return self.type.shape

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


class Node:
    """One canonical op applied to input values, producing output values."""

    __slots__ = ("name", "op", "inputs", "outputs", "attrs", "source", "placement")

    def __init__(self, name: str, op: Op, inputs: Iterable[Value | None], outputs: Iterable[Value],
                 attrs: Mapping[str, Any] | None = None, source: Source | None = None,
                 placement: Placement | None = None) -> None:
        self.name = name
        self.op = op
        self.inputs: list[Value | None] = list(inputs)
        self.outputs: list[Value] = list(outputs)
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.source = source or Source()
        self.placement = placement

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
        names = list(out_names) if out_names is not None else []
        for i, t in enumerate(out_types):
            base = names[i] if i < len(names) else (node.name if i == 0 else f"{node.name}.{i}")
            node.outputs.append(Value(self.fresh_name(base), t, ValueKind.ACTIVATION, node, i))
        self.nodes.append(node)
        self.version += 1
        return node

    def set_outputs(self, values: Iterable[Value]) -> None:
        self.outputs = list(values)
        self.version += 1

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

    def dims_with_role(self, role: DimRole) -> list[str]:
        """Names of the declared dims with ``role`` (what planners bind instead of matching names)."""
        return names_with_role(self.dims.values(), role)

    def role_size(self, role: DimRole, bindings: Mapping[str, int] | None = None) -> int:
        """The size of ``role`` under ``bindings`` (else defaults): a product over its dims, 1 if none."""
        return role_size(self.dims.values(), role, bindings)

    def __repr__(self) -> str:
        return (f"Graph({self.name!r}: {len(self.inputs)} inputs, {len(self.weights)} weights, "
                f"{len(self.nodes)} nodes, {len(self.outputs)} outputs)")


def node_subgraphs(node: Node) -> list[Graph]:
    """Nested graphs held in a node's attrs (bodies of If/Loop/Scan)."""
    out: list[Graph] = []
    for v in node.attrs.values():
        if isinstance(v, Graph):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(x for x in v if isinstance(x, Graph))
    return out
