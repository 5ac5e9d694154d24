"""onnxruntime's block-quantized weight formats: MatMulNBits (the int4 linear layers of GenAI models)
and GatherBlockQuantized (their int4 token embedding).

Each stores its codes packed in bytes and dequantizes them by blocks of ``block_size`` with fp16
scales (and optional zero points), which stay constants (weight bytes, not parameters). The packed
weight is retyped as the narrow type it packs, so parameters count the model's weights; a stored
weight's dequantization runs inside its GEMM (``costmodel/dequant_fusion.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from ...ir import DType, Op, TensorType, Value, ValueKind
from .contractions import dot
from .contrib_shapes import MS
from .node import NodeCx
from .symdims import dim_mul, to_dim

__all__ = ["NBITS_LOWERINGS"]


#: MatMulNBits' bit widths whose packed bytes hold several weights each, as the IR's narrow dtypes.
_PACKED = {4: DType.UINT4, 2: DType.UINT2}


def _unpack_int4(cx: NodeCx, w: Value | None, bits: int, block: int, k: int) -> Value | None:
    """A MatMulNBits weight stored as bytes ``uint8 [N, blocks, block * bits / 8]`` holds 8 / bits
    weights per byte (two 4-bit, four 2-bit): retyped (in place, same bytes) as the ``uint4`` or
    ``uint2 [N, blocks, block]`` it packs, so the parameter count is the model's weights, not a
    half or a quarter of them.

    When ``K`` is not a multiple of ``block`` the last block is padded (``blocks x block > K``):
    the weight becomes its logical ``[N, K]`` (the parameters) and the padding a constant of its own,
    ``[N, blocks x block - K]`` in the same type, returned here for the dequantization to read (stored
    bytes, counted in the weight bytes, not parameters: K=320 in blocks of 128 keeps 384 codes a row)."""
    narrow = _PACKED.get(bits)
    if w is None or narrow is None or w.producer is not None or not w.kind.is_weight or \
            w.type.dtype is not DType.UINT8 or len(w.type.shape) != 3 or w.type.shape[2] != block * bits // 8:
        return _padding_of(cx, w)
    n, blocks = w.type.shape[:2]
    stored = blocks * block if isinstance(blocks, int) else None
    if stored is None or stored <= k:
        w.type = TensorType(narrow, (n, blocks, block))
        return None
    w.type = TensorType(narrow, (n, k))
    return cx.add_weight(f"{w.name}/k_padding", TensorType(narrow, (n, stored - k)), ValueKind.CONST,
                         source_name=f"{w.source_name or w.name}/k_padding")


def _padding_of(cx: NodeCx, w: Value | None) -> Value | None:
    """The padding constant an earlier MatMulNBits reading the same weight split off, if any."""
    if w is None:
        return None
    name = f"{w.source_name or w.name}/k_padding"
    return next((v for v in cx.graph.weights if v.source_name == name), None)


def _matmul_nbits(cx: NodeCx) -> None:
    """MatMulNBits: dequantize the packed weight (and any K padding) to [N, K], then A @ W^T."""
    a = cx.input(0)
    assert a is not None
    k, n = int(cx.attr("K")), int(cx.attr("N"))
    bits, block = int(cx.attr("bits", 4)), int(cx.attr("block_size", 32))
    pad = _unpack_int4(cx, cx.input(1), bits, block, k)
    w = cx.emit(Op.DEQUANTIZE, cx.inputs(1, 2, 3) + ([pad] if pad is not None else []),
                {"bits": bits, "block_size": block}, types=[TensorType(a.type.dtype, (n, k))], bind=False,
                suffix="dequant").outputs[0]
    bias = cx.input(5)
    y = dot(cx, a, w, (a.type.rank - 1,), (1,), bind=bias is None).outputs[0]
    if bias is not None:
        cx.emit(Op.ADD, [y, bias], {"role": "bias"}, suffix="bias")


def _gather_block_quantized(cx: NodeCx) -> None:
    """GatherBlockQuantized: gather rows of the quantized table, dequantize them. A 4-bit table stored
    as ``uint8`` bytes (two codes a byte, ``bits=4``) is retyped as the ``uint4`` it packs (last dim
    doubled, same bytes), as MatMulNBits' weight is, so its parameters are the table's entries."""
    data = cx.input(0)
    narrow = _PACKED.get(int(cx.attr("bits", 4)))
    if data is not None and narrow is not None and data.producer is None and data.kind.is_weight and \
            data.type.dtype is DType.UINT8 and data.type.rank >= 1:
        *lead, last = data.type.shape
        data.type = TensorType(narrow, (*lead, to_dim(dim_mul(last, 8 // narrow.bits))))
    out = cx.out_types()
    g = cx.emit(Op.GATHER, cx.inputs(0, 1), {"axis": int(cx.attr("gather_axis", 0))},
                types=[TensorType(cx.dtype(0) or DType.UINT8, out[0].shape)], bind=False, suffix="gather").outputs[0]
    cx.emit(Op.DEQUANTIZE, [g, *cx.inputs(2, 3)], {"block_size": int(cx.attr("block_size", 128))})


NBITS_LOWERINGS: dict[str, Callable[[NodeCx], None]] = {
    MS + "MatMulNBits": _matmul_nbits, MS + "GatherBlockQuantized": _gather_block_quantized,
}
