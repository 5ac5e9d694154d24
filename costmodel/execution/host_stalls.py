"""The stall an eager host call pays right after a kernel that moved more bytes than the caches hold.

That kernel's traffic evicts the host state the next op touches (the dispatcher's and allocator's
state, the op's code, page-table entries), and the next op, whatever its size, waits for it
(:mod:`narrowpipe.calibration.evicted_calls` measures it: 1.2 us after a tiny op, 19 us after an op
that moved 2 MiB, 70-90 us after 64-128 MiB on a 2 MiB-L2 Xeon VM). Every kernel's calibrated time
comes from a loop of that kernel alone, where each call follows its own traffic, so it already holds
the stall of its own size; in a network it follows another kernel, and pays that kernel's instead.
"""

from __future__ import annotations

from ...backends import CpuTarget
from .common import interpolate

__all__ = ["evicted_call_time"]


def evicted_call_time(target: CpuTarget, previous_bytes: float, own_bytes: float) -> float:
    """Seconds a kernel's time changes by in an eager run because the kernel before it moved
    ``previous_bytes``: the stall after that traffic less the stall its own calibration (a loop of
    itself, ``own_bytes`` per call) already included; negative when the previous kernel moved less.
    0 where the target measured no such stall."""
    full = target.eager_evicted_call_overhead or 0.0
    if full <= 0.0 or not target.eager_evicted_call_curve:
        return 0.0
    after = interpolate(target.eager_evicted_call_curve, max(previous_bytes, 1.0), 0.0)
    included = interpolate(target.eager_evicted_call_self_curve, max(own_bytes, 1.0), 0.0)
    return full * (after - included)
