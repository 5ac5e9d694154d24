"""Reshapes whose target shape is computed at run time (a graph input, ``Concat(-1, ReduceMax(L))``).

Why: ONNX cannot say what such a reshape produces, and sizing each open dim by a guess (the input's
element count, or a default as large as the input) invented outputs with far more elements than
the input and matmuls whose inner dims disagreed, so the counts came out wrong with no word said.
What is certain is that the output holds the input's elements. So the open dims are settled, in
order, from the target's known entries (a constant piece of a ``Concat``, a 0 that copies the
input's dim), from the direct consumers that pin them (a matmul's contracted dim, an elementwise
operand's size), and the last one (the ``-1`` if the target has one) from the element count. When
more than one stays open, the others become named dims with no default that the user binds
(``--set``); binding is refused until then, and the cost model checks the element count once bound.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from onnx import NodeProto

from ...errors import ShapeError
from ...ir import DimSpec, Op, Sym
from .fold_values import as_dims
from .shape_base import Dim, length_of, numel, rule_error
from .shapes import OutSpec
from .symdims import dim_eq, dim_floordiv

if TYPE_CHECKING:
    from .node import NodeCx

__all__ = ["open_reshape"]

#: Elementwise ops whose operands broadcast numpy-style: a known size (> 1) of another operand on
#: the same axis is the reshape's size there.
_ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "Where", "Equal",
                          "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "PRelu",
                          "BitShift", "Mod"})


def open_reshape(cx: NodeCx, data: tuple[Dim, ...] | None, allowzero: bool) -> OutSpec | None:
    """The output of a Reshape whose target values are not (all) known; None when even its rank is not."""
    n = length_of(cx, 1)
    if n is None:
        return None
    out: list[Dim | None] = []
    minus = -1
    for i, e in enumerate(_target_entries(cx, n)):
        if e is None:
            out.append(None)
        elif isinstance(e, int) and e == 0 and not allowzero:
            out.append(data[i] if data is not None and i < len(data) else None)
        elif isinstance(e, int) and e == -1:
            if minus >= 0:
                raise rule_error(cx, "Reshape target has more than one -1")
            minus = i
            out.append(None)
        elif isinstance(e, int) and e < -1:
            raise rule_error(cx, f"Reshape target has a negative size {e}")
        else:
            out.append(e)
    pins = _pins(cx, n)
    for i, size in pins.items():
        if out[i] is None:
            out[i] = size
        elif isinstance(out[i], int) and out[i] != size:
            raise rule_error(cx, f"Reshape output dim {i} is {out[i]}, but a consumer of {cx.outs[0]!r} "
                                 f"needs {size} there")
    still = [i for i, d in enumerate(out) if d is None]
    if data is None:
        return (None, tuple(_fresh(cx, i, "") if d is None else d for i, d in enumerate(out)))
    total = numel(data)
    if not still:
        new = numel(tuple(out))
        if dim_eq(new, total) is False:
            raise rule_error(cx, f"cannot reshape {_fmt(data)} ({total} elements) to {_fmt(out)} ({new} elements)")
        return (None, tuple(out))
    solved = minus if minus in still else still[-1]
    names = [_fresh(cx, i, str(solved)) for i in still if i != solved]
    for i, sym in zip((i for i in still if i != solved), names):
        out[i] = sym
    rest = numel(tuple(d for i, d in enumerate(out) if i != solved))
    if isinstance(total, int) and isinstance(rest, int) and (rest == 0 or total % rest):
        raise rule_error(cx, f"cannot reshape {_fmt(data)} ({total} elements) to {_fmt(out)}: "
                             f"{rest} does not divide {total}" + _pinned(cx, pins))
    out[solved] = dim_floordiv(total, rest) if rest != 0 else 0
    return (None, tuple(out))


def _target_entries(cx: NodeCx, n: int) -> list[Any]:
    """The target's entries, None where unknown: the known pieces of a ``Concat`` that builds it."""
    v = cx.input(1)
    node = v.producer if v is not None else None
    if node is None or node.op is not Op.CONCAT:
        return [None] * n
    entries: list[Any] = []
    for piece in node.inputs:
        if piece is None:
            continue
        known = as_dims(cx.scope.known_value(piece.name))
        if known is not None:
            entries.extend(known)
            continue
        shape = piece.type.shape
        length = shape[0] if len(shape) == 1 else 1
        if len(shape) > 1 or not isinstance(length, int):
            return [None] * n
        entries.extend([None] * length)
    return entries if len(entries) == n else [None] * n


def _pins(cx: NodeCx, n: int) -> dict[int, int]:
    """Sizes the reshape's direct consumers fix: output axis -> size (known ints only)."""
    pins: dict[int, int] = {}
    out = cx.outs[0] if cx.outs else ""
    if not out:
        return pins
    for node in _consumers(cx, out):
        ins = list(node.input)
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "MatMul" and len(ins) >= 2:
            if ins[0] == out and ins[1] != out:
                b = _dims(cx, ins[1])
                k = b[0] if b is not None and len(b) == 1 else (b[-2] if b else None)
                _pin(pins, n - 1, k)
            elif ins[1] == out and ins[0] != out and n >= 2:
                a = _dims(cx, ins[0])
                _pin(pins, n - 2, a[-1] if a else None)
        elif node.op_type == "Gemm" and len(ins) >= 2 and n == 2:
            attrs = {a.name: a.i for a in node.attribute}
            ta, tb = attrs.get("transA", 0), attrs.get("transB", 0)
            if ins[0] == out and ins[1] != out:
                b = _dims(cx, ins[1])
                _pin(pins, 0 if ta else 1, b[1 if tb else 0] if b is not None and len(b) == 2 else None)
            elif ins[1] == out and ins[0] != out:
                a = _dims(cx, ins[0])
                _pin(pins, 1 if tb else 0, a[0 if ta else 1] if a is not None and len(a) == 2 else None)
        elif node.op_type in _ELEMENTWISE:
            for other in ins:
                if not other or other == out:
                    continue
                d = _dims(cx, other)
                if d is None or len(d) > n:
                    continue
                for j, size in enumerate(d):
                    if isinstance(size, int) and size > 1:
                        _pin(pins, n - len(d) + j, size)
    return pins


def _pin(pins: dict[int, int], axis: int, size: Any) -> None:
    if axis >= 0 and isinstance(size, int) and not isinstance(size, bool) and size > 0:
        pins.setdefault(axis, size)


def _consumers(cx: NodeCx, name: str) -> list[NodeProto]:
    proto = cx.scope.proto
    if proto is None:
        return []
    return [node for node in proto.node if name in node.input]


def _dims(cx: NodeCx, name: str) -> tuple[Any, ...] | None:
    """The dims of ``name``: its IR type when already lowered, else ONNX's inference of it."""
    v = cx.scope.value(name)
    if v is not None:
        return tuple(v.type.shape)
    try:
        raw = cx.lw.state.raw(cx.scope.type_of(name), name, cx.name, lenient=True)
    except ShapeError:
        return None
    return None if raw is None or raw[1] is None else raw[1]


def _fresh(cx: NodeCx, axis: int, solved: str) -> Sym:
    """A named dim with no default: the user binds it, the solved dim follows from it."""
    state = cx.lw.state
    value = cx.outs[0]
    sym = state.generate(value, axis, cx.name, cx.source.op, None)
    name = sym.expr
    spec = state.dims[name]
    if "target shape" not in spec.doc:
        follows = f"; dim {solved} follows from the element count" if solved else ""
        state.dims[name] = DimSpec(name, doc=f"unknown dim {axis} of {value!r}, the output of Reshape node "
                                             f"{cx.name!r} whose target shape is computed at run time{follows}")
    return sym


def _pinned(cx: NodeCx, pins: dict[int, int]) -> str:
    if not pins:
        return ""
    return " (its consumers fix " + ", ".join(f"dim {i} to {s}" for i, s in sorted(pins.items())) + ")"


def _fmt(dims: Any) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
