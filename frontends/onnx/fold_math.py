"""Folding of elementwise shape arithmetic: +, -, *, integer division, comparisons, casts,
reductions and selections over small tensors whose elements may be symbolic dims. A comparison
that depends on how dims are bound is never decided (the value stays unknown)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from .fold_values import FoldContext, Unfoldable, need, opt_ints, pack, symbolic, to_elem
from .symdims import Poly, dim_add, dim_eq, dim_floordiv, dim_lt, dim_max, dim_min, dim_mod, dim_mul, dim_sub

__all__ = ["MATH_FOLDERS"]


def _binary_sym(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def wrapped(a: Any, b: Any) -> Any:
        a, b = to_elem(a), to_elem(b)
        if isinstance(a, Poly) or isinstance(b, Poly):
            for x in (a, b):
                if isinstance(x, float) and not x.is_integer():
                    raise Unfoldable("symbolic dim times a fraction")
            a = int(a) if isinstance(a, float) else a
            b = int(b) if isinstance(b, float) else b
        return fn(a, b)
    return wrapped


def _int_div(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise Unfoldable("division by zero")
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    if isinstance(a, float) or isinstance(b, float):
        if b == 0:
            raise Unfoldable("division by zero")
        return a / b
    try:
        return dim_floordiv(a, b)
    except ZeroDivisionError:
        raise Unfoldable("division by zero") from None


def _compare(kind: str) -> Callable[[Any, Any], bool]:
    def fn(a: Any, b: Any) -> bool:
        a, b = to_elem(a), to_elem(b)
        if isinstance(a, Poly) or isinstance(b, Poly):
            if kind == "eq":
                r = dim_eq(a, b)
            elif kind == "lt":
                r = dim_lt(a, b)
            elif kind == "gt":
                r = dim_lt(b, a)
            elif kind == "le":
                r = None if dim_lt(b, a) is None else not dim_lt(b, a)
            else:
                r = None if dim_lt(a, b) is None else not dim_lt(a, b)
            if r is None:
                raise Unfoldable("comparison depends on the dims' binding")
            return r
        return {"eq": operator.eq, "lt": operator.lt, "gt": operator.gt, "le": operator.le,
                "ge": operator.ge}[kind](a, b)
    return fn


#: op -> (numpy's function, or None where ONNX's integer semantics differ from numpy's; the symbolic one)
_ARITH: dict[str, tuple[Callable[[Any, Any], Any] | None, Callable[[Any, Any], Any]]] = {
    "Add": (np.add, _binary_sym(dim_add)), "Sub": (np.subtract, _binary_sym(dim_sub)),
    "Mul": (np.multiply, _binary_sym(dim_mul)), "Div": (None, _binary_sym(_int_div)),
    "Mod": (None, _binary_sym(dim_mod)), "Max": (np.maximum, _binary_sym(dim_max)),
    "Min": (np.minimum, _binary_sym(dim_min)),
}
_COMPARE = {"Equal": "eq", "Less": "lt", "Greater": "gt", "LessOrEqual": "le", "GreaterOrEqual": "ge"}


def _elementwise(cx: FoldContext) -> list[np.ndarray]:
    arrs = [need(cx, i) for i in range(cx.n_inputs())]
    op = cx.op_type
    if op in _COMPARE:
        fn = np.frompyfunc(_compare(_COMPARE[op]), 2, 1)
        return [np.asarray(fn(arrs[0], arrs[1]), dtype=bool)]
    native, sym = _ARITH[op]
    result = arrs[0]
    for b in arrs[1:]:
        if symbolic(result, b) or native is None:
            if native is None and not symbolic(result, b) and result.dtype.kind == "f":
                result = np.divide(result, b) if op == "Div" else np.fmod(result, b)
                continue
            result = pack(np.frompyfunc(sym, 2, 1)(result, b), like_float=result.dtype.kind == "f")
        else:
            result = native(result, b)
    return [result]


def _cast(cx: FoldContext) -> list[np.ndarray]:
    data = need(cx, 0)
    if data.dtype == object:
        return [data]
    to = cx.attr("to")
    if cx.op_type == "CastLike":
        like = need(cx, 1)
        return [data.astype(like.dtype)]
    import onnx
    try:
        dt = onnx.helper.tensor_dtype_to_np_dtype(int(to))
    except Exception:
        raise Unfoldable("unknown cast target") from None
    return [data.astype(dt)]


def _unary(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[FoldContext], list[np.ndarray]]:
    def f(cx: FoldContext) -> list[np.ndarray]:
        data = need(cx, 0)
        if data.dtype == object:
            if cx.op_type in ("Identity", "Floor", "Ceil") and all(isinstance(to_elem(e), (int, Poly))
                                                              for e in data.reshape(-1).tolist()):
                return [data]
            if cx.op_type == "Neg":
                return [pack(np.frompyfunc(lambda a: dim_sub(0, to_elem(a)), 1, 1)(data))]
            raise Unfoldable("symbolic unary")
        return [fn(data)]
    return f


def _reduce(kind: str) -> Callable[[FoldContext], list[np.ndarray]]:
    def f(cx: FoldContext) -> list[np.ndarray]:
        data = need(cx, 0)
        axes = opt_ints(cx, 1, "axes") if cx.n_inputs() > 1 else cx.attr("axes")
        keep = bool(cx.attr("keepdims", 1))
        ax = None if not axes else tuple(a % data.ndim for a in axes)
        if data.dtype == object:
            if kind not in ("prod", "sum"):
                raise Unfoldable("symbolic reduce")
            fn = np.frompyfunc(_binary_sym(dim_mul if kind == "prod" else dim_add), 2, 1)
            out = fn.reduce(data, axis=ax, keepdims=keep) if data.size else np.array(1 if kind == "prod" else 0)
            return [pack(np.asarray(out, dtype=object) if not isinstance(out, np.ndarray) else out)]
        reducers: dict[str, Callable[..., Any]] = {"prod": np.prod, "sum": np.sum, "max": np.max, "min": np.min}
        return [np.asarray(reducers[kind](data, axis=ax, keepdims=keep))]
    return f


def _where(cx: FoldContext) -> list[np.ndarray]:
    cond, a, b = need(cx, 0), need(cx, 1), need(cx, 2)
    if a.dtype == object or b.dtype == object:
        a, b = a.astype(object), b.astype(object)
    return [np.where(cond.astype(bool), a, b)]


def _logic(cx: FoldContext) -> list[np.ndarray]:
    arrs = [need(cx, i).astype(bool) for i in range(cx.n_inputs())]
    fn = {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}.get(cx.op_type)
    return [np.logical_not(arrs[0])] if fn is None else [fn(arrs[0], arrs[1])]


MATH_FOLDERS: dict[str, Callable[[FoldContext], list[np.ndarray]]] = {
    "Cast": _cast, "CastLike": _cast, "Where": _where, "Not": _logic, "And": _logic, "Or": _logic,
    "Xor": _logic, "Identity": _unary(lambda a: a), "Neg": _unary(np.negative), "Abs": _unary(np.abs),
    "Floor": _unary(np.floor), "Ceil": _unary(np.ceil), "Sqrt": _unary(np.sqrt),
    "ReduceProd": _reduce("prod"), "ReduceSum": _reduce("sum"), "ReduceMax": _reduce("max"),
    "ReduceMin": _reduce("min"), **{op: _elementwise for op in (*_ARITH, *_COMPARE)},
}
