"""Gradients of the heavy ops: contractions, convolutions, fused attention.

Each gradient is an ordinary canonical op, so the cost rules count it: a ``DOT``'s two gradients are
two ``DOT`` nodes (``dX = dY . W`` and ``dW = X^T . dY`` for a linear layer, each 2 x M x N x K FLOPs,
what ``torch.utils.flop_counter`` counts for ``mm``/``bmm`` backward); a convolution's are the
transposed convolution and the weight-gradient correlation the torch frontend already lowers
``convolution_backward`` to; fused attention's is one ``ATTENTION_BACKWARD`` (scores recomputed, then
four matmuls: 2.5x the forward's matmul FLOPs, as FlashAttention's backward and FlopCounterMode's
``sdpa_backward_flop_count`` count it).
"""

from __future__ import annotations

from ...ir import Node, Op, TensorType, Value
from ...ir.dims import Dim
from ...ir.typecheck import broadcast_shapes
from .context import GradContext, Grads

__all__ = ["dot_grad", "conv_grad", "attention_grad"]


def _grad_dot(cx: GradContext, x: Value, y: Value, xc: tuple[int, ...], yc: tuple[int, ...],
              xb: tuple[int, ...], yb: tuple[int, ...], target_batch: list[int], x_label: dict[int, int],
              y_label: dict[int, int], target: Value, name: str) -> Value:
    """``dot_general(x, y)`` laid out as ``target``: batch dims, then x's free dims, then y's, each
    labelled with the target dim it becomes. Tries both operand orders for the target's layout and
    transposes only when neither gives it (never for a linear layer or a batched matmul)."""
    rank = target.type.rank
    choices = [(x, y, xc, yc, xb, yb, x_label, y_label), (y, x, yc, xc, yb, xb, y_label, x_label)]
    best = None
    for a, b, ac, bc, ab, bb, al, bl in choices:
        af = [d for d in range(a.type.rank) if d not in ac and d not in ab]
        bf = [d for d in range(b.type.rank) if d not in bc and d not in bb]
        order = [*target_batch, *(al[d] for d in af), *(bl[d] for d in bf)]
        batch = broadcast_shapes([tuple(a.shape[i] for i in ab), tuple(b.shape[j] for j in bb)])
        shape: tuple[Dim, ...] = (*(batch or tuple(a.shape[i] for i in ab)), *(a.shape[d] for d in af),
                                  *(b.shape[d] for d in bf))
        cand = (a, b, ac, bc, ab, bb, order, shape)
        if order == list(range(rank)):
            best = cand
            break
        best = best or cand
    assert best is not None
    a, b, ac, bc, ab, bb, order, shape = best
    attrs = {"lhs_contract": ac, "rhs_contract": bc, "lhs_batch": ab, "rhs_batch": bb, "role": name}
    out = cx.emit(Op.DOT, [a, b], shape, a.dtype, attrs, name=name)
    if order != list(range(rank)):
        perm = tuple(order.index(j) for j in range(rank))
        out = cx.emit(Op.PERMUTE, [out], tuple(shape[p] for p in perm), out.dtype, {"perm": perm},
                      name=f"{name}_transpose")
    return out


def dot_grad(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """dot_general's two gradients, each one ``DOT`` contracting the output gradient with the other
    operand over what the forward kept (``dL = dO . R`` over R's free dims, ``dR = L . dO`` over L's)."""
    lhs, rhs = node.inputs[0], node.inputs[1]
    dy = dys[0]
    assert lhs is not None and rhs is not None and dy is not None
    a = node.attrs
    lc, rc = tuple(a["lhs_contract"]), tuple(a["rhs_contract"])
    lb, rb = tuple(a.get("lhs_batch", ())), tuple(a.get("rhs_batch", ()))
    nb = len(lb)
    lf = [d for d in range(lhs.type.rank) if d not in lc and d not in lb]
    rf = [d for d in range(rhs.type.rank) if d not in rc and d not in rb]
    dy_batch = tuple(range(nb))
    dy_lf = tuple(range(nb, nb + len(lf)))
    dy_rf = tuple(range(nb + len(lf), nb + len(lf) + len(rf)))
    out: Grads = [None] * len(node.inputs)
    if wants[0]:
        out[0] = _grad_dot(cx, dy, cx.val(rhs), dy_rf, tuple(rf), dy_batch, rb, list(lb),
                           dict(zip(dy_lf, lf)), {r: lc[rc.index(r)] for r in rc}, lhs, "grad_lhs")
    if wants[1]:
        out[1] = _grad_dot(cx, cx.val(lhs), dy, tuple(lf), dy_lf, lb, dy_batch, list(rb),
                           {d: rc[lc.index(d)] for d in lc}, dict(zip(dy_rf, rf)), rhs, "grad_rhs")
    return out


def conv_grad(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """grad_input: the convolution in the other direction over the output gradient; grad_weight: the
    correlation of input and output gradient (the forms the torch frontend gives
    ``convolution_backward``, which the conv rule counts as torch does)."""
    x, w = node.inputs[0], node.inputs[1]
    dy = dys[0]
    assert x is not None and w is not None and dy is not None
    base = {k: v for k, v in node.attrs.items() if k not in ("phase", "role")}
    transposed = bool(node.attrs.get("transposed", False))
    out: Grads = [None] * len(node.inputs)
    if wants[0]:
        out[0] = cx.like(Op.CONV, [dy, cx.val(w)], x, {**base, "transposed": not transposed, "role": "grad_input"},
                         name="grad_input")
    if wants[1]:
        out[1] = cx.like(Op.CONV, [cx.val(x), dy], w, {**base, "transposed": transposed, "role": "grad_weight"},
                         name="grad_weight")
    return out


def attention_grad(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """One ``ATTENTION_BACKWARD(dO, q, k, v, mask, O)`` giving dq, dk, dv: a fused kernel reads the
    saved output (and its softmax statistics, too small to list) and recomputes the scores, so no
    ``seq x seq`` tensor is kept. An additive mask gets no gradient here (it would be unmodeled)."""
    q, k, v = node.inputs[0], node.inputs[1], node.inputs[2]
    dy = dys[0]
    assert q is not None and k is not None and v is not None and dy is not None
    mask = node.inputs[3] if len(node.inputs) > 3 else None
    attrs = {key: val for key, val in node.attrs.items() if key != "phase"}
    ins = [dy, cx.val(q), cx.val(k), cx.val(v), None if mask is None else cx.val(mask), cx.val(node.outputs[0])]
    types = [TensorType(t.dtype, t.shape) for t in (q.type, k.type, v.type)]
    dq, dk, dv = cx.emit_types(Op.ATTENTION_BACKWARD, ins, types, attrs, name="grad")
    out: Grads = [None] * len(node.inputs)
    for i, g in enumerate((dq, dk, dv)):
        if wants[i]:
            out[i] = g
    return out
