"""MIOpen's any-filter Winograd convolution (ConvBinWinogradRxS), as the work it executes.

Why: on gfx9 (MI25) MIOpen runs most fp32 convolutions with filters wider than 1x1 through one
assembly kernel that is not the textbook 3x3 stride-1 Winograd: it cuts any R x S filter into
3x3 blocks and runs each with F(2x2, 3x3) (16 multiplies per 2x2 output tile and 3x3 block,
4/9 of a direct convolution's), handles stride 2 by splitting the filter into its four stride
phases (forward: decimation; data gradient: dilation), and keeps one persistent workgroup per CU,
so it has no GEMM tiles or waves. DeepBench's MI25 forward rows name it for 5x5 and 5x10 layers at
stride 2 (``ConvolutionFwdAlgoWinograd``), which a 3x3 stride-1 Winograd cannot run; modelled as
implicit GEMMs they were 33-70% too slow.

The padding rules are MIOpen's (src/solver/conv/conv_bin_winoRxS.cpp, ``IsShaderContraintsMet``,
filter tile 3): at stride 1 the filter's width pads to 3 when it is at most 3, else to a multiple
of 6, and its height to a multiple of 3; at stride 2 the width pads to a multiple of 6 and the
height to a multiple of 3 when R mod 6 == 1, else of 6. Applicable where (``IsApplicable``): 2-D,
groups 1, dilation 1, equal strides of 1 or 2, fp32 (fp16 only on gfx906/908, not modelled); fp32
needs k x l x C >= 18 (k, l the padded filter's 3-blocks; at a stride-2 data gradient the width
counts in 6-blocks), C even for a stride-1 filter at most 3 wide and for a stride-2 data gradient
(with R > 1), and each size within the shader's index fields (dimensions under 2^16, an image's
input and output at most 2^28 elements). C is the channels the problem reduces over (the solver's
input channels: dy's for a data gradient). The 6-block width at a stride-2 data gradient is the
current source's rule; 1.3.0 (DeepBench's) counted it in 3-blocks, so admitted a few narrower
layers (a 5x5 filter's data gradient from C >= 6 rather than 10), which the model does not offer.
Known miss: the data gradients of 1-3 channel first layers, which the rules admit (dy has 32-64
channels), run 2.4-3.4x slower than this kernel's model on MI25 (DeepBench does not
name the backward algorithm; the model's output-channel cost has no tile to pad three channels to).

Versions (MIOpen's CHANGELOG.md): Winograd kernels for strided backward-data convolutions came in
1.2.0, before DeepBench's MIOpen 1.3; Winograd weight gradients came in 1.8.0, after it, so weight
gradients are not offered (with the forward kernel's plateau they would put MI25's fit-half 3x3
weight gradients 43-49% below their measured times).

The kernel's time is its executed FLOPs at the target's ``conv_winograd_rxs_efficiency`` of the
vector peak, against the convolution's compulsory traffic (:func:`.gpu._direct_time`).
"""

from __future__ import annotations

from dataclasses import replace
from math import ceil

from ...ir import DType, Node
from ..interpreter import CostTable
from .gemm import Gemm

__all__ = ["rxs_padded_filter", "rxs_flops", "RXS_MULTIPLY_FRACTION"]

#: F(2x2, 3x3): 16 multiplies per 2x2 outputs x 3x3 taps, 16 / 36 of a direct convolution's
#: multiplies (Lavin & Gray 2016).
RXS_MULTIPLY_FRACTION = 16 / 36


def _up(v: int, m: int) -> int:
    return ceil(v / m) * m


def rxs_padded_filter(r: int, s: int, stride: int, tile: int = 3) -> tuple[int, int]:
    """(padded R, padded S) of an R x S filter in MIOpen's RxS kernel (``tile``: its filter tile)."""
    if stride == 1:
        ps = tile if s <= tile else _up(s, 2 * tile)
        pr = _up(r, tile)
    else:
        ps = _up(s, 2 * tile)
        pr = _up(r, tile) if r % (2 * tile) == 1 else _up(r, 2 * tile)
    return pr, ps


def rxs_flops(table: CostTable, node: Node) -> int | None:
    """FLOPs the RxS kernel executes for the convolution ``node`` (forward or data gradient), or
    None where MIOpen's solver does not apply."""
    a = node.attrs
    stride = {int(v) for v in a.get("stride", (1,))}
    w, x = node.inputs[1], node.inputs[0]
    if (w is None or x is None or int(a.get("groups", 1)) != 1 or len(stride) != 1
            or any(int(d) != 1 for d in a.get("dilation", (1,)))
            or {x.type.dtype, w.type.dtype, node.outputs[0].type.dtype} != {DType.FP32}):
        return None
    st = stride.pop()
    role = a.get("role")
    out = table.shapes[node.outputs[0]]
    # a transposed forward convolution (its weight is C x K) and weight gradients are not modelled
    if len(out) != 4 or st not in (1, 2) or role == "grad_weight" or (a.get("transposed") and role != "grad_input"):
        return None
    ws = table.shapes[w]                                     # (K, C, R, S) of the forward convolution
    r, s = ws[2], ws[3]
    pr, ps = rxs_padded_filter(r, s, st)
    dilated = role == "grad_input" and st == 2
    c = ws[0] if role == "grad_input" else ws[1]            # the channels the problem reduces over
    c_out = ws[1] if role == "grad_input" else ws[0]
    if (st == 1 and s <= 3 and c % 2) or (dilated and (r <= 1 or c % 2)):
        return None
    if (pr // 3) * (ps // (6 if dilated else 3)) * c < 18 or not _fits_the_shader(table.shapes[x], out, r, s):
        return None
    n, oh, ow = out[0], _up(out[2], 2), _up(out[3], 2)     # 2x2 output tiles
    taps = pr * ps / (st * st if dilated else 1)            # a dilated output gets 1/s^2 of the taps
    return round(2 * RXS_MULTIPLY_FRACTION * n * oh * ow * c * c_out * taps)


def _fits_the_shader(x: tuple[int, ...], y: tuple[int, ...], r: int, s: int) -> bool:
    """MIOpen's size limits on the kernel's 16-bit and 28-bit index fields (``IsApplicable`` in
    1.3.0, ``IsShaderContraintsMet`` later): each dimension under 2^16, an image's input and output
    and a filter's channels x taps at most 2^28 elements; ``x``/``y`` the direction's input and output
    (dy and dx for a data gradient)."""
    (n, c, h, w), (k, oh, ow) = x, y[1:]
    return (max(n, c, k, h, w, oh, ow, r, s) < 2 ** 16 and c * h * w <= 2 ** 28 and k * oh * ow <= 2 ** 28
            and max(c, k) * r * s <= 2 ** 28)


def rxs_gemm(table: CostTable, node: Node, g: Gemm) -> Gemm | None:
    """``g`` (the convolution's implicit GEMM, for its operands) with the RxS kernel's FLOPs."""
    flops = rxs_flops(table, node)
    return None if flops is None else replace(g, flops=flops)
