"""The window arithmetic of convolutions and pooling: an output size from the input size, the kernel,
stride, dilation and padding.

Why here, once: the ONNX frontend's shape rules compute output types with it, the verifier
(:mod:`.window_checks`) holds every conv and pool node to it, and the cost model holds bound shapes to
it; copies of ``floor((x + pads - dilation*(k-1) - 1) / stride) + 1`` would drift apart. The arithmetic
is the IR's dim algebra, so a symbolic input size gives a symbolic output size (``seq - 4`` for a
kernel of 5), which the checks compare structurally and decide once the dims are bound.

Padding comes as one value per spatial dim (both sides, torch's form), two per dim (all begins, then
all ends: ONNX's ``pads``), or a mode: torch's ``"same"``/``"valid"`` strings or ONNX's ``auto_pad``.
The attributes are assumed valid here (:func:`.window_checks.window_attr_problems` says when not).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .dims import Dim, dim_add, dim_ceildiv, dim_floordiv, dim_mul, dim_sub

__all__ = ["window_out", "transposed_out", "pad_pairs", "conv_spatial", "pool_spatial", "SAME_MODES"]

#: ``auto_pad`` values (ONNX) and ``padding`` strings (torch) whose output is ``ceil(x / stride)``
#: (``x * stride`` for a transposed conv) whatever the kernel.
SAME_MODES = frozenset({"SAME_UPPER", "SAME_LOWER", "same"})
_VALID_MODES = frozenset({"VALID", "valid"})


def window_out(x: Dim, k: Dim, stride: int, dilation: int, pad_total: int, ceil_mode: bool = False) -> Dim:
    """The positions a window of ``k`` taps, ``dilation`` apart, takes in steps of ``stride`` over the
    padded input: ``floor((x + pads - dilation*(k-1) - 1) / stride) + 1`` (ceil with ``ceil_mode``)."""
    span = dim_sub(dim_add(x, pad_total), dim_add(dim_mul(dilation, dim_sub(k, 1)), 1))
    q = dim_ceildiv(span, stride) if ceil_mode else dim_floordiv(span, stride)
    return dim_add(q, 1)


def transposed_out(x: Dim, k: Dim, stride: int, dilation: int, pad_total: int, output_padding: int) -> Dim:
    """A transposed conv's output, the inverse of :func:`window_out`:
    ``(x - 1) * stride - pads + dilation*(k-1) + output_padding + 1``."""
    spread = dim_mul(dim_sub(x, 1), stride)
    return dim_add(dim_sub(spread, pad_total), dim_add(dim_mul(dilation, dim_sub(k, 1)), output_padding + 1))


def pad_pairs(padding: Any, n: int) -> list[tuple[int, int]] | None:
    """(begin, end) per spatial dim from ``n`` values (both sides) or ``2n`` (begins, then ends);
    None for a padding mode string or a list of another length."""
    if isinstance(padding, str) or not isinstance(padding, Sequence):
        return None
    p = [int(v) for v in padding]
    if len(p) == n:
        return [(v, v) for v in p]
    if len(p) == 2 * n:
        return [(p[i], p[i + n]) for i in range(n)]
    return None


def _mode(attrs: Mapping[str, Any]) -> str:
    """The padding mode: ``auto_pad`` when set (it overrides ``pads``), a padding string, or NOTSET."""
    auto = str(attrs.get("auto_pad", "NOTSET"))
    if auto != "NOTSET":
        return auto
    padding = attrs.get("padding")
    return padding if isinstance(padding, str) else "NOTSET"


def _per_dim(attrs: Mapping[str, Any], key: str, n: int, default: int) -> list[int]:
    v = attrs.get(key)
    return [int(d) for d in v] if isinstance(v, Sequence) and not isinstance(v, str) else [default] * n


def conv_spatial(attrs: Mapping[str, Any], x: Sequence[Dim], kernel: Sequence[Dim]) -> list[Dim]:
    """A convolution's output spatial dims from its input's spatial dims ``x`` and the weight's
    kernel dims (forward, or transposed with ``transposed``; an ONNX ``output_shape`` is taken as
    stated, since the pads are derived from it)."""
    n = len(kernel)
    stride, dilation = _per_dim(attrs, "stride", n, 1), _per_dim(attrs, "dilation", n, 1)
    mode = _mode(attrs)
    transposed = bool(attrs.get("transposed", False))
    if transposed and attrs.get("output_shape"):
        stated: list[Dim] = [int(d) for d in attrs["output_shape"]]
        return stated[-n:]
    if mode in SAME_MODES:
        return [dim_mul(x[i], stride[i]) if transposed else dim_ceildiv(x[i], stride[i]) for i in range(n)]
    pads = [(0, 0)] * n if mode in _VALID_MODES else (pad_pairs(attrs.get("padding", ()), n) or [(0, 0)] * n)
    if transposed:
        out_pad = _per_dim(attrs, "output_padding", n, 0)
        return [transposed_out(x[i], kernel[i], stride[i], dilation[i], sum(pads[i]), out_pad[i]) for i in range(n)]
    return [window_out(x[i], kernel[i], stride[i], dilation[i], sum(pads[i])) for i in range(n)]


def pool_spatial(attrs: Mapping[str, Any], x: Sequence[Dim]) -> list[tuple[Dim, ...]]:
    """The output sizes a pooling window may give per spatial dim (of the last ``len(kernel)`` dims of
    the input). ``ceil_mode`` rounds up; torch then drops a last window that would start in the end
    padding, ONNX's reference does not, so both sizes are accepted there."""
    kernel = [int(k) for k in attrs["kernel"]]
    n = len(kernel)
    stride, dilation = _per_dim(attrs, "stride", n, 1), _per_dim(attrs, "dilation", n, 1)
    mode = _mode(attrs)
    if mode in SAME_MODES:
        return [(dim_ceildiv(x[i], stride[i]),) for i in range(n)]
    pads = [(0, 0)] * n if mode in _VALID_MODES else (pad_pairs(attrs.get("padding", ()), n) or [(0, 0)] * n)
    ceil_mode = bool(attrs.get("ceil_mode", False))
    out: list[tuple[Dim, ...]] = []
    for i in range(n):
        size = window_out(x[i], kernel[i], stride[i], dilation[i], sum(pads[i]), ceil_mode)
        dropped, xi = dim_sub(size, 1), x[i]
        starts_in_pad = (size - 1) * stride[i] >= xi + pads[i][0] \
            if isinstance(xi, int) and isinstance(size, int) else True   # symbolic: either may hold
        out.append((size, dropped) if ceil_mode and starts_in_pad else (size,))
    return out
