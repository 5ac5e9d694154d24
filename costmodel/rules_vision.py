"""Cost rules of the vision and signal ops (pooling, resize, RoIAlign, NMS, FFT), merged into
:data:`narrowpipe.costmodel.rules.RULES` beside the others: one registry, split only for file size."""

from __future__ import annotations

from math import log2, prod

from ..ir import Op
from .cost import Cost
from .opview import OpView
from .shape_checks import check_window

__all__ = ["VISION_RULES"]


def _traffic(v: OpView, flops: int = 0, transcendentals: int = 0) -> Cost:
    """Every input read once and every output written once (also used by rules.py)."""
    return Cost(flops, transcendentals, v.all_in_bytes(), v.all_out_bytes())


def pool(v: OpView) -> Cost:
    """Max/average pooling: one FLOP per window element per output element."""
    check_window(v)
    window = prod(v.attrs.get("kernel", ()) or (1,))
    if v.attrs.get("role") == "grad":   # inputs (dy, x): each output gradient spread over its window
        return _traffic(v, v.out_numel() if v.attrs.get("global_pool") else v.numel(0) * window)
    if v.attrs.get("global_pool"):
        return _traffic(v, v.numel(0))
    return _traffic(v, v.out_numel() * window)


_RESIZE_TAPS = {"nearest": 0, "linear": 2, "bilinear": 2, "cubic": 4, "bicubic": 4}


def resize(v: OpView) -> Cost:
    """Interpolation: per output element, 2 FLOPs per tap in each resized dim (nearest: none). Its
    gradient (``role="grad"``, torch's ``upsample_*_backward``) runs the same taps the other way: per
    element of the output gradient it reads, a multiply-add into each tap of the input gradient."""
    taps = _RESIZE_TAPS.get(str(v.attrs.get("mode", "nearest")), 2)
    dims = int(v.attrs.get("spatial_dims", max(len(v.out_shapes[0]) - 2, 1)))
    points = v.numel(0) if v.attrs.get("role") == "grad" else v.out_numel()
    return _traffic(v, points * 2 * taps * dims if taps else 0)


def roi_align(v: OpView) -> Cost:
    """Bilinear samples: 4 taps x 2 FLOPs per sample, ``sampling_ratio``^2 samples per output."""
    s = max(int(v.attrs.get("sampling_ratio", 2)), 1)
    return _traffic(v, v.out_numel() * s * s * 8)


def nms(v: OpView) -> Cost:
    """Pairwise IoU over the boxes of each batch and class: about 10 FLOPs per pair."""
    boxes = v.shape(0)
    n = boxes[1] if len(boxes) > 1 else boxes[0]
    batch = boxes[0] if len(boxes) > 1 else 1
    classes = v.shape(1)[1] if v.has_input(1) and len(v.shape(1)) > 1 else 1
    return _traffic(v, 10 * batch * classes * n * n)


def fft(v: OpView) -> Cost:
    """Cooley-Tukey: 5 N log2 N real FLOPs per transform of length N. A multi-axis transform
    (``axes``: ``fft2``, ``fftn``) is one length-``n_a`` transform per line along each axis ``a`` in
    turn, so it costs the sum over axes of ``5 n_a log2 n_a x (elements / n_a)``, which is
    ``5 N log2 N`` with ``N`` the product of the transformed lengths. Single-axis ops give ``axis``."""
    shape = v.shape(0)
    if not shape:
        return _traffic(v, 10)   # a 0-d input: one transform of the minimal length 2
    rank = len(shape)
    axes = v.attrs.get("axes")
    axes = [int(a) % rank for a in axes] if axes else [int(v.attrs.get("axis", -1)) % rank]
    total = prod(shape)
    flops = 0
    for axis in sorted(set(axes)):
        n = max(shape[axis], 2)
        flops += int(5 * n * log2(n)) * (total // n)
    return _traffic(v, flops)


#: op -> rule, merged into :data:`narrowpipe.costmodel.rules.RULES`
VISION_RULES = {Op.POOL: pool, Op.RESIZE: resize, Op.ROI_ALIGN: roi_align, Op.NMS: nms, Op.FFT: fft}
