"""The window attributes ONNX's convolutions and pools share (``strides``, ``dilations``, ``pads``,
``auto_pad``, ``kernel_shape``), read and checked once for both.

Why the frontend checks lengths itself: ONNX's ``pads`` holds a begin and an end per spatial axis, so
a list of another length would read as something else in the IR (two values for a 2-D conv would pass
as symmetric pads), and a conv's ``kernel_shape`` is not kept (the weight's dims are its kernel), so a
disagreement is caught here or never. Values the IR can judge (a stride of 0, a negative pad) go to its
rule, :func:`narrowpipe.ir.window_checks.window_attr_problems`, before the shape rules divide by them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import ShapeError
from ...ir import Dim
from ...ir.window_checks import window_attr_problems
from .node import NodeCx

__all__ = ["window_attrs", "check_window_attrs"]


def _ints(cx: NodeCx, name: str, n: int, default: int, per_dim: int = 1) -> list[int]:
    """Attribute ``name``: ``per_dim`` ints per spatial dim (ONNX's pads: 2)."""
    count = n * per_dim
    v = cx.attr(name)
    if v is None:
        return [default] * count
    if not isinstance(v, list) or not all(isinstance(d, int) for d in v):
        raise cx.error(f"attribute {name} {v!r} is not a list of integers", ShapeError)
    if len(v) != count:
        raise cx.error(f"attribute {name} {v} has {len(v)} values; {n} spatial dims need {count}", ShapeError)
    return [int(d) for d in v]


def window_attrs(cx: NodeCx, n: int, kernel: Sequence[Dim] | None = None) -> dict[str, Any]:
    """``stride``, ``dilation`` and ``padding`` (``2n`` values: begins, then ends) of a node over ``n``
    spatial dims, with ``auto_pad`` when set; ``kernel``: the weight's kernel dims, which a conv's
    ``kernel_shape`` must state again."""
    stated = cx.attr("kernel_shape")
    if stated is not None:
        ks = _ints(cx, "kernel_shape", n, 1)
        if kernel is not None and any(isinstance(k, int) and a != k for a, k in zip(ks, kernel)):
            raise cx.error(f"kernel_shape {ks} disagrees with the weight's kernel {list(kernel)}", ShapeError)
    attrs: dict[str, Any] = {"stride": tuple(_ints(cx, "strides", n, 1)),
                             "padding": tuple(_ints(cx, "pads", n, 0, per_dim=2)),
                             "dilation": tuple(_ints(cx, "dilations", n, 1))}
    auto = str(cx.attr("auto_pad", "NOTSET"))
    if auto != "NOTSET":
        attrs["auto_pad"] = auto
    return attrs


def check_window_attrs(cx: NodeCx, attrs: dict[str, Any], n: int, *, conv: bool) -> dict[str, Any]:
    """``attrs`` when the IR's rule finds nothing wrong with them; else a ShapeError naming the node."""
    problems = window_attr_problems(attrs, n, conv=conv)
    if problems:
        raise cx.error("; ".join(problems), ShapeError)
    return attrs
