"""Translate torch's element types and (symbolic) sizes into IR types.

Shapes come from the fake tensors torch.export records on every node (``meta["val"]``), so no
weight is read. Symbolic sizes are sympy expressions over torch's own symbols (``s72``); their text
is parsed into the IR's canonical polynomial form (so ``s1*s0`` and ``s0*s1`` are one dim, as in
the ONNX frontend) and torch's symbols are renamed to the user's ``Dim`` names (``batch``) when known.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ...ir import DType, Sym, TensorType
from ...ir.dims import parse_dim

__all__ = ["torch_dtype", "SymbolTable", "DTYPES"]

DTYPES: dict[torch.dtype, DType] = {
    torch.float64: DType.FP64, torch.float32: DType.FP32, torch.bfloat16: DType.BF16,
    torch.float16: DType.FP16, torch.int64: DType.INT64, torch.int32: DType.INT32,
    torch.int16: DType.INT16, torch.int8: DType.INT8, torch.uint8: DType.UINT8, torch.bool: DType.BOOL,
    torch.complex64: DType.COMPLEX64, torch.complex128: DType.COMPLEX128,
}
for _name, _dt in (("float8_e4m3fn", DType.FP8_E4M3), ("float8_e4m3fnuz", DType.FP8_E4M3),
                   ("float8_e5m2", DType.FP8_E5M2), ("float8_e5m2fnuz", DType.FP8_E5M2),
                   ("float8_e8m0fnu", DType.FP8_E5M2), ("float4_e2m1fn_x2", DType.FP4),
                   ("uint16", DType.UINT16), ("uint32", DType.UINT32), ("uint64", DType.UINT64),
                   ("int4", DType.INT4), ("uint4", DType.UINT4), ("complex32", DType.COMPLEX64)):
    if hasattr(torch, _name):
        DTYPES[getattr(torch, _name)] = _dt


def torch_dtype(dtype: torch.dtype) -> DType:
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ValueError(f"unsupported torch dtype {dtype}") from None


class SymbolTable:
    """Converts torch sizes to IR dims, renaming torch's symbols and caching each expression."""

    def __init__(self, names: Mapping[str, str] | None = None) -> None:
        self.names: dict[str, str] = dict(names or {})
        self._cache: dict[Any, int | Sym] = {}

    def dim(self, d: Any) -> int | Sym:
        if isinstance(d, int):
            return d
        if isinstance(d, torch.SymInt):
            expr = d.node.expr
            hit = self._cache.get(expr)
            if hit is not None:
                return hit
            if getattr(expr, "is_number", False):
                out: int | Sym = int(expr)
            else:
                out = parse_dim(str(expr))
                if isinstance(out, Sym) and self.names and out.symbols & self.names.keys():
                    out = out.rename(self.names)
            self._cache[expr] = out
            return out
        return int(d)

    def tensor_type(self, t: Any) -> TensorType:
        return TensorType(torch_dtype(t.dtype), tuple(self.dim(d) for d in t.shape))
