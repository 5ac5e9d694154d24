"""The verdict of a comparison: which target is fastest, cheapest per million items, and most
frugal per joule, each with its narrowest pipe, so a reader can act on one line.

"Fastest" is the lowest predicted time of the whole system a target names (71 Groq chips against
one H100): that is what an expert reads it as, the latency of a step and the system's throughput.
Where the targets use different numbers of chips, the best throughput per chip is a separate pick,
labelled so (QA: a per-chip ranking called "fastest" named the H100 for a batch-1 decode that
Groq's 71 chips ran 4.6x sooner). Money and energy are in total (both already count every chip).
Targets whose program does not fit are left out of every pick: a number for a model that cannot run
is no answer.

"Cheapest" is only fair when the prices compared are of one kind. The catalog's are all hyperscaler
on-demand list prices (backends/vocab.py), but a chip no hyperscaler rents, a ``--price`` or a spec
file can bring another kind, so the verdict groups the priced targets by ``price_basis`` and a
renderer says so when there is more than one group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .report import Report, Timing

__all__ = ["Pick", "Verdict", "verdict", "fastest_target"]


@dataclass(frozen=True)
class Pick:
    """One winner: the target, the figure it wins on, and its narrowest pipe (why)."""

    target: str
    value: float
    unit: str
    narrowest: str


@dataclass(frozen=True)
class Verdict:
    fastest: Pick | None
    cheapest: Pick | None
    most_per_joule: Pick | None
    per_chip: bool               # the targets use different chip counts (``most_per_chip`` is picked)
    excluded: tuple[str, ...]    # targets left out because the program does not fit
    #: price basis -> the runnable targets priced on it (more than one key: costs are on mixed bases)
    price_bases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: the best throughput per chip, where the chip counts differ (else None: it is ``fastest``)
    most_per_chip: Pick | None = None

    def to_dict(self) -> dict[str, object]:
        def pick(p: Pick | None) -> dict[str, object] | None:
            return None if p is None else {"target": p.target, "value": p.value, "unit": p.unit,
                                           "narrowest": p.narrowest}
        return {"fastest": pick(self.fastest), "cheapest": pick(self.cheapest),
                "most_per_joule": pick(self.most_per_joule), "per_chip": self.per_chip,
                "most_per_chip": pick(self.most_per_chip),
                "excluded": list(self.excluded),
                "price_bases": {basis: list(names) for basis, names in self.price_bases.items()}}


def _best(timings: Sequence[Timing], value: Callable[[Timing], float | None], unit: str,
          lowest: bool) -> Pick | None:
    scored = [(v, t) for t in timings if (v := value(t)) is not None and v > 0]
    if not scored:
        return None
    v, t = (min if lowest else max)(scored, key=lambda vt: vt[0])
    return Pick(t.target, v, unit, t.narrowest)


def verdict(reports: Sequence[Report]) -> Verdict:
    timings = [r.timing for r in reports if r.timing is not None]
    runnable = [t for t in timings if t.fits]
    excluded = tuple(t.target for t in timings if not t.fits)
    unit = runnable[0].item_unit if runnable else "items"
    per_chip = len({t.devices for t in runnable}) > 1
    fastest = _best(runnable, lambda t: t.time_s, "s", lowest=True)
    most_per_chip = (_best(runnable, lambda t: t.throughput / t.devices, f"{unit}/s per chip", lowest=False)
                     if per_chip else None)
    cheapest = _best(runnable, lambda t: t.cost_per_million_items, f"$ per M {unit}", lowest=True)
    frugal = _best(runnable, lambda t: t.items_per_joule, f"{unit}/J", lowest=False)
    bases: dict[str, tuple[str, ...]] = {}
    for t in runnable:
        if t.cost_usd is not None:
            basis = t.price_basis or "unstated"
            bases[basis] = (*bases.get(basis, ()), t.target)
    return Verdict(fastest, cheapest, frugal, per_chip, excluded, bases, most_per_chip)


def fastest_target(reports: Sequence[Report]) -> str | None:
    """The target the verdict calls fastest (lowest system time), which every table and page
    highlights, so the highlight never contradicts the verdict beside it."""
    pick = verdict(reports).fastest
    return pick.target if pick is not None else None
