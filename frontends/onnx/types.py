"""ONNX element types, tensor protos and type protos, translated to and from IR types.

Nothing here reads external weight data: initializers are typed from their declared dims and data
type, and only small integer tensors (shapes, axes, sizes) are ever turned into arrays.
"""

from __future__ import annotations

from collections.abc import Iterable
from math import prod

import numpy as np
import onnx
from onnx import TensorProto, TypeProto

from ...errors import ShapeError
from ...ir import DType, Sym, TensorType

__all__ = ["DTYPES", "ONNX_OF", "dtype_of", "declared_dims", "checked_dims", "small_array", "type_proto",
           "MAX_DIM", "MAX_NUMEL", "FOLD_LIMIT", "is_external", "check_payload", "constant_type", "absurd_size"]

#: ONNX ``TensorProto.DataType`` -> IR dtype. INT2/UINT2 (opset 25) pack four values a byte, as the
#: IR's 2-bit types do; the 6-bit floats are stored as the next wider IR type (the IR has no 6-bit
#: one), so their byte counts are upper bounds.
DTYPES: dict[int, DType] = {
    TensorProto.FLOAT: DType.FP32, TensorProto.UINT8: DType.UINT8, TensorProto.INT8: DType.INT8,
    TensorProto.UINT16: DType.UINT16, TensorProto.INT16: DType.INT16, TensorProto.INT32: DType.INT32,
    TensorProto.INT64: DType.INT64, TensorProto.STRING: DType.STRING, TensorProto.BOOL: DType.BOOL,
    TensorProto.FLOAT16: DType.FP16, TensorProto.DOUBLE: DType.FP64, TensorProto.UINT32: DType.UINT32,
    TensorProto.UINT64: DType.UINT64, TensorProto.COMPLEX64: DType.COMPLEX64,
    TensorProto.COMPLEX128: DType.COMPLEX128, TensorProto.BFLOAT16: DType.BF16,
    TensorProto.FLOAT8E4M3FN: DType.FP8_E4M3, TensorProto.FLOAT8E4M3FNUZ: DType.FP8_E4M3,
    TensorProto.FLOAT8E5M2: DType.FP8_E5M2, TensorProto.FLOAT8E5M2FNUZ: DType.FP8_E5M2,
    TensorProto.UINT4: DType.UINT4, TensorProto.INT4: DType.INT4, TensorProto.FLOAT4E2M1: DType.FP4,
}
for _name, _dt in (("FLOAT8E8M0", DType.FP8_E5M2), ("UINT2", DType.UINT2), ("INT2", DType.INT2),
                   ("FLOAT6E2M3", DType.FP8_E4M3), ("FLOAT6E3M2", DType.FP8_E5M2)):
    if hasattr(TensorProto, _name):
        DTYPES[getattr(TensorProto, _name)] = _dt

#: IR dtype -> an ONNX data type with that storage (for the types handed to ONNX inference).
ONNX_OF: dict[DType, int] = {}
for _code, _dt in DTYPES.items():
    ONNX_OF.setdefault(_dt, _code)
ONNX_OF[DType.TF32] = TensorProto.FLOAT

#: Dims above this are rejected as absurd (no real tensor has 2**40 elements along one axis).
MAX_DIM = 1 << 40
#: Tensors above this many elements are rejected as absurd (a petabyte of int8).
MAX_NUMEL = 1 << 50
#: Integer tensors up to this many elements are folded (shape arithmetic); larger ones never are.
FOLD_LIMIT = 4096


def absurd_size(dims: Iterable[object]) -> str | None:
    """Why a shape is absurd (a known dim above :data:`MAX_DIM`, or its known dims' product above
    :data:`MAX_NUMEL`), else None. Declared and derived shapes are held to it as initializers are:
    an input declared ``[2**40, 2**40, 1024]`` or a Conv padded by 10**12 is a broken file, not a
    number of FLOPs; a symbolic dim is judged when bound."""
    known = [d for d in dims if isinstance(d, int) and not isinstance(d, bool)]
    big = next((d for d in known if d > MAX_DIM), None)
    if big is not None:
        return f"dim {big} (above {MAX_DIM})"
    if prod(known) > MAX_NUMEL:
        return f"{prod(known)} elements, more than any real model holds"
    return None


def dtype_of(code: int, *, what: str = "", file: str | None = None, node: str | None = None) -> DType:
    dt = DTYPES.get(code)
    if dt is None:
        name = TensorProto.DataType.Name(code) if code in TensorProto.DataType.values() else str(code)
        raise ShapeError(f"{what or 'value'} has element type {name}, which has no IR dtype",
                         file=file, node=node)
    return dt


def declared_dims(t: TensorProto, *, file: str | None = None) -> tuple[int, ...]:
    """An initializer's dims, checked: never negative, never absurd."""
    return checked_dims(t.name, tuple(int(d) for d in t.dims), file=file)


def checked_dims(name: str, dims: tuple[int, ...], *, file: str | None = None) -> tuple[int, ...]:
    """:func:`declared_dims` from the initializer's name and dims already read."""
    for d in dims:
        if d < 0 or d > MAX_DIM:
            raise ShapeError(f"initializer {name!r} declares dim {d} (dims {list(dims)})", file=file,
                             node=name or None)
    if prod(dims) > MAX_NUMEL:
        raise ShapeError(f"initializer {name!r} declares {prod(dims)} elements (dims {list(dims)}), "
                         f"more than any real model holds", file=file, node=name or None)
    return dims


def constant_type(t: TensorProto, file: str, node: str) -> TensorType:
    """The type of a constant tensor (a ``Constant`` node's value), from its declared dims."""
    return TensorType(dtype_of(t.data_type, what="constant", file=file or None, node=node), declared_dims(t, file=file))


def is_external(t: TensorProto) -> bool:
    return t.data_location == TensorProto.EXTERNAL


def small_array(t: TensorProto, limit: int = FOLD_LIMIT) -> np.ndarray | None:
    """The values of a small, inline, numeric tensor (shape constants, axes); None otherwise."""
    if is_external(t) or t.data_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        return None
    dims = tuple(int(d) for d in t.dims)
    if any(d < 0 for d in dims) or prod(dims) > limit:
        return None
    try:
        arr = onnx.numpy_helper.to_array(t)
    except Exception:  # malformed payloads: the tensor is just not folded
        return None
    if arr.shape != dims:
        return None
    return arr


def type_proto(elem_type: int, shape: tuple[int | Sym, ...] | None) -> TypeProto:
    """A tensor TypeProto (for per-node ONNX inference); symbolic dims become ``dim_param``s."""
    tp = TypeProto()
    tt = tp.tensor_type
    tt.elem_type = elem_type
    if shape is not None:
        sh = tt.shape
        sh.SetInParent()
        for d in shape:
            dim = sh.dim.add()
            if isinstance(d, int):
                dim.dim_value = d
            else:
                dim.dim_param = d.expr
    return tp


_ELEM_FIELDS = ("float_data", "int64_data", "double_data", "uint64_data", "string_data")
_COMPLEX = (TensorProto.COMPLEX64, TensorProto.COMPLEX128)


def check_payload(t: TensorProto, dims: tuple[int, ...], dtype: DType, file: str) -> None:
    """Inline data must match the declared dims (external data is never read, so never checked)."""
    if is_external(t):
        return
    n = prod(dims)

    def mismatch(got: str) -> ShapeError:
        return ShapeError(f"initializer {t.name!r} declares dims {list(dims)} ({n} elements) but holds {got}",
                          file=file or None, node=t.name)

    if t.raw_data:
        expect = n * (8 if t.data_type == TensorProto.COMPLEX64 else 16) if t.data_type in _COMPLEX else dtype.nbytes(n)
        if len(t.raw_data) != expect and dtype is not DType.STRING:
            raise mismatch(f"{len(t.raw_data)} bytes ({expect} expected)")
        return
    for fld in _ELEM_FIELDS:
        got = len(getattr(t, fld))
        if got:
            if got != n * (2 if t.data_type in _COMPLEX else 1):
                raise mismatch(f"{got} values")
            return
    got = len(t.int32_data)
    if got:
        if dtype.bits >= 8 and got != n:
            raise mismatch(f"{got} values")
        return
    if n:
        raise mismatch("no data (and no external location)")

