"""What a lowered ONNX node is called in reports: its source op and its module scope, read from the
node's ``metadata_props`` where the exporter recorded it there, else from the path in its name."""

from __future__ import annotations

import ast
from functools import lru_cache

from onnx import NodeProto

__all__ = ["source_op", "module_scope", "node_scope", "scope_from_name_scopes", "NAME_SCOPES"]

#: The key under which torch's dynamo exporter (``torch.onnx.export(..., dynamo=True)``) records
#: the module stack of the FX node an ONNX node comes from.
NAME_SCOPES = "pkg.torch.onnx.name_scopes"

#: The module torch's export names a stack it could not recover (nodes added by its own passes,
#: such as the shape asserts of ``insert_deferred_runtime_asserts``): no module of the model.
_NO_MODULE = "_empty_nn_module_stack"


@lru_cache(maxsize=4096)
def source_op(domain: str, op_type: str) -> str:
    """``domain::OpType`` with the default domain spelled ``ai.onnx``."""
    return f"{domain or 'ai.onnx'}::{op_type}"


def module_scope(name: str) -> str:
    """The module path in a node name written as one (torch's legacy exporter and tf2onnx name
    nodes ``/transformer/h.0/attn/MatMul``): ``transformer.h.0.attn``, so reports group and
    attribute ONNX nodes by module as they do torch ones. Names without a path give ``""``."""
    if "/" not in name:
        return ""
    path = name.rpartition("/")[0]
    return path.strip("/").replace("/", ".")


def node_scope(node: NodeProto, name: str) -> str:
    """The module scope of ``node``: from its ``pkg.torch.onnx.name_scopes`` metadata when present
    (the dynamo exporter names nodes ``node_linear_1``, with no path, and keeps the module stack
    there), else from the path in ``name`` (:func:`module_scope`). Both give the same dotted path
    for the same module (``m.model.layers.0.self_attn.k_proj``), so layer detection, hotspot
    grouping and planning see one model the same way whichever exporter wrote it."""
    for prop in node.metadata_props:          # empty for files without metadata
        if prop.key == NAME_SCOPES:
            scope = scope_from_name_scopes(prop.value)
            if scope is not None:
                return scope
            break
    return module_scope(name)


def scope_from_name_scopes(text: str) -> str | None:
    """The innermost module of a ``name_scopes`` value, the ``repr`` of a list of the module paths
    from the root down, then the FX node's own name (``['', 'm', 'm.model', 'm.model.layers.0',
    'view']`` gives ``m.model.layers.0``); ``""`` for a node outside any module; None when the
    text is not such a list (then the node name is read instead)."""
    head, sep, _node = text.rpartition(", ")   # the FX node's name differs per node; the modules repeat
    if not sep:
        return "" if text.startswith("[") and text.endswith("]") else None
    return _innermost(head)


@lru_cache(maxsize=4096)
def _innermost(head: str) -> str | None:
    try:
        modules = ast.literal_eval(head + "]")
    except (ValueError, SyntaxError):
        return None
    if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
        return None
    modules = [m for m in modules if not m.startswith(_NO_MODULE)]
    return modules[-1] if modules else ""
