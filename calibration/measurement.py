"""The records calibration works with: a :class:`Case` to measure and the :class:`Measurement` it
yields. A measurement keeps what was run (kind, dtype, shape), the work it represents (FLOPs,
bytes moved) and its seconds, so a fit can be redone or audited from the raw file alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Measurement", "Case", "bound"]


@dataclass
class Measurement:
    kind: str            # "dispatch", "matmul", "add", "copy", "conv", "transcendental:<fn>", "vector_op:<op>",
    #                      "attention", "fill", "fresh_fill", "gemm_grid", "pad_rows", "module_call",
    #                      "depthwise" (flops: output taps, bytes: input + output elements)
    dtype: str
    shape: tuple[int, ...]
    flops: int
    bytes: int
    seconds: float
    #: The seconds of each of its turns in calibration's interleaved rounds (:mod:`.rounds`), in
    #: order; empty in files written before them.
    rounds: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["shape"] = list(self.shape)
        if self.rounds:
            d["rounds"] = list(self.rounds)
        else:
            del d["rounds"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Measurement:
        """From :meth:`to_dict`'s output read back from JSON (``rounds`` optional)."""
        return cls(str(d["kind"]), str(d["dtype"]), tuple(int(x) for x in d["shape"]),
                   int(d["flops"]), int(d["bytes"]), float(d["seconds"]),
                   tuple(float(x) for x in d.get("rounds", ())))


@dataclass
class Case:
    """One measurement to take: the call, and what its record says it did (kind, dtype, shape,
    FLOPs, bytes, as :class:`Measurement`), with how a turn of it is timed (:mod:`.rounds`)."""

    kind: str
    dtype: str
    shape: tuple[int, ...]
    flops: int
    bytes: int
    fn: Callable[[], object]
    #: Untimed calls at the start of each turn: 1 for a hot case (its data back in the caches, as
    #: a hot loop has it); 0 for a case that must run right after other work, as in a network.
    warmup: int = 1
    #: A turn repeats the timed call until its calls last this long (at least one call) ...
    min_seconds: float = 0.004
    #: ... and at most this many times.
    max_calls: int = 50
    #: Turns per round, spread over the round (a one-call case that wants more samples).
    turns: int = 1
    #: Leave out the turns during which the thread took page faults (when three or more are clean).
    skip_faulted: bool = False
    #: ``fn`` times itself and returns its seconds (a case that must time only part of its call,
    #: such as an op right after another that set up its state).
    self_timed: bool = False
    #: Called (untimed) at the start of each turn for the call that turn times, instead of ``fn``
    #: (a case whose inputs are made anew each turn).
    setup: Callable[[], Callable[[], object]] | None = None

    @property
    def group(self) -> str:
        """The sweep the case belongs to (its kind before any ``:``): a round takes a sweep's turns
        together, so each case keeps the neighbours its sweep gave it (a depthwise layer after
        other depthwise layers, not after a 256 MiB add)."""
        return self.kind.split(":", 1)[0]


def bound(fn: Callable[..., object], *args: Any, **kwargs: Any) -> Callable[[], object]:
    """``fn(*args, **kwargs)`` as a call of no arguments, through one Python frame (a lambda, not a
    ``functools.partial``): the one Python call per op the dispatch measurement also has."""
    return lambda: fn(*args, **kwargs)
