"""Side-by-side predictions of one program on several targets, and what-if studies of one target.

The program is counted once; each target only re-runs fusion and its execution model.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..backends import Target, get_target
from ..errors import NarrowpipeError, NarrowpipeWarning
from ..ir import Graph
from ..jsonout import dumps as dump_json
from .analyze import build_report, merge_dims, range_notes, resolve_bindings
from .experts import ExpertBalance
from .interpreter import interpret
from .prices import prices_by_target
from .report import Report
from .targeted import apply_target
from .verdict import verdict

__all__ = ["Comparison", "compare", "prices_by_target", "WhatIf", "whatif", "COMPARISON_FORMAT"]

COMPARISON_FORMAT = "narrowpipe.comparison"


@dataclass
class Comparison:
    """One report per target, in the order asked; ``fastest`` by predicted time."""

    graph: str
    dims: dict[str, int]
    reports: list[Report]

    @property
    def fastest(self) -> Report:
        return min(self.reports, key=lambda r: r.time_s or float("inf"))

    def __getitem__(self, target: str) -> Report:
        name = target if any(r.target == target for r in self.reports) else get_target(target).name
        for r in self.reports:
            if r.target == name:
                return r
        raise KeyError(target)

    def __repr__(self) -> str:
        """One line per target (each report's own compact repr), not every op row of every report."""
        lines = "".join(f"\n  {r!r}," for r in self.reports)
        return f"Comparison({self.graph!r}, {len(self.reports)} targets:{lines}\n)"

    def to_dict(self) -> dict[str, Any]:
        return {"format": COMPARISON_FORMAT, "version": 3, "graph": self.graph, "dims": self.dims,
                "targets": [r.to_dict() for r in self.reports], "verdict": verdict(self.reports).to_dict()}

    def to_json(self, indent: int | None = 2) -> str:
        return dump_json(self.to_dict(), indent, "comparison")


def _refuse_twins(chips: list[Target], specs: list[Any]) -> None:
    """Two targets of one name would print as two identical columns, and prices, the verdict and
    the JSON key targets by name: refuse, naming where each came from."""
    seen: dict[str, Any] = {}
    for chip, spec in zip(chips, specs):
        if chip.name in seen:
            first = seen[chip.name]
            where = " and ".join(str(x) if isinstance(x, str) else "a Target object" for x in (first, spec))
            raise NarrowpipeError(f"two targets are named {chip.name!r} ({where}): one chip given twice, or two "
                                  "files that need distinct `name`s (the comparison keys targets by name)")
        seen[chip.name] = spec


def _target_list(targets: str | Target | Iterable[str | Target]) -> list[str | Target]:
    """The targets as a list: a string is comma-separated names, as ``--targets`` takes them (iterated,
    ``"h100"`` was the targets h, 1, 0, 0); none at all is an error, not an empty comparison."""
    if isinstance(targets, str):
        specs: list[str | Target] = [t.strip() for t in targets.split(",") if t.strip()]
    elif isinstance(targets, Target):
        specs = [targets]
    else:
        specs = list(targets)
    if not specs:
        raise NarrowpipeError("compare: no targets given (name one or more, e.g. ['h100', 'mi300x'])")
    return specs


def compare(graph: Graph, targets: str | Target | Iterable[str | Target], *, dims: Mapping[str, Any] | None = None,
            strict: bool = False, prices: Mapping[str, float] | None = None, fusion: str | None = None,
            allow_tf32: bool = False, sparse: bool = False, expert_balance: str | ExpertBalance | None = None,
            fp32_matmul: str = "default", fp32_conv: str = "default", memory_reserve: float | None = None,
            **keyword_dims: Any) -> Comparison:
    """Predict ``graph`` on each target (names, aliases, TOML paths or Target objects; a string of
    comma-separated names).

    ``dims={...}`` binds symbolic dims (keywords such as ``batch=8`` work where they name no option);
    ``expert_balance``, ``fp32_matmul``, ``fp32_conv`` and ``memory_reserve`` as for :func:`~narrowpipe.analyze`.
    """
    specs = _target_list(targets)
    from ..loading import as_graph
    graph = as_graph(graph, "compare")
    bindings = resolve_bindings(graph, merge_dims(dims, keyword_dims))
    table = interpret(graph, bindings, strict=strict, expert_balance=ExpertBalance.parse(expert_balance))
    counted = build_report(table)
    counted.notes.extend(range_notes(graph, bindings))
    chips = [get_target(spec) for spec in specs]
    _refuse_twins(chips, specs)
    price_of = prices_by_target(prices, chips)
    reports = []
    for t in chips:
        reports.append(apply_target(counted, table, t, fusion=fusion, allow_tf32=allow_tf32, sparse=sparse,
                                    price=price_of.get(t.name), fp32_matmul=fp32_matmul,
                                    fp32_conv=fp32_conv, memory_reserve=memory_reserve))
    unused = sorted(set(price_of) - {r.target for r in reports})
    if unused:     # a price for a chip not compared prices nothing: say so rather than drop it
        warnings.warn(f"--price for {', '.join(unused)}: not among the compared targets, so it prices nothing",
                      NarrowpipeWarning, stacklevel=2)
    return Comparison(graph.name, bindings, reports)


@dataclass
class WhatIf:
    """The same program on a target and on a modified copy of it."""

    base: Report
    scaled: Report
    factors: dict[str, float]

    @property
    def speedup(self) -> float:
        a, b = self.base.time_s or 0.0, self.scaled.time_s or 0.0
        return a / b if b else float("inf")

    def to_dict(self) -> dict[str, Any]:
        return {"format": "narrowpipe.whatif", "version": 1, "factors": self.factors, "speedup": self.speedup,
                "base": self.base.to_dict(), "scaled": self.scaled.to_dict()}

    def to_json(self, indent: int | None = 2) -> str:
        return dump_json(self.to_dict(), indent, "what-if")


def whatif(graph: Graph, target: str | Target, factors: Mapping[str, float], *,
           dims: Mapping[str, Any] | None = None, **kwargs: Any) -> WhatIf:
    """Re-run ``graph`` on ``target.scaled(**factors)`` (resources: see backends.RESOURCES).

    ``dims`` and the other keywords are :func:`compare`'s.
    """
    base_target = get_target(target)
    scaled_target = base_target.scaled(**dict(factors))
    kwargs["prices"] = _scaled_price(kwargs.get("prices"), base_target, scaled_target)
    both = compare(graph, [base_target, scaled_target], dims=dims, **kwargs)
    w = WhatIf(both.reports[0], both.reports[1], dict(factors))
    if w.scaled.timing is not None and w.base.time_s == w.scaled.time_s:
        w.scaled.timing.notes.append(_unmoved_note(w))
    base_t, scaled_t = w.base.timing, w.scaled.timing
    if base_t is not None and scaled_t is not None and base_t.devices != scaled_t.devices:
        scaled_t.notes.append(
            f"the scaled chip runs on {scaled_t.devices:,} chips, the base on {base_t.devices:,}: each what-if side "
            "is laid out on the fewest chips that hold the model (a chip with more fast memory needs fewer, and "
            "fewer chips compute less at once), so the speed-up compares two deployments, not one")
    return w


def _scaled_price(prices: Mapping[str, float] | None, base: Target, scaled: Target) -> dict[str, float] | None:
    """The scaled chip is the base chip modified: it takes the base's given price unless the user
    priced the scaled name itself (it took the catalog's, $6.88/h against a given $2/h, so the
    per-token cost compared two prices, not two chips)."""
    if not prices:
        return None
    priced = prices_by_target(prices, [base, scaled])
    out = dict(prices)
    if base.name in priced and scaled.name not in priced:
        out[scaled.name] = priced[base.name]
    return out


def _unmoved_note(w: WhatIf) -> str:
    """Why scaling moved nothing: the usual surprise is a matrix peak scaled for a model whose
    matmuls run on the vector units (fp32 on a GPU without an fp32 matrix rate)."""
    names = ", ".join(w.factors)
    timing = w.base.timing
    note = f"scaling {names} moved no kernel's time: no kernel is bound by what it scales"
    matrix_only = all(k == "peak_flops" or k.startswith("peak_") for k in w.factors)
    if matrix_only and timing is not None and "vector units" in timing.precision:
        note += (f"; the model's matmuls run as {timing.precision} here, which peak_* (the matrix units) "
                 "does not scale: use compute (every FLOP/s) or vector_flops")
    return note
