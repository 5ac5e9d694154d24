"""The stall of an eager host call right after a kernel that moved many bytes, measured by ``calibrate``.

A kernel that streams more bytes than the core's L2 holds evicts what the next op's host path
touches (the dispatcher's and allocator's state, the op's code, page-table entries), and that next
op, however small, pays for fetching it back. Measured on this 2-core Xeon VM (L2 2 MiB per core,
2026-12-04, thread clock, medians): a one-element add took 1.2 us after another one-element add,
4 us after an add that moved 1 MiB, 19 us after 2 MiB, 24-35 us after 4-32 MiB and 70-90 us after
64-128 MiB. A hot loop of one op pays part of it already (each call follows the previous call's
traffic): a 3 MiB add took 152 us in a hot loop and 140 us when a one-element add ran between the
calls (that add then took 26 us). So inside a network, where a small op follows a large one, the
small op pays the stall its hot-loop calibration never saw, and the large op pays less than its own.

Measured as two kinds of case per transfer size D (adds into a preallocated output, no fresh pages):

* ``evicted_call``: an add that moves D bytes, then one of :func:`small_ops` timed, minus the same op
  timed again right after (the stall; the ops take turns, call after call);
* ``evicted_self``: an add of D bytes after another one (the hot loop's state), timed, minus the same
  add right after a one-element add: the stall the hot loop's time includes;
* ``evicted_read``: a small add whose inputs were last touched before an add of D bytes (its output
  and the host path made hot again first), against the same add in a hot loop (``evicted_read_hot``):
  the stall of re-reading data that traffic pushed out of the caches
  (:mod:`narrowpipe.costmodel.execution.reuse`; :func:`fit_evicted_reads`).

The sizes run from an eighth of the L2 the OS reports (``/sys/devices/system/cpu/cpu0/cache``) to
64 times it, at most 128 MiB (assumption: enough to pass a VM's share of a shared L3; here the stall
stopped growing by 64 MiB, a fraction of the 480 MiB L3 the OS reports for the whole host).
:func:`fit_evicted_calls` turns them into ``eager_evicted_call_overhead`` (the stall after the largest
size) and two curves, :func:`narrowpipe.costmodel.execution.host_stalls.evicted_call_time` charges them.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence

from .measurement import Case, Measurement, bound
from .robust import monotone

__all__ = ["evicted_call_sizes", "evicted_call_cases", "fit_evicted_calls", "fit_evicted_reads", "read_operand_bytes",
           "MAX_BYTES"]

#: The largest transfer measured (assumption: run time and memory; see the module docstring).
MAX_BYTES = 128 * 2**20
#: L2 assumed where the OS reports none (assumption: a common server core's).
DEFAULT_L2 = 2 * 2**20


def evicted_call_sizes(l2_bytes: float | None) -> tuple[int, ...]:
    """Bytes moved by the evicting add: L2/8, L2/4, ... 64 x L2 (by powers of two up to L2 x 4, then
    by fours), capped at :data:`MAX_BYTES`."""
    l2 = int(l2_bytes or DEFAULT_L2)
    sizes = [l2 // 8, l2 // 4, l2 // 2, l2, 2 * l2, 4 * l2, 16 * l2, 64 * l2]
    return tuple(sorted({min(s, MAX_BYTES) for s in sizes if s >= 3 * 4}))


def _thread_seconds(fn: Callable[[], object]) -> float:
    c0 = time.thread_time()
    fn()
    return time.thread_time() - c0


def small_ops() -> list[Callable[[], object]]:
    """Tiny eager ops of the kinds networks chain (elementwise, norms, a pad, an activation, a 1x1
    convolution, softmax, a GEMM), whose host paths differ: measured here after an add of 32 MiB, an
    add or a relu stalled 20 us, a batch norm, layer norm, pad, hardtanh, GELU or 1x1 convolution
    40-50 us (their code and state reach further than an add's)."""
    import torch
    import torch.nn.functional as F
    x4, x2 = torch.randn(1, 8, 4, 4), torch.randn(4, 16)
    rm, rv, w, b, wc = torch.zeros(8), torch.ones(8), torch.ones(16), torch.zeros(16), torch.randn(8, 8, 1, 1)
    return [bound(torch.add, x2, x2), bound(torch.relu, x2), bound(F.batch_norm, x4, rm, rv, training=False),
            bound(F.layer_norm, x2, (16,), w, b), bound(F.hardtanh, x4, 0.0, 6.0), bound(F.pad, x4, (1, 1, 1, 1)),
            bound(F.gelu, x2), bound(F.conv2d, x4, wc), bound(torch.softmax, x2, -1), bound(torch.mm, x2, x2.t())]


def evicted_call_cases(l2_bytes: float | None, turns: int = 2) -> list[Case]:
    """The ``evicted_call`` and ``evicted_self`` cases at every size (self-timed: each call times
    only its second op, on the thread's CPU clock), one buffer set shared by all sizes."""
    import torch
    sizes = evicted_call_sizes(l2_bytes)
    top = max(sizes) // 12 + 1
    a_all, b_all, o_all = torch.randn(top), torch.randn(top), torch.empty(top)
    one = torch.ones(1)
    ops = small_ops()
    for op in ops * 3:                       # first calls build kernels and primitives: not a stall
        op()
    small = itertools.cycle(ops)
    cases = []
    for size in sizes:
        n = size // 12                       # reads 2 n floats, writes n
        a, b, o = a_all[:n], b_all[:n], o_all[:n]

        def after(a=a, b=b, o=o) -> float:                    # noqa: ANN001
            op = next(small)
            torch.add(a, b, out=o)
            stalled = _thread_seconds(op)
            return stalled - _thread_seconds(op)

        def included(a=a, b=b, o=o) -> float:                 # noqa: ANN001
            torch.add(a, b, out=o)
            hot = _thread_seconds(lambda: torch.add(a, b, out=o))
            torch.add(one, one)
            return hot - _thread_seconds(lambda: torch.add(a, b, out=o))

        cases.append(Case("evicted_call", "fp32", (size,), 0, 12 * n, after, warmup=0, turns=turns,
                          self_timed=True))
        cases.append(Case("evicted_self", "fp32", (size,), 0, 12 * n, included, warmup=0, turns=turns,
                          self_timed=True))
    return cases + _read_cases(sizes, a_all, b_all, o_all, one, turns)


def read_operand_bytes(sizes: Sequence[int]) -> int:
    """Bytes of each input of the re-read add: the smallest evicting size (an eighth of the L2)."""
    return min(sizes)


def _read_cases(sizes: Sequence[int], a_all, b_all, o_all, one, turns: int) -> list[Case]:  # noqa: ANN001
    """``evicted_read`` (shape: the evicting add's bytes): an add of two inputs of
    :func:`read_operand_bytes` each, timed after an add of that many bytes, its output and the host
    path made hot first; ``evicted_read_hot`` (shape: 0): the same add right after itself and a
    one-element add. Sizes below twice the add's own traffic are left out (its hot loop is that)."""
    import torch
    m = read_operand_bytes(sizes) // 4
    a, b, o = torch.randn(m), torch.randn(m), torch.empty(m)

    def hot() -> float:
        torch.add(a, b, out=o)
        torch.add(one, one)
        return _thread_seconds(lambda: torch.add(a, b, out=o))

    cases = [Case("evicted_read_hot", "fp32", (0,), 0, 12 * m, hot, warmup=0, turns=turns, self_timed=True)]
    for size in sizes:
        if size < 2 * 12 * m:
            continue
        n = size // 12
        ea, eb, eo = a_all[:n], b_all[:n], o_all[:n]

        def reread(ea=ea, eb=eb, eo=eo) -> float:            # noqa: ANN001
            torch.add(ea, eb, out=eo)
            o.fill_(0.0)
            torch.add(one, one)
            return _thread_seconds(lambda: torch.add(a, b, out=o))
        cases.append(Case("evicted_read", "fp32", (size,), 0, 12 * m, reread, warmup=0, turns=turns,
                          self_timed=True))
    return cases


def fit_evicted_reads(ms: Sequence[Measurement]) -> tuple[float, tuple[tuple[float, float], ...]] | None:
    """(bytes/s of the re-read stall after the largest traffic, (reuse distance, fraction) curve)
    from the ``evicted_read`` records and the ``evicted_read_hot`` one; None without them. The stall
    per input byte is the re-read add beyond the hot one over its two inputs' bytes; its reuse
    distance is the evicting add's bytes plus the output made hot after it. The curve starts at the
    hot loop's own distance (one call of the add) with no stall and is made non-decreasing."""
    hot = next((m for m in ms if m.kind == "evicted_read_hot"), None)
    reads = sorted((m.shape[0], m.seconds, m.bytes) for m in ms if m.kind == "evicted_read")
    if hot is None or len(reads) < 2:
        return None
    per_byte = [(float(size + nbytes // 3), max(0.0, t - hot.seconds) / (2 * nbytes / 3))
                for size, t, nbytes in reads]
    curve = monotone([(float(hot.bytes), 0.0)] + [(x, y * 1e12) for x, y in per_byte])     # picoseconds per byte
    full = curve[-1][1]
    if full <= 0.0:
        return None
    return 1e12 / full, _fractions(curve, full)


def fit_evicted_calls(ms: Sequence[Measurement]) -> tuple[float, tuple[tuple[float, float], ...],
                                                          tuple[tuple[float, float], ...]] | None:
    """(stall after the largest traffic, (bytes, fraction) after a kernel moving that many bytes,
    (bytes, fraction) a hot loop at that size already includes) from the ``evicted_call`` records
    (each a small op's time after the traffic minus its time right after, so a stall already, less
    the value after the smallest traffic) and the ``evicted_self`` ones; None without two sizes.
    Both curves are made non-decreasing, are
    fractions of the stall after the largest traffic, and the second is at most the first at each size."""
    after = sorted((m.shape[0], m.seconds) for m in ms if m.kind == "evicted_call")
    own = sorted((m.shape[0], m.seconds) for m in ms if m.kind == "evicted_self")
    if len(after) < 2:
        return None
    # after the smallest traffic (an eighth of the L2) nothing was evicted: what an op's first call
    # there takes beyond its second is the ops' own call-to-call difference, the baseline of the rest
    # (left in, ~1 us on every kernel after a small one put the 4-layer eager stack 12% slow)
    base = max(0.0, after[0][1])
    curve = monotone([(float(x), max(0.0, t - base) * 1e6) for x, t in after])     # microseconds
    full = curve[-1][1]
    if full <= 0.0:
        return None
    own_curve = monotone([(float(x), max(0.0, t) * 1e6) for x, t in own]) if len(own) >= 2 else ()
    # a loop of one op cannot include more than the stall after its own traffic: at tens of MiB the
    # difference of two milliseconds-long adds is mostly noise, which this bound keeps out
    stall_at = dict(curve)
    own_curve = tuple((x, min(y, stall_at.get(x, full))) for x, y in own_curve)
    return (full * 1e-6, _fractions(curve, full), _fractions(own_curve, full))


def _fractions(curve: Sequence[tuple[float, float]], full: float) -> tuple[tuple[float, float], ...]:
    """The curve over ``full``, each value in (0, 1] (4 decimals; the target format takes no zero, and
    1e-4 of the stall is a few nanoseconds)."""
    return tuple((x, round(min(1.0, max(1e-4, y / full)), 4)) for x, y in curve)
