"""Values that are stored weights as a kernel sees them: the weights, their views, and their dequantizations.

Why: a quantized model stores a narrow weight and its scales and dequantizes them on the way into a
GEMM (ONNX ``MatMulNBits``, a QDQ model's ``DequantizeLinear`` on an initializer, an int4
checkpoint's group scales). Weight-only kernels (Marlin, ORT's MatMulNBits, TensorRT-LLM's
weight-only GEMMs) dequantize tiles in registers as they load them: the wide weight is never written,
so fusion absorbs the dequantization into the GEMM (:mod:`.kernels`) and liveness does not count its
output as an activation (:mod:`.interpreter`, :mod:`.costcache`).
"""

from __future__ import annotations

from ..ir import VIEW_OPS, Graph, Node, Op, Value

__all__ = ["is_weight_dequant", "weight_derived"]

#: ops a weight passes through unchanged in value on its way to a dequantization
_PASS = frozenset({*VIEW_OPS, Op.PERMUTE, Op.COPY, Op.CAST})


def is_weight_dequant(node: Node) -> bool:
    """``node`` dequantizes a stored weight (its data operand is a parameter, buffer or constant,
    seen through views and layout changes): no activation goes into it."""
    if node.op is not Op.DEQUANTIZE or not node.inputs or node.inputs[0] is None:
        return False
    v = node.inputs[0]
    while v.producer is not None and v.producer.op in _PASS and v.producer.inputs and \
            v.producer.inputs[0] is not None:
        v = v.producer.inputs[0]
    return v.producer is None and v.kind.is_weight


def weight_derived(graph: Graph) -> set[Value]:
    """The outputs of ``graph``'s weight dequantizations and the views of them (no storage of their own)."""
    out: set[Value] = set()
    for node in graph.nodes:
        if is_weight_dequant(node):
            out.update(node.outputs)
        elif node.op in VIEW_OPS and node.inputs and node.inputs[0] in out:
            out.update(node.outputs)
    return out
