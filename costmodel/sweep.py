"""Sweeps: one program over a grid of dim bindings (``batch=1,8,64`` x ``seq=512,2048``) on targets.

Capacity questions are curves, not points: where throughput saturates, where a model stops
fitting, where decode turns compute-bound. The lowered graph is reused for every point: each point
only re-binds dims (the cost cache makes that a fraction of lowering) and re-runs the targets'
execution models.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..backends import Target
from ..errors import NarrowpipeError
from ..ir import Graph
from ..jsonout import dumps as dump_json
from .compare import Comparison, compare

__all__ = ["Sweep", "sweep", "grid_points", "SWEEP_FORMAT"]

SWEEP_FORMAT = "narrowpipe.sweep"
#: Beyond this many points a sweep is more likely a typo than a plan.
MAX_POINTS = 10_000


def grid_points(grid: Mapping[str, Sequence[int]]) -> list[dict[str, int]]:
    """Every combination of the grid's values, the first dim varying slowest."""
    names = list(grid)
    for name in names:
        if not grid[name]:
            raise NarrowpipeError(f"dim {name} has no values to sweep")
    count = 1
    for name in names:
        count *= len(grid[name])
    if count > MAX_POINTS:
        raise NarrowpipeError(f"the sweep has {count} points (more than {MAX_POINTS}); narrow the grid")
    return [dict(zip(names, combo)) for combo in itertools.product(*(grid[n] for n in names))]


@dataclass
class Sweep:
    """One :class:`Comparison` per grid point, in grid order."""

    graph: str
    grid: dict[str, list[int]]
    points: list[Comparison]

    def to_dict(self) -> dict[str, Any]:
        return {"format": SWEEP_FORMAT, "version": 2, "graph": self.graph, "grid": self.grid,
                "points": [c.to_dict() for c in self.points]}

    def to_json(self, indent: int | None = 2) -> str:
        return dump_json(self.to_dict(), indent, "sweep")


def sweep(graph: Graph, targets: Iterable[str | Target], grid: Mapping[str, Sequence[int]],
          *, progress: Callable[[str], None] | None = None, **options: Any) -> Sweep:
    """Compare ``graph`` on ``targets`` at every point of ``grid``; ``options`` as for ``compare``.
    ``progress`` is called after each point with its bindings (the CLI's progress bar)."""
    specs = list(targets)
    points = []
    for point in grid_points(grid):
        points.append(compare(graph, specs, dims=point, **options))
        if progress is not None:
            progress(", ".join(f"{k}={v}" for k, v in point.items()))
    return Sweep(graph.name, {k: list(v) for k, v in grid.items()}, points)
