"""Dequantizations that run inside a GEMM: a stored weight's, and both operands' of a QDQ GEMM.

Why: a quantized model stores narrow numbers and dequantizes them on the way into a matmul. Two
cases run as one kernel on every production stack, so fusion absorbs the DEQUANTIZE into the GEMM
(:mod:`.kernels`) and the GEMM is timed on what it loads (:mod:`.execution.gemm`):

* **weight-only** (ONNX ``MatMulNBits``, ``DequantizeLinear`` on an initializer, an int4 checkpoint's
  group scales): Marlin, ORT's MatMulNBits and TensorRT-LLM's weight-only GEMMs dequantize tiles in
  registers as they load them. The kernel reads the narrow weight and its scales, runs at the
  activations' rate, and the wide weight is never written, so liveness gives it no storage
  (:mod:`.interpreter`, :mod:`.costcache`);
* **QDQ** (both operands ``DequantizeLinear`` of integers: ORT's and TensorRT's static quantization
  format): the runtimes rewrite DQ -> MatMul/Conv into an integer GEMM (ORT's QDQ transformers to
  QLinearMatMul/QLinearConv, TensorRT's explicit-quantization fusion), so the GEMM reads both
  integer operands and runs at the chip's int8 rate; the QUANTIZE before each activation fuses into
  its producer's epilogue as any elementwise op does.

A dequantization of an activation whose GEMM partner is a float stays an op of its own (the runtime
dequantizes, then runs a float GEMM).
"""

from __future__ import annotations

from collections.abc import Collection

from ..ir import VIEW_OPS, Graph, Node, Op, Value

__all__ = ["WEIGHT_PATH", "is_stored_weight", "is_weight_dequant", "weight_derived", "runs_in_gemm", "fused_dequant",
           "dequant_behind"]

#: ops a weight passes through on its way to a GEMM in an exported graph (``t``, views, casts, its
#: dequantization): what it is, seen through them, is still the stored weight
WEIGHT_PATH = frozenset({*VIEW_OPS, Op.PERMUTE, Op.CAST, Op.COPY, Op.DEQUANTIZE})
_GEMMS = frozenset({Op.DOT, Op.GROUPED_DOT, Op.CONV})


def is_stored_weight(v: Value) -> bool:
    """``v`` is a parameter, buffer or constant, or one seen through :data:`WEIGHT_PATH`."""
    while v.producer is not None and v.producer.op in WEIGHT_PATH and v.producer.inputs:
        first = v.producer.inputs[0]
        if first is None:
            return False
        v = first
    return v.producer is None and v.kind.is_weight


def is_weight_dequant(node: Node) -> bool:
    """``node`` dequantizes a stored weight: no activation goes into it."""
    first = node.inputs[0] if node.op is Op.DEQUANTIZE and node.inputs else None
    return first is not None and is_stored_weight(first)


def weight_derived(graph: Graph) -> set[Value]:
    """The outputs of ``graph``'s weight dequantizations and the views of them (no storage of their own)."""
    out: set[Value] = set()
    for node in graph.nodes:
        if is_weight_dequant(node):
            out.update(node.outputs)
        elif node.op in VIEW_OPS and node.inputs and node.inputs[0] in out:
            out.update(node.outputs)
    return out


def dequant_behind(v: Value | None) -> Node | None:
    """The DEQUANTIZE producing ``v``, through views; None when another op does."""
    while v is not None and v.producer is not None and v.producer.op in VIEW_OPS and v.producer.inputs:
        v = v.producer.inputs[0]
    p = v.producer if v is not None else None
    return p if p is not None and p.op is Op.DEQUANTIZE else None


def _is_qdq_gemm(gemm: Node) -> bool:
    """Both operands of ``gemm`` are dequantizations of integers (a QDQ integer GEMM)."""
    deqs = [dequant_behind(v) for v in gemm.inputs[:2]]
    return all(d is not None and d.inputs and d.inputs[0] is not None and d.inputs[0].type.dtype.is_int
               for d in deqs)


def runs_in_gemm(producer: Node, consumer: Node) -> bool:
    """``producer`` is a dequantization the GEMM ``consumer`` runs in its operand load (module doc)."""
    if producer.op is not Op.DEQUANTIZE or consumer.op not in _GEMMS:
        return False
    return is_weight_dequant(producer) or _is_qdq_gemm(consumer)


def fused_dequant(v: Value, fused: Collection[Node]) -> Node | None:
    """The dequantization in ``fused`` (the GEMM's kernel) that produces operand ``v``, through views."""
    d = dequant_behind(v)
    return d if d is not None and d in fused else None
