"""Lowering ONNX ops through their function bodies, for ops the table does not map directly.

Many ONNX ops are defined by a function of simpler ops (``AffineGrid``, ``SwiGLU``, the losses,
``LinearAttention``...). When the table has no entry for an op, its body (static, or built for
the node's input types) is expanded in place: every inner node is renamed under the node's name,
attribute references are resolved, and each inner node is lowered like any other, with the outer
op kept as its source so reports still name what the user wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, cast

import onnx
from onnx import AttributeProto, FunctionProto, GraphProto, NodeProto

from ...ir import Source
from .node import NodeCx
from .types import ONNX_OF, type_proto

__all__ = ["expand_function", "function_for"]

_MAX_DEPTH = 8


class _FunctionSchema(Protocol):
    """The function-body members of ``onnx.defs.OpSchema`` (there at run time, missing from onnx's stub)."""

    @property
    def has_function(self) -> bool: ...
    @property
    def function_opset_versions(self) -> list[int]: ...
    @property
    def function_body(self) -> FunctionProto: ...
    @property
    def has_context_dependent_function(self) -> bool: ...
    @property
    def context_dependent_function_opset_versions(self) -> list[int]: ...
    def get_function_with_opset_version(self, version: int) -> bytes: ...
    def get_context_dependent_function(self, node: bytes, types: Sequence[bytes]) -> bytes: ...
    def get_context_dependent_function_with_opset_version(self, version: int, node: bytes,
                                                          types: Sequence[bytes]) -> bytes: ...


def function_for(cx: NodeCx) -> FunctionProto | None:
    """The function body of this node's op at its opset, or None when it has none."""
    try:
        schema = cast(_FunctionSchema, onnx.defs.get_schema(cx.op_type, cx.opset, cx.domain))
    except Exception:
        return None
    try:
        if schema.has_function:
            versions = [v for v in schema.function_opset_versions if v <= cx.opset]
            if versions:
                return FunctionProto.FromString(schema.get_function_with_opset_version(max(versions)))
            return schema.function_body
        if schema.has_context_dependent_function:
            types: list[bytes] = []
            for i in range(cx.n_inputs()):
                v = cx.input(i)
                if v is None:
                    types.append(onnx.TypeProto().SerializeToString())
                else:
                    types.append(type_proto(ONNX_OF.get(v.type.dtype, 1), v.type.shape).SerializeToString())
            versions = [v for v in schema.context_dependent_function_opset_versions if v <= cx.opset]
            node = cx.node.SerializeToString()
            raw = (schema.get_context_dependent_function_with_opset_version(max(versions), node, types) if versions
                   else schema.get_context_dependent_function(node, types))
            return FunctionProto.FromString(raw) if raw else None
    except Exception:  # the body cannot be built for these inputs: the op stays unmodeled
        return None
    return None


def expand_function(cx: NodeCx) -> bool:
    """Lower ``cx`` through its function body; False when it has none (or nests too deep)."""
    depth = cx.source.scope.count("/") + 1 if cx.source.scope.startswith("function:") else 0
    if depth >= _MAX_DEPTH:
        return False
    fn = function_for(cx)
    if fn is None or not fn.node:
        return False
    rename: dict[str, str] = {}
    for formal, actual in zip(fn.input, cx.node.input):
        rename[formal] = actual
    for formal in fn.input[len(cx.node.input):]:
        rename[formal] = ""
    for formal, actual in zip(fn.output, cx.node.output):
        rename[formal] = actual
    prefix = f"{cx.name}/"
    attrs = {a.name: a for a in cx.node.attribute}
    defaults = {a.name: a for a in fn.attribute_proto}
    opsets = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in fn.opset_import}
    scope = f"function:{cx.source.scope + '/' if cx.source.scope else ''}{cx.op_type}"
    for i, inner in enumerate(fn.node):
        node = _instantiate(inner, rename, prefix, attrs, defaults)
        domain = "" if node.domain == "ai.onnx" else node.domain
        source = Source(op=cx.source.op, name=cx.name, scope=scope, file=cx.file)
        cx.lw.lower_node(node, i, cx.scope, cx.graph, opset=opsets.get(domain, cx.lw.info.opsets.get(domain, cx.opset)),
                         source=source)
    return True


def _instantiate(inner: NodeProto, rename: dict[str, str], prefix: str, attrs: dict[str, AttributeProto],
                 defaults: dict[str, AttributeProto]) -> NodeProto:
    node = NodeProto()
    node.CopyFrom(inner)
    node.name = prefix + (inner.name or inner.op_type)
    node.ClearField("input")
    node.input.extend(_name(x, rename, prefix) for x in inner.input)
    node.ClearField("output")
    node.output.extend(_name(x, rename, prefix) for x in inner.output)
    node.ClearField("attribute")
    for a in inner.attribute:
        if a.ref_attr_name:
            src = attrs.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
            if src is None or (src.type == AttributeProto.UNDEFINED):
                continue
            new = node.attribute.add()
            new.CopyFrom(src)
            new.name = a.name
            continue
        new = node.attribute.add()
        new.CopyFrom(a)
        if a.type == AttributeProto.GRAPH:
            _rename_graph(new.g, rename, prefix)
        elif a.type == AttributeProto.GRAPHS:
            for g in new.graphs:
                _rename_graph(g, rename, prefix)
    return node


def _name(x: str, rename: dict[str, str], prefix: str) -> str:
    if not x:
        return ""
    return rename[x] if x in rename else prefix + x


def _rename_graph(g: GraphProto, rename: dict[str, str], prefix: str) -> None:
    """Rename every name in a body the same way (its own names get the prefix too; harmless)."""
    for vi in (*g.input, *g.output, *g.value_info):
        vi.name = _name(vi.name, rename, prefix)
    for t in g.initializer:
        t.name = _name(t.name, rename, prefix)
    for n in g.node:
        ins = [_name(x, rename, prefix) for x in n.input]
        outs = [_name(x, rename, prefix) for x in n.output]
        n.ClearField("input")
        n.input.extend(ins)
        n.ClearField("output")
        n.output.extend(outs)
        for a in n.attribute:
            if a.type == AttributeProto.GRAPH:
                _rename_graph(a.g, rename, prefix)
            elif a.type == AttributeProto.GRAPHS:
                for sub in a.graphs:
                    _rename_graph(sub, rename, prefix)
