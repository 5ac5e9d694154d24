"""Element types of tensors, with the bit widths the cost model needs for bytes.

One enum covers what torch and ONNX can express, including the low-precision formats (fp8, fp4,
int4, int2) whose byte counts decide whether a model fits, so sub-byte types keep their exact bit width
and byte counts round up only per tensor.
"""

from __future__ import annotations

import enum

__all__ = ["DType"]


class DType(enum.Enum):
    """A tensor element type; ``value`` is the canonical name used in JSON and TOML files."""

    __hash__ = object.__hash__   # exact for singletons compared by identity, and run in C (see Op)

    FP64 = "fp64"
    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"
    FP4 = "fp4"
    INT64 = "int64"
    INT32 = "int32"
    INT16 = "int16"
    INT8 = "int8"
    INT4 = "int4"
    INT2 = "int2"
    UINT64 = "uint64"
    UINT32 = "uint32"
    UINT16 = "uint16"
    UINT8 = "uint8"
    UINT4 = "uint4"
    UINT2 = "uint2"
    BOOL = "bool"
    COMPLEX64 = "complex64"
    COMPLEX128 = "complex128"
    STRING = "string"

    @property
    def bits(self) -> int:
        """Storage bits per element (tf32 is stored in 32-bit words; strings count as 8 bytes)."""
        return _BITS[self]

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_int(self) -> bool:
        return self in _INTS

    def nbytes(self, numel: int) -> int:
        """Bytes for ``numel`` elements, rounding sub-byte types up to whole bytes."""
        return (numel * _BITS[self] + 7) // 8

    @classmethod
    def parse(cls, name: str) -> DType:
        """Accept canonical names and the common spellings frameworks print."""
        key = name.strip().lower()
        key = _SPELLINGS.get(key, key)
        try:
            return cls(key)
        except ValueError:
            raise ValueError(f"unknown dtype {name!r}; known: {', '.join(d.value for d in cls)}") from None

    def __str__(self) -> str:
        return self.value


_BITS: dict[DType, int] = {
    DType.FP64: 64, DType.FP32: 32, DType.TF32: 32, DType.BF16: 16, DType.FP16: 16,
    DType.FP8_E4M3: 8, DType.FP8_E5M2: 8, DType.FP4: 4,
    DType.INT64: 64, DType.INT32: 32, DType.INT16: 16, DType.INT8: 8, DType.INT4: 4, DType.INT2: 2,
    DType.UINT64: 64, DType.UINT32: 32, DType.UINT16: 16, DType.UINT8: 8, DType.UINT4: 4, DType.UINT2: 2,
    DType.BOOL: 8, DType.COMPLEX64: 64, DType.COMPLEX128: 128, DType.STRING: 64,
}
_FLOATS = frozenset({DType.FP64, DType.FP32, DType.TF32, DType.BF16, DType.FP16, DType.FP8_E4M3,
                     DType.FP8_E5M2, DType.FP4, DType.COMPLEX64, DType.COMPLEX128})
_INTS = frozenset({DType.INT64, DType.INT32, DType.INT16, DType.INT8, DType.INT4, DType.INT2, DType.UINT64,
                   DType.UINT32, DType.UINT16, DType.UINT8, DType.UINT4, DType.UINT2})
_SPELLINGS = {
    "float64": "fp64", "double": "fp64", "float32": "fp32", "float": "fp32",
    "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
    "float8_e4m3fn": "fp8_e4m3", "float8_e4m3fnuz": "fp8_e4m3", "float8e4m3fn": "fp8_e4m3",
    "float8e4m3fnuz": "fp8_e4m3", "fp8": "fp8_e4m3", "e4m3": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2", "float8_e5m2fnuz": "fp8_e5m2", "float8e5m2": "fp8_e5m2",
    "float8e5m2fnuz": "fp8_e5m2", "e5m2": "fp8_e5m2", "float8_e8m0fnu": "fp8_e5m2",
    "float4_e2m1fn_x2": "fp4", "float4e2m1": "fp4", "float4_e2m1": "fp4", "nvfp4": "fp4", "mxfp4": "fp4",
    "long": "int64", "int": "int32", "short": "int16", "char": "int8", "byte": "uint8",
    "complex": "complex64", "cfloat": "complex64", "cdouble": "complex128", "str": "string",
}
