"""What folded shape tensors hold: numpy arrays of ints and :class:`Poly` dims, and the helpers the
folders share to read, pack and convert them (see :mod:`.fold`)."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ...ir import Sym
from .symdims import Poly, to_poly

__all__ = ["Unfoldable", "FoldContext", "scalar", "to_elem", "shape_array", "norm_elem", "as_dims", "as_ints",
           "symbolic", "pack", "need", "opt_ints"]


class Unfoldable(Exception):
    """The value depends on something unknown (a binding, a float, a large tensor)."""


class FoldContext(Protocol):
    op_type: str
    opset: int

    def attr(self, name: str, default: Any = None) -> Any: ...
    def attr_array(self, name: str) -> np.ndarray | None: ...
    def known(self, i: int) -> np.ndarray | None: ...
    def shape(self, i: int) -> tuple[int | Sym, ...] | None: ...
    def n_inputs(self) -> int: ...


def scalar(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    return x


def to_elem(x: Any) -> Any:
    x = scalar(x)
    if isinstance(x, Sym):
        return to_poly(x)
    return x


def shape_array(dims: tuple[int | Sym, ...] | list[Any]) -> np.ndarray:
    """A 1-D int64 array, or an object array when some element is symbolic."""
    elems = [norm_elem(to_elem(d)) for d in dims]
    if all(isinstance(e, int) for e in elems):
        return np.array(elems, dtype=np.int64)
    out = np.empty(len(elems), dtype=object)
    out[:] = elems
    return out


def norm_elem(e: Any) -> Any:
    if isinstance(e, Poly) and e.is_const:
        return e.const_value
    if isinstance(e, float) and e.is_integer() and abs(e) < 2**62:
        return e  # keep floats floats (a float tensor stays float)
    return e


def as_dims(arr: np.ndarray | None) -> list[int | Poly] | None:
    """A known 1-D (or scalar) integer tensor as dims; None if absent or not integral."""
    if arr is None:
        return None
    out: list[int | Poly] = []
    for e in np.asarray(arr).reshape(-1).tolist():
        e = to_elem(e)
        if isinstance(e, bool):
            e = int(e)
        if isinstance(e, float):
            if not e.is_integer():
                return None
            e = int(e)
        if not isinstance(e, (int, Poly)):
            return None
        out.append(e)
    return out


def as_ints(arr: np.ndarray | None) -> list[int] | None:
    dims = as_dims(arr)
    if dims is None:
        return None
    ints = [int(d) for d in dims if isinstance(d, int)]
    return ints if len(ints) == len(dims) else None


def symbolic(*arrs: np.ndarray) -> bool:
    return any(a.dtype == object for a in arrs)


def pack(result: Any, like_float: bool = False) -> np.ndarray:
    arr = np.asarray(result)
    if arr.dtype == object:
        flat = [norm_elem(to_elem(e)) for e in arr.reshape(-1).tolist()]
        if all(isinstance(e, (int, bool)) for e in flat) and not like_float:
            return np.array(flat, dtype=np.int64).reshape(arr.shape)
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
        return out.reshape(arr.shape)
    return arr


def need(cx: FoldContext, i: int) -> np.ndarray:
    v = cx.known(i)
    if v is None:
        raise Unfoldable(f"input {i} unknown")
    return v


def opt_ints(cx: FoldContext, i: int, attr: str | None = None) -> list[int] | None:
    if i < cx.n_inputs() and cx.known(i) is not None:
        return as_ints(cx.known(i))
    if i < cx.n_inputs() and attr is None:
        raise Unfoldable("axes unknown")
    v = cx.attr(attr) if attr else None
    return None if v is None else [int(x) for x in v]
