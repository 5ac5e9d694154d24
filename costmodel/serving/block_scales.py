"""The block scales a 4-bit weight format stores beside its weights.

Why: a 4-bit weight is a code; its value is the code times a scale shared by a small block of
weights (and, for asymmetric integers, minus a zero point). Those scales are bytes every decode step
reads with the weights: 3.9% more for AWQ/GPTQ int4, 12.5% more for NVFP4. Leaving them out made a
memory-bound int4 or fp4 decode step that much too fast and the weights that much too small.

* ``int4``/``uint4``: AWQ's and GPTQ's layout, groups of 128 weights along K, one fp16 scale and one
  4-bit zero point per group (AutoAWQ's default ``quant_config``: ``zero_point`` True,
  ``q_group_size`` 128, ``w_bit`` 4; vLLM's ``AWQConfig`` reads ``qweight``, ``qzeros`` packed eight
  per int32, and fp16 ``scales``): 4 + (16 + 4) / 128 = 4.156 bits per weight.
* ``fp4``: NVFP4 (Blackwell's format; TensorRT-LLM and ModelOpt's FP4): blocks of 16 E2M1 weights
  with one FP8 E4M3 scale, plus one fp32 scale per tensor: 4 + 8 / 16 = 4.5 bits per weight
  (MXFP4, OCP's format, is blocks of 32 with an E8M0 scale: 4.25 bits; narrowpipe's ``fp4`` is NVFP4).
* 8-bit formats (int8, fp8) scale per output channel or per tensor: under 0.1% of their bytes, and
  not written.

The weight is rewritten as the stored code, its scales (and zero points) and a ``DEQUANTIZE`` into
the model's format, which the GEMM runs in its operand load (:mod:`narrowpipe.costmodel.dequant_fusion`):
the kernel reads code and scales, and nothing else changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod

from ...ir import DType, Graph, Node, Op, TensorType, Value, ValueKind

__all__ = ["BlockScales", "BLOCK_SCALES", "add_block_scales"]


@dataclass(frozen=True)
class BlockScales:
    block: int                   # weights per scale, along the contracted dim
    scale: DType
    zero_point: DType | None     # None: symmetric (no zero point stored)
    source: str


_AWQ = BlockScales(128, DType.FP16, DType.UINT4, "AutoAWQ quant_config (zero_point, q_group_size 128, w_bit 4)")
#: A weight format's stored scales; formats not listed store none worth counting.
BLOCK_SCALES: dict[DType, BlockScales] = {
    DType.INT4: _AWQ, DType.UINT4: _AWQ,
    DType.FP4: BlockScales(16, DType.FP8_E4M3, None, "NVFP4: 16-element blocks, E4M3 scale"),
}


def add_block_scales(graph: Graph, weight: Value, original: DType) -> Node | None:
    """Give ``weight`` (already retyped to its stored format) its block scales: new weights read by a
    ``DEQUANTIZE`` into ``original`` that every reader then reads instead, placed before the first of
    them (program order decides where a kernel runs). None when the format stores no scales."""
    spec = BLOCK_SCALES.get(weight.type.dtype)
    readers = sorted({u.node for u in weight.uses}, key=graph.nodes.index)
    dims = [d for d in weight.type.shape if isinstance(d, int)]
    if spec is None or not readers or len(dims) != len(weight.type.shape):
        return None
    blocks = ceil(prod(dims) / spec.block)
    name = weight.source_name or weight.name
    operands = [weight, graph.add_input(f"{name}.scales", TensorType(spec.scale, (blocks,)), ValueKind.CONST)]
    if spec.zero_point is not None:
        operands.append(graph.add_input(f"{name}.zeros", TensorType(spec.zero_point, (blocks,)), ValueKind.CONST))
    dq = graph.add_node(Op.DEQUANTIZE, operands, [TensorType(original, weight.type.shape)],
                        {"block_size": spec.block, "role": "block_scales"}, name=f"{name}.dequant")
    graph.nodes.insert(graph.nodes.index(readers[0]), graph.nodes.pop())
    for reader in readers:
        for i, v in enumerate(reader.inputs):
            if v is weight:
                graph.set_input(reader, i, dq.outputs[0])
    return dq
