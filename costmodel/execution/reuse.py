"""Inputs an eager kernel re-reads after other kernels' traffic has pushed them out of the caches.

Every kernel's calibrated time comes from a loop of that kernel alone, where its inputs were last
touched one call ago. In a network an input was last touched when its producer (or another reader)
ran, and the bytes every kernel since then moved decide where it still is: a GEMM's output read
right after it by a GELU has been pushed out by the GEMM's own weight stream; a residual read
after a whole block comes back from memory. That re-read stalls the kernel on top of its work:
measured on this 2-core Xeon VM (``calibrate``'s ``evicted_read`` cases, host state warm, output
hot), a 768 KiB add took 7.6 us when its inputs were hot, 28 us after 2 MiB of other traffic and
66-73 us after 64-128 MiB; a GELU of a 1.2 MB GEMM output took 177 us in a hot loop and 266 us
right after the GEMM (the stall after heavy traffic taken out first): 89 us more, the input's time
at the ~13 GB/s of memory, not overlapped with its work.

The reuse distance of an input is the bytes the kernels between its last touch and this kernel
moved, plus half of the last toucher's other bytes (a kernel writes its output, or reads its input,
throughout its run, so on average half of its other traffic comes after; assumption). A graph input
was last touched a forward ago: its distance is the forward's footprint. Weights are left out: a
GEMM's or convolution's were calibrated cold, and the rest (norm scales, running statistics) are
small. The target's ``evicted_read_curve`` gives the stall per byte by reuse distance; a kernel pays
it for each input beyond what its own loop paid at its own traffic (:func:`reuse_stall_time`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...backends import CpuTarget
from ...ir import Value
from ..interpreter import CostTable
from ..kernels import Kernel
from .common import interpolate

__all__ = ["input_reuse", "reuse_stall_time"]


def _nbytes(table: CostTable, v: Value) -> int:
    n = 1
    for d in table.shapes[v]:
        n *= d
    return v.type.dtype.nbytes(n)


def input_reuse(kernels: Sequence[Kernel], table: CostTable, footprint: float,
                launched: Sequence[bool]) -> list[list[tuple[int, float]]]:
    """Per kernel, (bytes, reuse distance) of each activation or graph input it reads (weights left
    out; see the module docstring), walking ``kernels`` in program order; kernels not ``launched``
    (views) move nothing and touch nothing."""
    moved = 0.0                                   # bytes moved by the kernels run so far
    # value -> (bytes moved when its last toucher finished, that toucher's other bytes)
    touched: dict[Value, tuple[float, float]] = {}
    out: list[list[tuple[int, float]]] = []
    for kernel, runs in zip(kernels, launched):
        reads: list[tuple[int, float]] = []
        if runs:
            for v in dict.fromkeys(kernel.inputs):
                if v is None or v.kind.is_weight or v not in table.shapes:
                    continue
                size = _nbytes(table, v)
                if v in touched:
                    after, other = touched[v]
                    reads.append((size, moved - after + 0.5 * other))
                else:
                    reads.append((size, footprint))
            total = float(kernel.cost.bytes)
            moved += total
            for v in (*kernel.inputs, *kernel.outputs):
                if v is not None and not v.kind.is_weight and v in table.shapes:
                    touched[v] = (moved, max(0.0, total - _nbytes(table, v)))
        out.append(reads)
    return out


def reuse_stall_time(target: CpuTarget, reads: Sequence[tuple[int, float]], own_bytes: float) -> float:
    """Seconds a kernel stalls re-reading its inputs: each input's bytes at the target's per-byte
    stall for its reuse distance, less the stall at ``own_bytes`` (the kernel's traffic: what a loop
    of it alone already paid), never below zero per input. 0 without the target's terms."""
    bw = target.evicted_read_bandwidth
    if not bw or not target.evicted_read_curve:
        return 0.0
    curve = target.evicted_read_curve
    own = interpolate(curve, max(own_bytes, 1.0), 0.0)
    return sum(size * max(0.0, interpolate(curve, max(dist, 1.0), 0.0) - own) for size, dist in reads) / bw
