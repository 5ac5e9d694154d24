"""Gradients of elementwise ops, following torch's ``derivatives.yaml`` one canonical op per aten op.

Why torch's formulas: they are what eager training runs, so the backward's node count, FLOPs (one
per element per op, the elementwise rule's convention) and bytes match a real step. An activation
whose backward torch runs as one kernel (``gelu_backward``, ``silu_backward``, ``threshold_backward``,
``tanh_backward``) is one node here too, spelled as the trace frontend spells that kernel (the op
itself, ``WHERE`` or ``MUL``) and reading the gradient and the saved input (or output). Gradients
that broadcast are summed back to their operand's shape by the walker (:meth:`GradContext.fit`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...ir import DType, Node, Op, Value
from .context import GradContext, Grads

__all__ = ["ELEMENTWISE_GRADS", "NON_DIFFERENTIABLE"]

#: Ops whose outputs carry no gradient (comparisons, rounding, index and random sources).
NON_DIFFERENTIABLE: frozenset[Op] = frozenset({
    Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE, Op.AND, Op.OR, Op.XOR, Op.NOT, Op.BITWISE, Op.ISNAN,
    Op.ISINF, Op.FLOOR, Op.CEIL, Op.ROUND, Op.SIGN, Op.ARGMAX, Op.ARGMIN, Op.IOTA, Op.FILL, Op.RANDOM,
    Op.CONSTANT, Op.SHAPE_OF, Op.NONZERO, Op.NMS})

#: One kernel reading (dy, x) and writing dx, spelled as that kernel: the op itself
#: (``gelu_backward`` -> GELU), ``WHERE`` for the masks (``threshold_backward``, ``hardtanh_backward``).
_ONE_KERNEL_ON_INPUT: dict[Op, Op] = {
    Op.GELU: Op.GELU, Op.SILU: Op.SILU, Op.ELU: Op.ELU, Op.SELU: Op.ELU, Op.SOFTPLUS: Op.SOFTPLUS,
    Op.MISH: Op.MISH, Op.HARDSIGMOID: Op.HARDSIGMOID, Op.HARDSWISH: Op.HARDSWISH,
    Op.LEAKY_RELU: Op.WHERE, Op.CLAMP: Op.WHERE, Op.HARDTANH: Op.WHERE}
#: The same on the saved *output*: derivatives.yaml's ``relu: threshold_backward(grad, result, 0)``, so
#: torch saves ReLU's result, not its input (an out-of-place ReLU between two Linears saves the
#: input of the first and the ReLU's output, which the second saves anyway; the pre-ReLU tensor is freed).
_ONE_KERNEL_ON_OUTPUT: dict[Op, Op] = {Op.RELU: Op.WHERE}

#: Chains over dy, the input x, the output y and the previous step t: (op, operands, scalar).
_Step = tuple[Op, tuple[str, ...], float | None]
_CHAINS: dict[Op, list[_Step]] = {
    Op.TANH: [(Op.MUL, ("dy", "y"), None)],                       # tanh_backward(dy, y)
    Op.SIGMOID: [(Op.MUL, ("dy", "y"), None)],                    # sigmoid_backward(dy, y)
    Op.EXP: [(Op.MUL, ("dy", "y"), None)],                        # grad * result
    Op.LOG: [(Op.DIV, ("dy", "x"), None)],                        # grad / self
    Op.SQRT: [(Op.MUL, ("y",), 2.0), (Op.DIV, ("dy", "t"), None)],   # grad / (2 * result)
    Op.RSQRT: [(Op.POW, ("y",), 3.0), (Op.MUL, ("dy", "t"), None), (Op.MUL, ("t",), -0.5)],
    Op.ERF: [(Op.POW, ("x",), 2.0), (Op.NEG, ("t",), None), (Op.EXP, ("t",), None),
             (Op.MUL, ("t",), 1.1283791670955126), (Op.MUL, ("dy", "t"), None)],
    Op.SIN: [(Op.COS, ("x",), None), (Op.MUL, ("dy", "t"), None)],
    Op.COS: [(Op.SIN, ("x",), None), (Op.NEG, ("t",), None), (Op.MUL, ("dy", "t"), None)],
    Op.TAN: [(Op.POW, ("y",), 2.0), (Op.ADD, ("t",), 1.0), (Op.MUL, ("dy", "t"), None)],
    Op.SINH: [(Op.COSH, ("x",), None), (Op.MUL, ("dy", "t"), None)],
    Op.COSH: [(Op.SINH, ("x",), None), (Op.MUL, ("dy", "t"), None)],
    Op.ATAN: [(Op.MUL, ("x", "x"), None), (Op.ADD, ("t",), 1.0), (Op.DIV, ("dy", "t"), None)],
    Op.ASIN: [(Op.MUL, ("x", "x"), None), (Op.SUB, ("t",), 1.0), (Op.NEG, ("t",), None),
              (Op.RSQRT, ("t",), None), (Op.MUL, ("dy", "t"), None)],
    Op.ACOS: [(Op.MUL, ("x", "x"), None), (Op.SUB, ("t",), 1.0), (Op.NEG, ("t",), None),
              (Op.RSQRT, ("t",), None), (Op.MUL, ("dy", "t"), None), (Op.NEG, ("t",), None)],
    Op.ASINH: [(Op.MUL, ("x", "x"), None), (Op.ADD, ("t",), 1.0), (Op.RSQRT, ("t",), None),
               (Op.MUL, ("dy", "t"), None)],
    Op.ACOSH: [(Op.MUL, ("x", "x"), None), (Op.SUB, ("t",), 1.0), (Op.RSQRT, ("t",), None),
               (Op.MUL, ("dy", "t"), None)],
    Op.ATANH: [(Op.MUL, ("x", "x"), None), (Op.SUB, ("t",), 1.0), (Op.NEG, ("t",), None),
               (Op.DIV, ("dy", "t"), None)],
    Op.NEG: [(Op.NEG, ("dy",), None)],
    Op.ABS: [(Op.SIGN, ("x",), None), (Op.MUL, ("dy", "t"), None)],           # grad * self.sgn()
    Op.SQUARE: [(Op.MUL, ("x",), 2.0), (Op.MUL, ("dy", "t"), None)],          # 2 * grad * self
    Op.RECIPROCAL: [(Op.MUL, ("y", "y"), None), (Op.MUL, ("dy", "t"), None), (Op.NEG, ("t",), None)],
}


def _chain(cx: GradContext, steps: Sequence[_Step], dy: Value, x: Value, y: Value) -> Value:
    env = {"dy": dy, "x": x, "y": y}
    for i, (op, names, scalar) in enumerate(steps):
        ins = [env[n] for n in names]
        attrs = {} if scalar is None else {"scalar": scalar}
        shape = dy.shape if any(v is dy for v in ins) else ins[0].shape
        env["t"] = cx.emit(op, ins, shape, dy.dtype, attrs, name=f"grad{i}" if i < len(steps) - 1 else "grad")
    return env["t"]


def _unary(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    x, y, dy = node.inputs[0], node.outputs[0], dys[0]
    assert x is not None and dy is not None
    out: Grads = [None] * len(node.inputs)
    if not wants[0]:
        return out
    kernel = _ONE_KERNEL_ON_INPUT.get(node.op) or _ONE_KERNEL_ON_OUTPUT.get(node.op)
    if kernel is not None:
        attrs = {k: v for k, v in node.attrs.items() if k not in ("phase", "role")}
        saved = y if node.op in _ONE_KERNEL_ON_OUTPUT else x
        out[0] = cx.like(kernel, [dy, cx.val(saved)], dy, {**attrs, "role": "grad"}, name="grad")
    else:
        out[0] = _chain(cx, _CHAINS[node.op], dy, cx.val(x), cx.val(y))
    return out


def _scalar_form(node: Node) -> bool:
    """``op(x, scalar)``: the frontends keep the Python scalar as an attribute, one tensor input."""
    return len([v for v in node.inputs if v is not None]) == 1


def _add(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """Both operands get the output gradient itself (summed over broadcast dims by the walker)."""
    return [dys[0] if w else None for w in wants]


def _sub(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    dy = dys[0]
    assert dy is not None
    out: Grads = [dy if wants[0] else None]
    if len(node.inputs) > 1:
        out.append(cx.like(Op.NEG, [dy], dy, name="grad_rhs") if wants[1] else None)
    return out


def _mul(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """``grad * other`` for each side (a dropout mask or a scalar included)."""
    dy = dys[0]
    assert dy is not None
    if _scalar_form(node):
        s = node.attrs.get("scalar")
        attrs = {"scalar": s} if s is not None else {}
        return [cx.like(Op.MUL, [dy], dy, attrs, name="grad") if wants[0] else None]
    a, b = node.inputs[0], node.inputs[1]
    assert a is not None and b is not None
    return [cx.like(Op.MUL, [dy, cx.val(b)], dy, name="grad_lhs") if wants[0] else None,
            cx.like(Op.MUL, [dy, cx.val(a)], dy, name="grad_rhs") if wants[1] else None]


def _div(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """``grad / other``; the divisor's ``-grad * result / other``."""
    dy = dys[0]
    assert dy is not None
    if _scalar_form(node):
        s = node.attrs.get("scalar")
        return [cx.like(Op.DIV, [dy], dy, {"scalar": s} if s is not None else {}, name="grad") if wants[0] else None]
    b = node.inputs[1]
    assert b is not None
    out: Grads = [cx.like(Op.DIV, [dy, cx.val(b)], dy, name="grad_lhs") if wants[0] else None, None]
    if wants[1]:
        t = cx.like(Op.DIV, [cx.val(node.outputs[0]), cx.val(b)], dy, name="grad_rhs0")
        out[1] = cx.like(Op.NEG, [cx.like(Op.MUL, [dy, t], dy, name="grad_rhs1")], dy, name="grad_rhs")
    return out


def _pow(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """``grad * p * x^(p-1)`` (torch's ``pow_backward``); for a tensor exponent also ``grad * y * log x``."""
    dy, x = dys[0], node.inputs[0]
    assert dy is not None and x is not None
    xv = cx.val(x)
    if _scalar_form(node):
        if not wants[0]:
            return [None]
        p = node.attrs.get("scalar")
        p = float(p) if isinstance(p, (int, float)) else 2.0
        t = cx.like(Op.POW, [xv], dy, {"scalar": p - 1}, name="grad0")
        t = cx.like(Op.MUL, [t], dy, {"scalar": p}, name="grad1")
        return [cx.like(Op.MUL, [dy, t], dy, name="grad")]
    e = node.inputs[1]
    assert e is not None
    ev = cx.val(e)
    out: Grads = [None, None]
    if wants[0]:
        t = cx.like(Op.SUB, [ev], ev, {"scalar": 1.0}, name="grad_lhs0")
        t = cx.like(Op.POW, [xv, t], dy, name="grad_lhs1")
        t = cx.like(Op.MUL, [t, ev], dy, name="grad_lhs2")
        out[0] = cx.like(Op.MUL, [dy, t], dy, name="grad_lhs")
    if wants[1]:
        t = cx.like(Op.LOG, [xv], xv, name="grad_rhs0")
        t = cx.like(Op.MUL, [cx.val(node.outputs[0]), t], dy, name="grad_rhs1")
        out[1] = cx.like(Op.MUL, [dy, t], dy, name="grad_rhs")
    return out


def _extreme(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """maximum/minimum: the gradient goes where each side won (one comparison, one select per side)."""
    dy, a = dys[0], node.inputs[0]
    assert dy is not None and a is not None
    ins = [cx.val(v) for v in node.inputs if v is not None]
    cmp = Op.GE if node.op is Op.MAXIMUM else Op.LE
    attrs = {"scalar": node.attrs["scalar"]} if "scalar" in node.attrs else {}
    mask = cx.emit(cmp, ins, dy.shape, DType.BOOL, attrs, name="grad_mask")
    return [cx.like(Op.WHERE, [mask, dy], dy, name=f"grad{i}") if w else None for i, w in enumerate(wants)]


def _condition(node: Node) -> int | None:
    """Which input of a ``WHERE`` is the boolean mask: 0 in ``where(cond, a, b)``; 1 in the
    ``masked_fill`` form ``where(x, mask)`` (the fill a ``scalar`` attribute) or ``where(x, mask,
    value)`` (a tensor fill), as the torch frontend lowers ``aten.masked_fill``. None when no input
    is a mask (``threshold``, ``nan_to_num``: a tensor and scalars), which this rule does not cover."""
    for i, v in enumerate(node.inputs):
        if v is not None and v.dtype is DType.BOOL:
            return i
    return None


def _where(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """Each data operand gets the gradient where it was chosen, zero elsewhere: one select reading
    the mask and dy. For ``masked_fill`` that is derivatives.yaml's ``grad.masked_fill(mask, 0)`` for
    ``self`` and ``masked_fill_backward`` for a tensor ``value`` (the walker sums it to its shape).
    Without a mask input no gradient is given, and the walker lists the node as unmodeled."""
    dy = dys[0]
    assert dy is not None
    out: Grads = [None] * len(node.inputs)
    at = _condition(node)
    if at is None:
        return out
    cond = node.inputs[at]
    assert cond is not None
    for i, w in enumerate(wants):
        if w and i != at:
            out[i] = cx.like(Op.WHERE, [cx.val(cond), dy], dy, name=f"grad{i}")
    return out


def _through(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """Casts and copies pass the gradient back (the walker casts it to the operand's dtype)."""
    return [dys[0] if i == 0 and w else None for i, w in enumerate(wants)]


Rule = Callable[[GradContext, Node, list[Value | None], list[bool]], Grads]
ELEMENTWISE_GRADS: dict[Op, Rule] = {
    **dict.fromkeys((*_ONE_KERNEL_ON_INPUT, *_ONE_KERNEL_ON_OUTPUT, *_CHAINS), _unary),
    Op.ADD: _add, Op.SUB: _sub, Op.MUL: _mul, Op.DIV: _div, Op.POW: _pow, Op.MAXIMUM: _extreme,
    Op.MINIMUM: _extreme, Op.WHERE: _where, Op.CAST: _through, Op.COPY: _through, Op.IDENTITY: _through,
}
