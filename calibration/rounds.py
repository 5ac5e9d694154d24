"""Calibration in interleaved rounds spread over the whole run, so no fitted term is one burst.

A shared machine drifts: other processes' cache and memory traffic comes and goes over tens of
seconds. Measuring sweep after sweep puts each term's samples in one short window, so the window's
state becomes the term: the three calibrations of three validation runs on 2026-12-03 read the
add-bandwidth plateau at 0.164, 0.065 and 0.083 of the best transfer and the 3x3 convolution plateau
at 0.98, 0.86 and 0.85, while the held-out convolutions they predicted agreed within 14%. Here
every case of every sweep is a :class:`.measurement.Case` (what to call and the work it stands for),
and :func:`measure_in_rounds` takes one turn of each case per round, in an order shuffled each round
(a sweep's cases kept together, so each keeps the neighbours its sweep gave it), for ``rounds``
rounds that together span the calibration; a case's seconds are the median over its turns, so a
slow spell is one turn of each case, shared out, not all of one term's samples. A turn keeps what
the case measures: a hot case (a bandwidth or a GEMM rate) repeats its call within the turn after a
warm-up call, as a hot loop does; a case that must not follow itself (a depthwise or direct
convolution, whose speed depends on what ran before it, as in a network) is called once per turn
with no warm-up, and may take several turns per round, spread over its sweep's stretch of the round.

The clocks are those of :func:`.timer.timed_call` (the smaller of wall and thread-CPU time at one
torch thread), CUDA events on a CUDA device; :class:`Clocks` can be replaced to test the schedule.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .measurement import Case, Measurement
from .timer import _cuda_samples, _one_torch_thread, calibration_quantile, quantile

__all__ = ["Clocks", "round_order", "measure_in_rounds", "turn_stride", "DEFAULT_ROUNDS", "QUICK_ROUNDS",
           "LONG_CALL_SECONDS", "LONG_CALL_TURNS"]

#: Rounds of a full calibration (about 4 s each on the 1-thread Xeon VM; 9 rounds took 48 s in all)
#: and of ``--quick``.
DEFAULT_ROUNDS = 15
QUICK_ROUNDS = 3
#: A call at least this long (its last warm-up call) is a long case: a turn of it is one call that
#: already averages over the machine's sub-second jitter, so it takes a turn in every few rounds only,
#: ``LONG_CALL_TURNS`` turns in all, still spread over the whole run. Without this the wide GEMM grid
#: points (a 1200x16000x3584 GEMM takes ~2 s on one core) would double a calibration's time.
LONG_CALL_SECONDS = 0.25
LONG_CALL_TURNS = 5


def _faults() -> int | None:
    from .interleave import _minor_faults
    return _minor_faults()


@dataclass
class Clocks:
    """The clocks a turn reads: wall (``perf_counter``), the thread's CPU time (``thread_time``) and
    its minor page faults (None where not reported)."""

    wall: Callable[[], float] = time.perf_counter
    thread: Callable[[], float] = time.thread_time
    faults: Callable[[], int | None] = _faults


def round_order(cases: Sequence[Case], r: int) -> list[int]:
    """Case indices of round ``r``: the sweeps (:attr:`.measurement.Case.group`) in an order
    shuffled for each round, and within a sweep its cases shuffled too (seeded by ``r``, so a run is
    reproducible, and no case always follows the same one, opens the round or closes it), each case
    ``turns`` times with its turns spread evenly over its sweep's stretch of the round."""
    rng = random.Random(r)
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(cases):
        groups.setdefault(c.group, []).append(i)
    names = list(groups)
    rng.shuffle(names)
    order: list[int] = []
    for name in names:
        members = groups[name]
        rng.shuffle(members)
        n = len(members)
        slots = sorted(((p + k * n / max(cases[i].turns, 1)) % n, k, i)
                       for p, i in enumerate(members) for k in range(max(cases[i].turns, 1)))
        order += [i for _, _, i in slots]
    return order


def turn_stride(rounds: int, call_seconds: float) -> int:
    """Every how many rounds a case whose call lasts ``call_seconds`` takes a turn: 1 (every round)
    unless it is a long case (:data:`LONG_CALL_SECONDS`), which takes ``LONG_CALL_TURNS`` turns over
    the ``rounds`` (every round when there are no more rounds than that)."""
    if call_seconds < LONG_CALL_SECONDS:
        return 1
    return max(1, rounds // LONG_CALL_TURNS)


def measure_in_rounds(cases: Sequence[Case], rounds: int = DEFAULT_ROUNDS, *, device: str = "cpu",
                      clocks: Clocks | None = None, warmup: int = 2, thread_clock: bool | None = None,
                      progress: Callable[[str], None] | None = None) -> list[Measurement]:
    """Every case's :class:`.sweeps.Measurement`: its seconds the median over its turns (the lower
    quartile on wall-clock samples, :func:`.timer.calibration_quantile`), a turn's the median of its
    calls; ``rounds`` keeps each turn's seconds in order. Before the first round each case is called
    ``warmup`` times, which also sets how many calls its turns take (a case whose call outlasts a turn
    takes one, with no warm-up call in its turns) and whether it is a long case that takes a turn only
    every :func:`turn_stride` rounds (the rounds it skips offset case by case). A ``skip_faulted`` case's
    turns with page faults are left out when three or more are clean. ``thread_clock`` (default:
    on the CPU at one torch thread) times each call as the smaller of its wall and thread-CPU time."""
    clocks = clocks or Clocks()
    if thread_clock is None:
        thread_clock = device == "cpu" and _one_torch_thread()
    calls, strides = [], []
    for c in cases:
        last = 0.0
        for _ in range(max(warmup, 1)):
            w0 = clocks.wall()
            c.fn()
            last = clocks.wall() - w0
            if last >= LONG_CALL_SECONDS:       # a call this long has warmed what it uses
                break
        calls.append(max(1, min(c.max_calls, math.ceil(c.min_seconds / max(last, 1e-7)))))
        strides.append(turn_stride(rounds, last))
    every: list[list[float]] = [[] for _ in cases]
    clean: list[list[float]] = [[] for _ in cases]
    for r in range(rounds):
        for i in round_order(cases, r):
            if (r + i) % strides[i]:
                continue
            c = cases[i]
            fn = c.setup() if c.setup is not None else c.fn
            for _ in range(c.warmup if calls[i] > 1 else 0):     # a call as long as a turn warms nothing
                fn()
            samples, faulted = _turn(c, fn, calls[i], device, thread_clock, clocks)
            every[i].append(statistics.median(samples))
            kept = [s for s, f in zip(samples, faulted) if not f]
            if kept:
                clean[i].append(statistics.median(kept))
        if progress:
            progress(f"calibration round {r + 1}/{rounds}")
    q = 0.5 if thread_clock else calibration_quantile(device)
    out = []
    for i, c in enumerate(cases):
        values = clean[i] if c.skip_faulted and len(clean[i]) >= 3 else every[i]
        seconds = quantile(values, q) if len(values) > 3 else statistics.median(values)
        out.append(Measurement(c.kind, c.dtype, c.shape, c.flops, c.bytes, seconds, tuple(values)))
    return out


def _turn(c: Case, fn: Callable[[], object], calls: int, device: str, thread_clock: bool,
          clocks: Clocks) -> tuple[list[float], list[bool]]:
    """The seconds of one turn's timed calls, and whether the thread took page faults during each
    (counted only for a ``skip_faulted`` case)."""
    if device.startswith("cuda"):
        samples = _cuda_samples(fn, calls, 0.0, calls)
        return samples, [False] * len(samples)
    seconds, faulted = [], []
    if c.self_timed:
        return [float(fn()) for _ in range(calls)], [False] * calls     # type: ignore[arg-type]
    for _ in range(calls):
        f0 = clocks.faults() if c.skip_faulted else None
        c0, w0 = clocks.thread() if thread_clock else 0.0, clocks.wall()
        fn()
        w1 = clocks.wall()
        seconds.append(min(w1 - w0, clocks.thread() - c0) if thread_clock else w1 - w0)
        f1 = clocks.faults() if c.skip_faulted else None
        faulted.append(f0 is not None and f1 is not None and f1 != f0)
    return seconds, faulted

