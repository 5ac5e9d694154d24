"""What every sharding rule shares: the :class:`Decision` a rule returns, the :class:`RuleContext`
it reads layouts and shapes from, and the small helpers (run whole, operands past the ones a rule
reasons about, the size of a group of axes)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ...ir import Node, Op, Value
from .shardspec import Spec

__all__ = ["Decision", "RuleContext", "Rule", "LINEAR", "whole", "rest", "axes_size", "drop_duplicates", "numel"]


@dataclass
class Decision:
    """Wanted operand layouts (None for absent operands) and the results' layouts."""

    want: list[Spec | None]
    outs: list[Spec]
    #: Extra collectives the op needs besides resharding (a softmax split over its axis all-reduces
    #: its row statistics): ``(axis, rows)`` per statistic.
    stats: list[tuple[str, int]] = field(default_factory=list)


LINEAR = frozenset({Op.ADD, Op.SUB, Op.NEG, Op.CAST, Op.COPY, Op.IDENTITY})


class RuleContext(Protocol):
    @property
    def sizes(self) -> Mapping[str, int]:
        ...

    def raw(self, v: Value) -> Spec:
        """The layout as produced, partial sums included (``spec`` shows partial values settled)."""
        ...

    def shape(self, v: Value) -> tuple[int, ...]:
        ...

    def spec(self, v: Value) -> Spec:
        ...

    def decide_weights(self, node: Node) -> None:
        """Fix the layout of any weight operand of ``node`` not decided yet."""
        ...

    def is_token_dim(self, v: Value, dim: int) -> bool:
        """Whether dim ``dim`` of ``v`` runs over batch or sequence positions (order matters there)."""
        ...

    def made_layout(self, v: Value) -> Spec:
        """The layout a token tensor takes when each device makes its own part of it (a broadcast)."""
        ...

    def uneven_rows(self, v: Value) -> bool:
        """Whether ``v``'s rows may split unevenly: the experts' routed rows, as many as the router
        sent (each rank holds its share, the busiest the largest)."""
        ...


Rule = Callable[[RuleContext, Node], Decision]


def _specs(ctx: RuleContext, node: Node) -> list[Spec | None]:
    return [ctx.spec(v) if v is not None else None for v in node.inputs]


def whole(ctx: RuleContext, node: Node) -> Decision:
    """Run unsplit: every operand gathered, every result whole."""
    want = [Spec.replicated(len(ctx.shape(v))) if v is not None else None for v in node.inputs]
    return Decision(want, [Spec.replicated(len(ctx.shape(v))) for v in node.outputs])


def drop_duplicates(dims: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """An axis can split only one dim: later repeats are dropped (their operand gets gathered)."""
    seen: set[str] = set()
    out = []
    for d in dims:
        keep = tuple(a for a in d if a not in seen)
        seen.update(keep)
        out.append(keep)
    return out


# -- contractions ------------------------------------------------------------------------------------

def rest(ctx: RuleContext, node: Node, start: int) -> list[Spec | None]:
    """Operands past the ones a rule reasons about: whole."""
    return [Spec.replicated(len(ctx.shape(v))) if v is not None else None for v in node.inputs[start:]]


# -- attention ----------------------------------------------------------------------------------------

def axes_size(ctx: RuleContext, axes: tuple[str, ...]) -> int:
    k = 1
    for a in axes:
        k *= ctx.sizes[a]
    return k


# -- elementwise, reductions, normalizations ---------------------------------------------------------

def numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n

