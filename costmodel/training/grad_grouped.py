"""Gradients of a grouped GEMM (the experts of a mixture of experts), as two grouped GEMMs.

Why two ``GROUPED_DOT`` nodes: the backward of ``y = x W_e`` row by row is what torch's
``_grouped_mm`` backward (and any grouped MoE kernel) runs: ``dx = dy W_e^T`` for every routed row,
the same grouped GEMM over the same experts contracted on the other weight dim, and ``dW_e = x_e^T
dy_e`` for every expert over its own rows (``role="grad_weight"``). Each is 2 x S x K x N FLOPs, the
forward's count, so a grouped GEMM trains at three times its forward like a dense linear layer; and
both keep the routing, so the expert balance and expert-parallel sharding treat them as the forward.
"""

from __future__ import annotations

from ...ir import Node, Op, Value
from ...ir.dims import Dim
from .context import GradContext, Grads

__all__ = ["grouped_dot_grad"]


def grouped_dot_grad(cx: GradContext, node: Node, dys: list[Value | None], wants: list[bool]) -> Grads:
    """``dx`` (grouped GEMM of ``dy`` with the same experts, ``rhs_contract`` flipped) and ``dW``
    (``role="grad_weight"`` over ``x`` and ``dy``); offsets are data and get no gradient."""
    x, w = node.inputs[0], node.inputs[1]
    dy = dys[0]
    assert x is not None and w is not None and dy is not None
    rc = int(node.attrs["rhs_contract"])
    keep = {k: v for k, v in node.attrs.items() if k in ("top_k", "expert_rows", "capacity")}
    offsets = list(node.inputs[2:3])
    out: Grads = [None] * len(node.inputs)
    if wants[0]:
        shape: tuple[Dim, ...] = (dy.shape[0], w.shape[rc])
        out[0] = cx.emit(Op.GROUPED_DOT, [dy, cx.val(w), *offsets], shape, dy.dtype,
                         {"rhs_contract": 3 - rc, **keep, "role": "grad_lhs"}, name="grad_lhs")
    if wants[1]:
        out[1] = cx.like(Op.GROUPED_DOT, [cx.val(x), dy, *offsets], w,
                         {"rhs_contract": rc, **keep, "role": "grad_weight"}, name="grad_weight")
    return out
