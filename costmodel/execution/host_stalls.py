"""The stall an eager host call pays when the traffic since its op last ran evicted the op's host state.

Traffic past the caches evicts the host state an op's call touches (the dispatcher's and
allocator's state, the op's code, page-table entries), and the op, whatever its size, waits for it
(:mod:`narrowpipe.calibration.evicted_calls` measures it: 1.2 us after a tiny op, 19 us after an op
that moved 2 MiB, 70-90 us after 64-128 MiB on a 2 MiB-L2 Xeon VM). What sets it is the footprint
since the op itself last ran, not the kernel right before it (the same VM, 2026-12-04, tiny batch
norm, hardtanh, pad and add, thread clock, medians of 27-37; ``benchmarks/results/eager_stalls.md``):
after an add over 4 MiB a batch norm stalled 16 us, 13 us with a tiny relu run between the add and
it, 12.5 us after four adds over four distinct 1 MiB buffers, 1.7 us after four adds over the same
1 MiB; at 8 MiB, 25, 20, 25 and 9 us. In a network an op's calls lie several kernels apart (a
MobileNetV2 block: pad, convolution, batch norm, relu6), so each finds its state evicted by all of
them. Every kernel's calibrated time comes from a loop of that kernel alone, where each call follows
its own traffic, so it already holds the stall of its own size; in a network it pays the stall of
the footprint since its op's previous kernel instead (:func:`bytes_since_own_call`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...backends import CpuTarget
from ...ir import Op, Value
from ..interpreter import CostTable
from ..kernels import Kernel
from ..sizes import value_bytes
from .common import interpolate

__all__ = ["evicted_call_time", "bytes_since_own_call"]


def evicted_call_time(target: CpuTarget, previous_bytes: float, own_bytes: float) -> float:
    """Seconds a kernel's time changes by in an eager run because ``previous_bytes`` were touched
    since its op last ran: the stall after that traffic less the stall its own calibration (a loop of
    itself, ``own_bytes`` per call) already included; negative when less was touched. 0 where the
    target measured no such stall."""
    full = target.eager_evicted_call_overhead or 0.0
    if full <= 0.0 or not target.eager_evicted_call_curve:
        return 0.0
    after = interpolate(target.eager_evicted_call_curve, max(previous_bytes, 1.0), 0.0)
    included = interpolate(target.eager_evicted_call_self_curve, max(own_bytes, 1.0), 0.0)
    return full * (after - included)


def bytes_since_own_call(kernels: Sequence[Kernel], table: CostTable, launched: Sequence[bool]) -> list[float]:
    """Per kernel, the distinct bytes the kernels since the last one of its op touched (each input
    and output once, that last one's included: its call ran the op's host path, then its traffic
    followed), the footprint that evicted the op's host state. A program runs forward after
    forward, so the first kernel of an op looks back into the previous forward (an op that runs
    once: the whole forward's footprint). Kernels not ``launched`` touch nothing and are 0."""
    touched = [list(dict.fromkeys(v for v in (*k.inputs, *k.outputs) if v is not None and v in table.shapes))
               if run else [] for k, run in zip(kernels, launched)]
    keys = [_op_key(k) for k in kernels]
    n = len(kernels)
    out = [0.0] * n
    last: dict[object, int] = {}        # op -> index (over two forwards) of its latest kernel
    for j in range(2 * n):              # the second forward finds each op's call in the first
        i = j % n
        if not launched[i]:
            continue
        if j >= n:
            start = last[keys[i]]
            seen: set[Value] = set()
            for t in range(start, j):
                seen.update(touched[t % n])
            out[i] = float(sum(value_bytes(table, v) for v in seen))
        last[keys[i]] = j
    return out


def _op_key(kernel: Kernel) -> object:
    """What shares host state (code, dispatch entries) between kernels: the op of their anchor."""
    return kernel.anchor.op if kernel.anchor.op is not Op.UNKNOWN else kernel.anchor.source.op
