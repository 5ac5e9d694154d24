"""What an eager depthwise convolution costs on the CPU, measured by ``calibrate``.

PyTorch runs every fp32 depthwise ``conv2d`` on the CPU through oneDNN (``aten::mkldnn_convolution``,
whatever the padding or stride; checked with ``torch.profiler`` and ``ONEDNN_VERBOSE``): a reorder
of the NCHW input into the blocked ``nChw16c`` layout, the ``jit_dw`` kernel, and a reorder of the
output back. So its time is not one rate per input element but three terms, each measurable:

* a fixed cost per call (about 40 us on the development host even for a 16x4x4 input, against
  4 us for a 1x1 dense convolution of the same input: the primitive and weight set-up);
* the two reorders' copies, per element of input and of output;
* the kernel's multiply-adds, per output element per tap (a 7x7 layer does 5.4x a 3x3 one's).

The sweep times single depthwise convolutions of several channels, sizes, kernel sizes and strides
on cache-resident inputs (all but one unlike a validation model's layers: the 32-channel 112x112
3x3 one has the channels, output and taps of MobileNetV2's first depthwise layer, which Hugging Face
runs on a pre-padded 114x114 input, so that layer is not held out), and :func:`depthwise_times` fits the
three terms by least squares. A call during which the thread took page faults is left out: fresh
pages are their own cost (:mod:`narrowpipe.costmodel.execution.fresh_pages`), and in a fresh
process glibc may hand a sub-megabyte temporary back to the OS after every call (556 faults per
call on a 64x56x56 layer, 9x its fault-free time), which a long-lived process does not do.
"""

from __future__ import annotations

import numpy as np

from .measurement import Case, Measurement, bound

__all__ = ["DEPTHWISE_SHAPES", "depthwise_cases", "prime_allocator", "depthwise_times", "depthwise_terms"]

#: (channels, height = width, kernel size, stride) of the measured layers, padding kernel // 2.
DEPTHWISE_SHAPES = ((16, 4, 3, 1), (64, 56, 3, 1), (64, 56, 3, 2), (64, 56, 7, 1), (32, 112, 3, 1),
                    (128, 28, 5, 1), (256, 14, 7, 1), (512, 14, 3, 2))

#: A buffer freed before the sweep (below glibc's 32 MiB ceiling on the dynamic mmap threshold).
PRIME_BYTES = 31 * 2**20


def depthwise_terms(channels: int, size: int, kernel: int, stride: int, batch: int = 1) -> tuple[int, int]:
    """(input + output elements, output elements x taps) of a depthwise layer padded by kernel // 2."""
    out = (size + 2 * (kernel // 2) - kernel) // stride + 1
    out_elems = batch * channels * out * out
    return batch * channels * size * size + out_elems, out_elems * kernel * kernel


def depthwise_cases(device: str = "cpu", turns: int = 2) -> list[Case]:
    """The layers of ``DEPTHWISE_SHAPES``, each called once per turn with no warm-up and ``turns``
    turns per round spread over the round (:mod:`.rounds`: a layer called again right after itself
    runs in a state no network gives it: measured here, a 960x7x7 layer took 61 us called back to
    back and 82-117 us after other layers, and MobileNetV2's 17 depthwise layers took 3.46 ms in
    the network against 1.9 ms predicted from back-to-back calls), timed as every other case (the
    smaller of wall and thread-CPU time with torch at one thread, the median over turns) over the
    turns without page faults (all turns if fewer than three were free of them). A lower quartile of
    wall times here, against medians everywhere else, made every depthwise layer predicted fast.
    ``flops`` carries the output taps and ``bytes`` the input + output elements (the fit's two
    variables)."""
    import torch
    import torch.nn.functional as F
    prime_allocator(device)
    cases = []
    for c, px, k, s in DEPTHWISE_SHAPES:
        x = torch.randn(1, c, px, px, device=device)
        w = torch.randn(c, 1, k, k, device=device)
        elements, taps = depthwise_terms(c, px, k, s)
        cases.append(Case("depthwise", "fp32", (c, px, k, s), taps, elements,
                          bound(F.conv2d, x, w, stride=s, padding=k // 2, groups=c),
                          warmup=0, max_calls=1, turns=turns, skip_faulted=True))
    return cases


def prime_allocator(device: str = "cpu") -> None:
    """Free one large buffer, as a long-lived process has: that raised glibc's mmap and trim
    thresholds (to the freed size, at most 32 MiB); a fresh process still hands every freed chunk
    above 128 KiB back to the OS, so oneDNN's reorder buffers would fault in on every call."""
    import torch
    primer = torch.empty(PRIME_BYTES // 4, device=device)
    del primer


def depthwise_times(measurements: list[Measurement]) -> tuple[float, float, float] | None:
    """(seconds per call beyond the dispatch, per input + output element, per output tap), the
    least-squares fit of the ``depthwise`` measurements; a term fitted negative is dropped and the
    others refitted. None with fewer than four measurements."""
    ms = [m for m in measurements if m.kind == "depthwise" and m.seconds > 0]
    if len(ms) < 4:
        return None
    dispatch = next((m.seconds for m in measurements if m.kind == "dispatch"), 0.0)
    a = np.array([[1.0, float(m.bytes), float(m.flops)] for m in ms])
    y = np.array([m.seconds for m in ms])
    keep = [0, 1, 2]
    coef = np.zeros(3)
    for _ in range(3):
        sol, *_ = np.linalg.lstsq(a[:, keep], y, rcond=None)
        coef = np.zeros(3)
        coef[keep] = sol
        negative = [i for i in keep if coef[i] < 0]
        if not negative:
            break
        keep = [i for i in keep if i not in negative]
        if not keep:
            return None
    return max(0.0, float(coef[0]) - dispatch), float(coef[1]), float(coef[2])
