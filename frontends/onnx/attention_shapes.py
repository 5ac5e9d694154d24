"""Output shapes of ONNX's own ``Attention`` (opset 23), from its operands and head attributes.

Why narrowpipe states them itself: ONNX's inference leaves the ``present_key``/``present_value``
outputs of a node with a past cache without a rank when the lengths are symbolic (it cannot add
``past + new``), and a decoder-with-past export leaves those outputs untyped. The shapes are the
spec's: Y ``[B, q_heads, S, Hv]`` (4-D) or ``[B, S, q_heads * Hv]`` (3-D); the presents
``[B, kv_heads, P + L, H]`` and ``[B, kv_heads, P + L, Hv]``; ``qk_matmul_output``
``[B, q_heads, S, P + L]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .shape_base import Dim, RuleContext, rule_error
from .shapes import OutSpec
from .symdims import dim_add, dim_floordiv, dim_mul

__all__ = ["ATTENTION_SHAPE_RULES"]


def _heads(cx: RuleContext, name: str) -> int:
    """A positive head-count attribute, which a 3-D Attention needs to split its hidden dims."""
    n = cx.attr(name)
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise rule_error(cx, f"Attention with 3-D inputs needs a positive INT {name}, got {n!r}")
    return n


def _split(cx: RuleContext, shape: tuple[Any, ...], heads_attr: str) -> tuple[Dim, Dim, Dim, Dim]:
    """(batch, heads, length, head size) of a 4-D ``[B, N, L, H]`` or 3-D ``[B, L, N*H]`` operand."""
    if len(shape) == 4:
        return shape[0], shape[1], shape[2], shape[3]
    if len(shape) != 3:
        raise rule_error(cx, f"Attention operands are 3-D or 4-D, got rank {len(shape)}")
    n = _heads(cx, heads_attr)
    return shape[0], n, shape[1], dim_floordiv(shape[2], n)


def _attention_shapes(cx: RuleContext) -> list[OutSpec | None]:
    q, k, v = cx.shape(0), cx.shape(1), cx.shape(2)
    if q is None or k is None or v is None:
        return [None] * cx.n_outputs()
    b, hq, s, _ = _split(cx, q, "q_num_heads")
    _, hk, length, h = _split(cx, k, "kv_num_heads")
    _, _, _, hv = _split(cx, v, "kv_num_heads")
    past = cx.shape(4) if cx.n_inputs() > 4 else None
    total = dim_add(past[2], length) if past is not None and len(past) == 4 else length
    dt = cx.dtype(0)
    y = (b, hq, s, hv) if len(q) == 4 else (b, s, dim_mul(hq, hv))
    specs: list[OutSpec | None] = [(dt, y), (dt, (b, hk, total, h)), (dt, (b, hk, total, hv)),
                                   (dt, (b, hq, s, total))]
    return specs[:cx.n_outputs()]


ATTENTION_SHAPE_RULES: dict[str, Callable[[Any], list[OutSpec | None]]] = {"Attention": _attention_shapes}
