"""What a lowered ONNX node is called in reports: its source op and the module scope in its name."""

from __future__ import annotations

from functools import lru_cache

__all__ = ["source_op", "module_scope"]


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
