"""What a constant pad costs per row of its input, measured by ``calibrate`` on the CPU.

PyTorch's ``constant_pad_nd`` (aten/src/ATen/native/PadNd.cpp) allocates the output, fills it with
the pad value, then copies the input into the output's interior through a narrowed, strided view:
the copy runs once per contiguous run of the input (a row, when the last dim is padded), and each
run costs a loop set-up on top of its bytes. Late convolution stages have short rows (7 floats at
7x7), so a pad there costs several times its bytes' time (960x7x7: 27 us against 3 us for a
clone of the same input, measured here). Measured as the same input size padded by one column at
two row lengths, 56 and 7 floats: the time difference over the row difference is the cost of one
row (the bytes moved are nearly the same; the output grows 12% more at the short rows).

A pad of two dims (HF's TF-style "same" padding of every convolution pads H and W of an NCHW
activation) copies through a view whose outer dims do not merge into the copy loop's two inner
ones, so it also pays a step per N x C plane: 960x7x7 padded by one in H and W took 41 us, the same
6,720 rows of 7 padded in 2-D 22 us (measured here, hot). ``calibrate`` times the short-row input
once more as 4096 planes of 7x7 padded by one in H and W (the same 28,672 rows of 7 and 200,704
elements; the output grows 14% more than the 2-D one's, charged to the planes): the difference over
the planes is the cost of one plane.
"""

from __future__ import annotations

from ..costmodel.interpreter import op_cost
from ..ir import DType, Op, TensorType
from .measurement import Case, Measurement, bound

__all__ = ["PAD_ROWS", "PAD_PLANES", "pad_row_cases", "pad_row_time", "pad_plane_time"]

#: (rows, row length) of the two measured inputs: the same 200,704 elements.
PAD_ROWS = ((3584, 56), (28672, 7))

#: (planes, height, width) of the measured 4-D input: the short-row input's rows, 7 to a plane.
PAD_PLANES = (4096, 7, 7)


def pad_row_cases(device: str = "cpu") -> list[Case]:
    """A one-column constant pad, ``F.pad(x, (0, 1))``, of each input in ``PAD_ROWS``, then a pad by
    one in H and W of ``PAD_PLANES`` (all cache-resident)."""
    import torch
    import torch.nn.functional as F
    cases = []
    for rows, width in PAD_ROWS:
        x = torch.randn(rows, width, device=device)
        c = op_cost(Op.PAD, [TensorType(DType.FP32, (rows, width))], [TensorType(DType.FP32, (rows, width + 1))])
        cases.append(Case("pad_rows", "fp32", (rows, width), 0, c.bytes, bound(F.pad, x, (0, 1))))
    planes, h, w = PAD_PLANES
    x4 = torch.randn(1, planes, h, w, device=device)
    c = op_cost(Op.PAD, [TensorType(DType.FP32, (1, planes, h, w))],
                [TensorType(DType.FP32, (1, planes, h + 1, w + 1))])
    cases.append(Case("pad_planes", "fp32", PAD_PLANES, 0, c.bytes, lambda: F.pad(x4, (0, 1, 0, 1))))
    return cases


def pad_row_time(measurements: list[Measurement]) -> float | None:
    """Seconds per input row of a constant pad: the difference of the two measurements over their
    row difference (never negative); None without both."""
    pads = sorted((m.shape[0], m.seconds) for m in measurements if m.kind == "pad_rows")
    if len(pads) < 2 or pads[-1][0] == pads[0][0]:
        return None
    (r0, t0), (r1, t1) = pads[0], pads[-1]
    return max(0.0, (t1 - t0) / (r1 - r0))


def pad_plane_time(measurements: list[Measurement]) -> float | None:
    """Seconds per plane of a pad of two dims: the 4-D measurement minus the 2-D one of the same
    rows, over the planes (never negative); None without both."""
    four = next((m for m in measurements if m.kind == "pad_planes"), None)
    planes, h, _ = four.shape if four is not None else (0, 0, 0)
    two = next((m for m in measurements if m.kind == "pad_rows" and m.shape[0] == planes * h), None)
    if four is None or two is None or planes <= 0:
        return None
    return max(0.0, (four.seconds - two.seconds) / planes)
