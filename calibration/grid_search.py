"""Descent on a grid of parameter values: the search :func:`.kernel_fit.fit_kernel_terms` runs.

A chip's kernel terms are searched each over its own grid of plausible values. One field at a time
over its whole grid finds each term's level; but the small-kernel terms trade against each other (a
latency floor against a per-wave fill, the exposed epilogue against both, the split-K threshold
against all three: a problem that splits pays a fill per wave and a bigger epilogue), so a point
where no one field can move alone is often not the optimum. Joint moves of every pair of fields
(within two grid steps) and of all the coupled terms together (one step each) are tried too, round
after round until none improves the score. A move is taken only where it lowers the score: a tie
keeps the current value, also for a field a joint move carried along (a joint move whose gain is
all one field's leaves the other where it was, not at the lowest grid point tried).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["COUPLED", "GridSearch", "Score", "lower", "near"]

#: Terms that trade against each other on small kernels (see the module docstring).
COUPLED = ("gemm_latency", "gemm_wave_overhead", "gemm_epilogue_exposed", "gemm_split_k_fill")
#: A score this much lower is an improvement; anything closer is a tie.
TIE = 1e-12
#: A score: compared in order, the first that differs by more than :data:`TIE` decides (a robust
#: score first, then a tie-break, e.g. the rows a robust score leaves out).
Score = tuple[float, ...]


def lower(a: Score, b: Score) -> bool:
    """Whether ``a`` is better than ``b``: lower at the first term where they are not tied."""
    for x, y in zip(a, b):
        if x < y - TIE:
            return True
        if x > y + TIE:
            return False
    return False


def near(grid: Sequence[Any], value: Any, steps: int = 2) -> Sequence[Any]:
    """The grid points within ``steps`` of the one nearest ``value``."""
    i = min(range(len(grid)), key=lambda j: abs(float(grid[j]) - float(value)))
    return grid[max(0, i - steps): i + steps + 1]


@dataclass
class GridSearch:
    """The best point found so far of ``score_of`` over named values, and how it got there."""

    score_of: Callable[[Mapping[str, Any]], Score]
    values: dict[str, Any]
    history: list[tuple[str, Any, Score]] = field(default_factory=list)
    trials: int = 0

    def __post_init__(self) -> None:
        self.best = self._score(self.values)

    def _score(self, values: Mapping[str, Any]) -> Score:
        self.trials += 1
        return self.score_of(values)

    def try_point(self, point: Mapping[str, Any]) -> bool:
        """Move to ``point`` (some names' new values) if it scores lower; True if it moved."""
        old = self.values
        vals = {**old, **point}
        s = self._score(vals)
        if not lower(s, self.best):
            return False
        self.best, self.values = s, vals
        if len(point) > 1:          # a tie keeps the current value of a field carried along
            for k in point:
                if point[k] != old[k]:
                    back = {**self.values, k: old[k]}
                    sb = self._score(back)
                    if not lower(self.best, sb):
                        self.best, self.values = sb, back
        moved = {k: self.values[k] for k in point if self.values[k] != old[k]}
        self.history.append((",".join(moved), tuple(moved.values()), self.best))
        return True

    def descend(self, grids: Mapping[str, Sequence[Any]], rounds: int = 30) -> None:
        """Single, pair and coupled moves over ``grids`` (name -> grid), until none improves."""
        names = list(grids)
        coupled = [n for n in COUPLED if n in grids]
        for _ in range(rounds):
            changed = False
            for name in names:
                for v in grids[name]:
                    if v != self.values[name]:
                        changed |= self.try_point({name: v})
            for i, a in enumerate(names):
                for b in names[i + 1:]:
                    for va, vb in itertools.product(near(grids[a], self.values[a]), near(grids[b], self.values[b])):
                        if va != self.values[a] and vb != self.values[b]:
                            changed |= self.try_point({a: va, b: vb})
            if len(coupled) > 2:
                steps = [near(grids[n], self.values[n], 1) for n in coupled]
                for combo in itertools.product(*steps):
                    if sum(v != self.values[n] for n, v in zip(coupled, combo)) > 2:
                        changed |= self.try_point(dict(zip(coupled, combo)))
            if not changed:
                break
