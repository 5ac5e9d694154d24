"""What a lowering function sees of one ONNX node: :class:`NodeCx`.

It mirrors the torch frontend's ``AtenLowerer`` helpers: inputs as IR values, attributes, small
known input tensors, resolved output types, and ``emit`` to add canonical nodes that keep the
ONNX node's source (``domain::OpType``, node name, file).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, NodeProto, TensorProto

from ...errors import FrontendError, ShapeError
from ...ir import DType, Graph, Node, Op, Source, TensorType, Value, ValueKind
from ...ir.window_checks import check_window
from .fold_values import as_ints
from .node_names import module_scope, node_scope, source_op
from .read import NodeFields
from .shapes import OutSpec
from .stamp import Recorder, node_signature
from .symdims import Poly, to_dim
from .types import small_array

if TYPE_CHECKING:
    from .lowering import OnnxLowerer

__all__ = ["NodeCx", "Scope", "ModelInfo", "attr_value", "module_scope", "source_op"]


@dataclass
class ModelInfo:
    file: str
    opsets: dict[str, int]
    opset_protos: list[onnx.OperatorSetIdProto]
    ir_version: int
    strict: bool = False
    params: dict[str, tuple[ValueKind, str]] = field(default_factory=dict)
    sorted: bool = False  # the nodes were put in topological order by us (a missing input is an error)


class Scope:
    """Names visible in one graph: its own values, known small tensors and ONNX types, then outer."""

    __slots__ = ("values", "known", "types", "parent", "proto")

    def __init__(self, types: dict[str, onnx.TypeProto], parent: Scope | None = None,
                 proto: GraphProto | None = None) -> None:
        self.values: dict[str, Value] = {}
        self.known: dict[str, np.ndarray] = {}
        self.types = types
        self.parent = parent
        self.proto = proto   # the graph being lowered: rules that read a value's consumers look here

    # One loop per table rather than one generic lookup by table name: these run several times per
    # node, and the top-level scope (no parent) answers from its own dict.
    def value(self, name: str) -> Value | None:
        """``name`` in this scope, else in the enclosing scopes (ONNX subgraphs see outer names)."""
        s: Scope | None = self
        while s is not None:
            v = s.values.get(name)
            if v is not None:
                return v
            s = s.parent
        return None

    def known_value(self, name: str) -> np.ndarray | None:
        s: Scope | None = self
        while s is not None:
            v = s.known.get(name)
            if v is not None:
                return v
            s = s.parent
        return None

    def type_of(self, name: str) -> onnx.TypeProto | None:
        s: Scope | None = self
        while s is not None:
            v = s.types.get(name)
            if v is not None:
                return v
            s = s.parent
        return None


def attr_value(a: AttributeProto) -> Any:
    t = a.type
    if t == AttributeProto.INT:
        return a.i
    if t == AttributeProto.FLOAT:
        return a.f
    if t == AttributeProto.STRING:
        return a.s.decode("utf-8", "replace")
    if t == AttributeProto.INTS:
        return list(a.ints)
    if t == AttributeProto.FLOATS:
        return list(a.floats)
    if t == AttributeProto.STRINGS:
        return [s.decode("utf-8", "replace") for s in a.strings]
    if t == AttributeProto.TENSOR:
        return a.t
    if t == AttributeProto.GRAPH:
        return a.g
    if t == AttributeProto.GRAPHS:
        return list(a.graphs)
    if t == AttributeProto.TENSORS:
        return list(a.tensors)
    if t == AttributeProto.SPARSE_TENSOR:
        return a.sparse_tensor
    return None


class NodeCx:
    """One ONNX node being lowered: its inputs as IR values, attributes, known inputs and types."""

    __slots__ = ("lw", "node", "op_type", "domain", "name", "opset", "scope", "graph", "source", "key",
                 "folded", "ins", "outs", "present", "values", "_attrs", "_types", "recorder")

    def __init__(self, lw: OnnxLowerer, node: NodeProto, index: int, scope: Scope, graph: Graph,
                 opset: int, source: Source | None, fields: NodeFields) -> None:
        # ``fields`` are the node's fields already read (:func:`.read.node_fields`): each protobuf
        # field read builds new Python objects, so none is read again here.
        self.lw = lw
        self.node = node
        op_type, domain, given, ins, outs, _attrs = fields
        self.op_type = op_type
        self.domain = domain
        self.key = op_type if not domain else f"{domain}::{op_type}"
        name = self.name = given or f"{op_type}_{index}"
        self.opset = opset
        self.scope = scope
        self.graph = graph
        self.source = source or Source(source_op(domain, op_type), name, node_scope(node, given), lw.info.file)
        self.folded: list[np.ndarray] | None = None
        self.ins = ins
        self.outs = outs
        self.present: list[str] = [o for o in outs if o]
        lookup = scope.values.get if scope.parent is None else scope.value  # the top graph sees only itself
        self.values: list[Value | None] = [lookup(x) if x else None for x in ins]
        self._attrs: dict[str, AttributeProto] | None = None
        self._types: list[TensorType] | None = None
        self.recorder: Recorder | None = None   # set while a pure lowering's first node is recorded (.stamp)

    @property
    def file(self) -> str:
        return self.lw.info.file

    def signature(self) -> tuple | None:
        """See :func:`.stamp.node_signature`."""
        scope = self.scope
        return node_signature(self.key, self.opset, self.node.attribute, self.ins, self.outs, self.values,
                              scope.known.get if scope.parent is None else scope.known_value)

    # -- attributes -------------------------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        if self._attrs is None:
            self._attrs = {a.name: a for a in self.node.attribute}
        a = self._attrs.get(name)
        if a is None:
            return default
        v = attr_value(a)
        return default if v is None else v

    def attr_array(self, name: str) -> np.ndarray | None:
        t = self.attr(name)
        return small_array(t) if isinstance(t, TensorProto) else None

    # -- inputs -----------------------------------------------------------------------------
    def n_inputs(self) -> int:
        return len(self.ins)

    def n_outputs(self) -> int:
        return len(self.outs)

    def input(self, i: int) -> Value | None:
        return self.values[i] if i < len(self.values) else None

    def inputs(self, *idx: int) -> list[Value]:
        """The present inputs among ``idx`` (all inputs when none given), in order."""
        if not idx:
            return [v for v in self.values if v is not None]
        return [v for v in (self.input(i) for i in idx) if v is not None]

    def known(self, i: int) -> np.ndarray | None:
        if i >= len(self.ins) or not self.ins[i]:
            return None
        return self.scope.known_value(self.ins[i])

    def known_ints(self, i: int) -> list[int] | None:
        return as_ints(self.known(i))

    def shape(self, i: int) -> tuple[Any, ...] | None:
        v = self.input(i)
        return None if v is None else v.type.shape

    def dtype(self, i: int) -> DType | None:
        v = self.input(i)
        return None if v is None else v.type.dtype

    def rank(self, i: int) -> int:
        v = self.input(i)
        if v is None:
            raise ShapeError(f"input {i} is missing", file=self.file or None, node=self.name, op=self.source.op)
        return v.type.rank

    def is_sequence(self, i: int) -> bool:
        """Whether input ``i`` is an ONNX sequence (held in the IR as its elements stacked)."""
        if i >= len(self.ins) or not self.ins[i]:
            return False
        tp = self.scope.type_of(self.ins[i])
        return tp is not None and tp.WhichOneof("value") == "sequence_type"

    # -- outputs ----------------------------------------------------------------------------
    def present_outputs(self) -> list[str]:
        return self.present

    def out_types(self) -> list[TensorType]:
        """Types of the present outputs: ONNX's inference, repaired by our own rules."""
        if self._types is None:
            self._types = self.lw.resolve(self)
        return self._types

    def out_type_at(self, k: int) -> TensorType | None:
        """The type of ONNX output ``k`` (None when that optional output is absent)."""
        if k >= len(self.outs) or not self.outs[k]:
            return None
        return self.out_types()[sum(1 for o in self.outs[:k] if o)]

    def out_type(self, k: int) -> TensorType:
        """The type of ONNX output ``k``, which must be present (see :meth:`has_output`)."""
        t = self.out_type_at(k)
        if t is None:
            raise self.error(f"output {k} is absent")
        return t

    def has_output(self, k: int) -> bool:
        return k < len(self.outs) and bool(self.outs[k])

    def settle(self, own: list[OutSpec | None], *, override: bool = False) -> list[TensorType]:
        """Output types from specs the lowering computed itself (control flow), merged with ONNX's;
        with ``override`` the specs' dims win (sequences, which the IR stacks into one tensor)."""
        self._spoil()
        self._types = self.lw.resolve(self, own, override=override)
        return self._types

    def emit(self, op: Op, inputs: Iterable[Value | None], attrs: dict[str, Any] | None = None,
             types: list[TensorType] | None = None, *, bind: bool = True, suffix: str = "",
             out_names: list[str] | None = None) -> Node:
        """Add a canonical node for this ONNX node; by default its outputs are the node's outputs."""
        out_types = self.out_types() if types is None else types
        inputs = list(inputs)
        if op in _NEEDS_DATA:
            _check_operands(self, op, inputs, attrs or {})
        ir = self.graph.add_node(op, inputs, out_types, attrs, name=f"{self.name}_{suffix}" if suffix else self.name,
                                 source=self.source, out_names=self.present if bind else out_names)
        if op in (Op.CONV, Op.POOL):   # the types came from ONNX or the file: hold them to the window rule
            problems = check_window(ir)
            if problems:
                raise self.error("; ".join(problems), ShapeError)
        if bind:
            self._bind(ir.outputs)
        if self.recorder is not None:
            self.recorder.record(self, ir, inputs, attrs, out_types, bind, suffix, out_names)
        return ir

    def _spoil(self) -> None:
        """The lowering did something a recipe cannot replay (.stamp)."""
        if self.recorder is not None:
            self.recorder.valid = False

    def bind(self, values: list[Value]) -> None:
        self._spoil()
        self._bind(values)

    def _bind(self, values: list[Value]) -> None:
        names = self.present
        if len(values) < len(names):
            raise self.error(f"lowering produced {len(values)} values for {len(names)} outputs")
        target = self.scope.values
        for name, v in zip(names, values):
            target[name] = v

    def bind_at(self, k: int, value: Value) -> None:
        """Make ``value`` ONNX output ``k``."""
        self._spoil()
        self.scope.values[self.outs[k]] = value

    def tensor(self, dtype: DType, shape: Iterable[Any]) -> TensorType:
        return TensorType(dtype, tuple(to_dim(d) if isinstance(d, Poly) else d for d in shape))

    def add_weight(self, name: str, type: TensorType, kind: ValueKind, source_name: str = "") -> Value:
        self._spoil()
        return self.graph.add_input(name, type, kind, source_name=source_name or name)

    def lower_body(self, attr: str, input_types: list[TensorType | None]) -> Graph:
        """Lower the subgraph in attribute ``attr`` as a nested graph that sees this scope."""
        self._spoil()
        g = self.attr(attr)
        if not isinstance(g, GraphProto):
            raise self.error(f"attribute {attr!r} is not a graph")
        body = Graph(f"{self.name}.{attr}")
        self.lw.lower_graph(g, body, self.scope, top=False, input_types=input_types)
        return body

    def error(self, reason: str, cls: type[FrontendError] = FrontendError) -> FrontendError:
        return cls(reason, file=self.file or None, node=self.name, op=self.source.op)


#: Canonical ops whose cost rules read their first operand(s): lowering checks they are there
#: (a malformed file must fail here, with its node, not inside a cost rule).
_NEEDS_DATA: dict[Op, int] = {op: 1 for op in Op if op.group.value in ("reduction", "normalization")}
_NEEDS_DATA.update({Op.SORT: 1, Op.UNIQUE: 1, Op.TOPK: 1, Op.NONZERO: 1, Op.POOL: 1, Op.FFT: 1, Op.NMS: 1,
                    Op.DOT: 2, Op.CONV: 2, Op.ATTENTION: 3})


def _check_operands(cx: NodeCx, op: Op, inputs: list[Value | None], attrs: dict[str, Any]) -> None:
    need = _NEEDS_DATA[op]
    if len(inputs) < need or any(v is None for v in inputs[:need]):
        raise cx.error(f"{op.value} needs {need} operand(s), the node provides {len(inputs)}", ShapeError)
    if op is Op.ATTENTION:
        q, k, v = inputs[0], inputs[1], inputs[2]
        assert q is not None and k is not None and v is not None
        want = 3 if attrs.get("layout") == "bsd" else 4
        if (q.type.rank, k.type.rank, v.type.rank) != (want, want, want):
            raise cx.error(f"attention needs rank-{want} query, key and value, got ranks "
                           f"{q.type.rank}, {k.type.rank}, {v.type.rank}", ShapeError)
        if want == 3 and (int(attrs.get("num_heads", 0)) <= 0 or int(attrs.get("kv_num_heads", 1)) <= 0):
            raise cx.error("attention needs positive num_heads and kv_num_heads", ShapeError)
    elif op is Op.NMS:
        boxes = inputs[0]
        assert boxes is not None
        if boxes.type.rank != 3 or (len(inputs) > 1 and inputs[1] is not None and inputs[1].type.rank != 3):
            raise cx.error("NonMaxSuppression needs rank-3 boxes and scores", ShapeError)
    elif op is Op.CONV:
        x, w = inputs[0], inputs[1]
        assert x is not None and w is not None
        if x.type.rank < 3 or w.type.rank != x.type.rank:
            raise cx.error(f"convolution input rank {x.type.rank} and weight rank {w.type.rank} do not fit", ShapeError)
