"""Walks ONNX graphs (and their If/Loop/Scan bodies) and lowers each node through the ONNX table.

This module owns the mechanics: weights and inputs of each graph, the walk, folding of shape
tensors, and the error that names file, node and op when anything goes wrong. :mod:`.table`
owns what each ONNX op becomes, :mod:`.resolve` the output types; nothing here computes a cost.
Nodes are lowered in file order; a file whose nodes are not topologically sorted (ONNX requires
it, some tools do not comply) is sorted once and lowered again, so sorted files pay nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod

import onnx
from onnx import GraphProto, NodeProto, TensorProto

from ...errors import FrontendError, NarrowpipeError, ShapeError, UnsupportedOpError
from ...ir import Dim, Graph, Op, Source, TensorType, Value, ValueKind
from .fold import FOLDERS, FROM_TYPE, fold
from .masks import CausalMasks
from .node import ModelInfo, NodeCx, Scope
from .read import InitFields, NodeFields
from .resolve import resolve_types
from .shape_rules import SHAPE_RULES
from .shapes import OutSpec, ShapeState, graph_types
from .stamp import PURE, Recipe, Recorder, lower_stamped, node_signature
from .types import DTYPES, FOLD_LIMIT, check_payload, checked_dims, dtype_of, small_array

__all__ = ["OnnxLowerer", "Unordered"]

Lowering = Callable[[NodeCx], None]


class Unordered(Exception):
    """A node reads a name no earlier node defined: the file is not topologically sorted."""


class OnnxLowerer:
    """Lowers an ONNX model's graphs into one IR graph (with nested bodies for control flow)."""

    def __init__(self, info: ModelInfo, state: ShapeState, table: dict[str, Lowering],
                 rules: dict[str, Callable[[NodeCx], list[OutSpec | None]]] | None = None,
                 fallback: Callable[[NodeCx], bool] | None = None) -> None:
        self.info = info
        self.state = state
        self.table = table
        self.rules = {**SHAPE_RULES, **(rules or {})}
        self.fallback = fallback
        self.masks: CausalMasks | None = None  # causal-mask test of the top-level graph (.masks)
        #: Recipes of pure lowerings by node signature (.stamp); None: every node is lowered alone.
        self.stamps: dict[tuple, Recipe] | None = None

    # -- graphs -----------------------------------------------------------------------------
    def lower_graph(self, gproto: GraphProto, graph: Graph, parent: Scope | None, *, top: bool,
                    input_types: list[TensorType | None] | None = None,
                    fields: list[NodeFields] | None = None,
                    inits: list[tuple[InitFields, bool]] | None = None) -> list[Value]:
        """``fields``: :func:`.read.node_fields` of ``gproto`` when the caller has read them;
        ``inits``: its :func:`.read.initializer_fields`, each with whether inference saw it as a stub."""
        scope = Scope(graph_types(gproto), parent, gproto)
        if inits is None:
            external = TensorProto.EXTERNAL
            inits = [((t, t.name, t.data_type, tuple(t.dims), t.data_location == external), False)
                     for t in gproto.initializer]
        for f, stub in inits:
            self._add_initializer(f, stub, scope, graph, top)
        for t in gproto.sparse_initializer:
            self._add_sparse(t, scope, graph, top)
        for k, vi in enumerate(gproto.input):
            if scope.values.get(vi.name) is not None:
                continue  # old models list initializers among the inputs too
            forced = input_types[k] if input_types is not None and k < len(input_types) else None
            t = self.state.shared(forced or self._input_type(vi, scope))
            scope.values[vi.name] = graph.add_input(vi.name, t, ValueKind.INPUT, source_name=vi.name)
        if fields is None:
            for i, node in enumerate(gproto.node):
                self.lower_node(node, i, scope, graph)
        elif self.stamps is not None and parent is None:
            lower_stamped(self, gproto.node, fields, scope, graph)
        else:
            for i, (node, row) in enumerate(zip(gproto.node, fields)):
                self.lower_node(node, i, scope, graph, fields=row)
        outs: list[Value] = []
        for o in gproto.output:
            v = scope.value(o.name)
            if v is None:
                raise FrontendError(f"graph output {o.name!r} is not produced by any node, initializer or input",
                                    file=self.info.file or None, node=o.name)
            outs.append(v)
        graph.set_outputs(outs)
        return outs

    def _add_initializer(self, f: InitFields, stub: bool, scope: Scope, graph: Graph, top: bool) -> None:
        """``stub``: inference saw it without its payload (.shapes.weight_skeleton): it is dims only."""
        t, name, data_type, dims, external = f
        file = self.info.file or None
        if not name:
            raise FrontendError("an initializer has no name", file=file)
        dims = checked_dims(name, dims, file=self.info.file)
        dtype = DTYPES.get(data_type) or dtype_of(data_type, what=f"initializer {name!r}", file=file, node=name)
        if not (external or stub):
            check_payload(t, dims, dtype, self.info.file)
        kind, note = self.info.params.get(name, (ValueKind.CONST, "")) if top else (ValueKind.CONST, "")
        scope.values[name] = graph.add_input(name, self.state.tensor_type(dtype, dims), kind, source_name=note or name)
        n = prod(dims)
        if (n <= 64 or (n <= FOLD_LIMIT and dtype.is_int)) and not (external or stub):
            arr = small_array(t)
            if arr is not None:
                scope.known[name] = arr

    def _add_sparse(self, t: onnx.SparseTensorProto, scope: Scope, graph: Graph, top: bool) -> None:
        name = t.values.name
        dims = tuple(int(d) for d in t.dims)
        if any(d < 0 for d in dims):
            raise ShapeError(f"sparse initializer {name!r} has negative dims {list(dims)}", file=self.info.file or None)
        dtype = dtype_of(t.values.data_type, what=f"sparse initializer {name!r}", file=self.info.file or None)
        kind = ValueKind.PARAM if top and dtype.is_float and prod(dims) > 1 else ValueKind.CONST
        scope.values[name] = graph.add_input(name, TensorType(dtype, dims), kind)

    def _input_type(self, vi: onnx.ValueInfoProto, scope: Scope) -> TensorType:
        file = self.info.file or None
        raw = self.state.raw(scope.type_of(vi.name) or vi.type, vi.name)
        if raw is None or not raw[0]:
            raise ShapeError(f"graph input {vi.name!r} has no tensor type", file=file, node=vi.name)
        if raw[1] is None:
            raise ShapeError(f"graph input {vi.name!r} has no shape (its rank is unknown)", file=file, node=vi.name)
        dims: list[Dim] = []
        for axis, d in enumerate(raw[1]):
            if not isinstance(d, str):
                dims.append(d)
                continue
            known = self.state.subst.get(d) if d else None   # an unknown dim: the symbol it was given
            if known is None:
                known = self.state.generate(vi.name, axis, vi.name, "graph input", None)
            dims.append(known)
        if vi.type.WhichOneof("value") == "sequence_type":
            dims.insert(0, self.state.generate(vi.name, -1, vi.name, "sequence input", None))
        return TensorType(dtype_of(raw[0], what=f"input {vi.name!r}", file=file, node=vi.name), tuple(dims))

    # -- nodes ------------------------------------------------------------------------------
    def lower_node(self, node: NodeProto, index: int, scope: Scope, graph: Graph, *,
                   opset: int | None = None, source: Source | None = None, fields: NodeFields | None = None) -> None:
        if fields is None:
            domain = node.domain
            fields = (node.op_type, "" if domain == "ai.onnx" else domain, node.name, list(node.input),
                      list(node.output), node.attribute)
        op_type, domain, given, ins, outs, attrs = fields
        key = op_type if not domain else f"{domain}::{op_type}"
        fn = self.table.get(key)
        # a pure lowering of the top-level graph, typed node by node: record what it emits (.stamp)
        sig = None
        if self.stamps is not None and fn in PURE and source is None and opset is None and scope.parent is None:
            lookup = scope.values.get
            sig = node_signature(key, self.info.opsets.get(domain, 1), attrs, ins, outs,
                                 [lookup(x) if x else None for x in ins], scope.known.get)
        cx = NodeCx(self, node, index, scope, graph, opset if opset is not None else self.info.opsets.get(domain, 1),
                    source, fields)
        for i, (name, v) in enumerate(zip(cx.ins, cx.values) if None in cx.values else ()):
            if name and v is None:
                if not self.info.sorted:
                    raise Unordered(name)
                raise FrontendError(f"input {i} ({name!r}) is not defined: no node, initializer or graph input "
                                    f"produces it", file=self.info.file or None, node=cx.name, op=cx.source.op)
        if not domain and cx.op_type in FOLDERS:
            if cx.op_type in FROM_TYPE or all(not n or scope.known_value(n) is not None for n in cx.ins):
                cx.folded = fold(cx)
        if sig is not None:
            cx.recorder = Recorder()
        try:
            if fn is not None:
                fn(cx)
            elif not (self.fallback is not None and self.fallback(cx)):
                self.unknown(cx)
        except (NarrowpipeError, Unordered):
            raise
        except RecursionError:
            raise cx.error("the model nests too deeply to lower") from None
        except Exception as exc:  # a lowering bug or a malformed attribute: still name the node
            raise cx.error(f"cannot lower: {type(exc).__name__}: {exc}") from exc
        bound = scope.values
        for k, name in enumerate(cx.present):
            if name not in bound:
                raise cx.error(f"output {name!r} was not produced by the lowering")
            if cx.folded is not None and k < len(cx.folded):
                scope.known[name] = cx.folded[k]
        rec = cx.recorder
        if rec is not None and rec.valid and rec.steps and cx.folded is None and self.stamps is not None \
                and sig is not None:
            assert fn is not None
            self.stamps[sig] = Recipe(rec.steps, PURE[fn], tuple(None if v is None else v.type for v in cx.values))

    def unknown(self, cx: NodeCx) -> None:
        """An op with no canonical lowering: an UNKNOWN node reports list as unmodeled."""
        if self.info.strict:
            raise UnsupportedOpError("no canonical lowering for this op", file=self.info.file or None,
                                     node=cx.name, op=cx.source.op)
        cx.emit(Op.UNKNOWN, cx.inputs(), {"source_op": cx.source.op})

    def resolve(self, cx: NodeCx, own: list[OutSpec | None] | None = None, *,
                override: bool = False) -> list[TensorType]:
        return resolve_types(cx, self.rules, own, override=override)
