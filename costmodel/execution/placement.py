"""Which scale-up domains the groups of a parallel axis actually occupy, in a world of ``world`` ranks.

Why: a collective is synchronous per group, and the training step waits for its slowest group, so a
group must be timed where the launcher puts its ranks, not as if it started on a domain boundary.
Launchers (Megatron-LM's ``RankGenerator``, torchtitan's device mesh) number ranks so that they fill
scale-up domains in order (rank ``r`` is in domain ``r // D``) and cut each mesh axis into groups of
``size`` members ``stride`` ranks apart: ``tp`` innermost (stride 1), then ``cp``, ``ep``/``dp``,
``pp``. A group's ranks are ``base + i * stride`` for ``i < size``, one group per ``base`` with
``(base // stride) % size == 0``. When ``size x stride`` does not divide the domain, some groups
straddle a boundary: on 72-GPU NVL72 racks, ep=64 at stride 1 has ranks 64..127 in its second group,
8 in rack 0 and 56 in rack 1.

A group's :class:`Spread` is what its time depends on: how many domains it spans, and the fewest
members it has in any one of them (the narrowest crossing: a ring enters and leaves that domain
through that many NICs, and a hierarchical algorithm's shards are largest there). Point-to-point
sends of a pipeline go between ranks ``stride`` apart (stage ``k`` to ``k + 1``): each pair is in one
domain or spans two. Spreads are cached per (domain, size, stride, world) pattern, so a search that
asks thousands of times enumerates the groups once.
"""

from __future__ import annotations

from functools import lru_cache
from math import ceil
from typing import NamedTuple

__all__ = ["Spread", "aligned_spread", "group_spreads", "pair_spreads", "spread_counts", "group_ranks"]


class Spread(NamedTuple):
    """One group's footprint: the fewest members in one scale-up domain, and the domains it spans."""

    local: int
    domains: int

    @property
    def inside(self) -> bool:
        return self.domains == 1


def aligned_spread(domain: int, group: int, stride: int = 1) -> Spread:
    """The spread of a group assumed to start on a domain boundary, with every domain it reaches
    holding as many members as the first (what is known without the world's size): a ``tp`` group
    of 8 at stride 1 on 8-GPU nodes is one node; a ``dp`` group at stride 8 has one member per node."""
    local = 1 if stride >= domain else max(1, min(group, domain // stride))
    return Spread(local, ceil(group / local))


def group_ranks(group: int, stride: int, world: int) -> list[range]:
    """The ranks of every group of ``group`` members ``stride`` apart in ``world`` ranks (Megatron's
    order): bases ``o * group * stride + j`` for ``j < stride``; groups that would run past the world
    are left out (none is, when ``group x stride`` divides it, as every mesh axis's does)."""
    block = group * stride
    return [range(o * block + j, o * block + j + block - stride + 1, stride)
            for o in range(ceil(world / block)) for j in range(stride)
            if o * block + j + block - stride < world]


@lru_cache(maxsize=4096)
def spread_counts(domain: int, group: int, stride: int, world: int) -> tuple[tuple[Spread, int], ...]:
    """How many groups of one axis (``group`` members ``stride`` ranks apart, in ``world`` ranks
    filling ``domain``-rank domains in order) have each footprint; empty when the world cannot hold
    one whole group."""
    seen: dict[Spread, int] = {}
    for ranks in group_ranks(group, stride, world):
        counts: dict[int, int] = {}
        for r in ranks:
            counts[r // domain] = counts.get(r // domain, 0) + 1
        spread = Spread(min(counts.values()), len(counts))
        seen[spread] = seen.get(spread, 0) + 1
    return tuple(sorted(seen.items()))


def group_spreads(domain: int, group: int, stride: int, world: int) -> tuple[Spread, ...]:
    """The distinct spreads of the groups of one axis (:func:`spread_counts`); the aligned spread
    for a world too small to hold one whole group."""
    if domain <= 0:
        return (aligned_spread(1, group, stride),)
    return tuple(s for s, _ in spread_counts(domain, group, stride, world)) or (aligned_spread(domain, group, stride),)


def pair_spreads(domain: int, stride: int, world: int) -> tuple[Spread, ...]:
    """The distinct spreads of the point-to-point pairs ``(r, r + stride)``, ``r + stride < world``
    (a pipeline's stage-to-stage sends): a pair is inside a domain when ``stride`` is shorter than it
    (ranks 0 and ``stride``), and some pair crosses as soon as the world outgrows one domain (ranks
    ``D - stride`` and ``D``)."""
    if domain <= 0 or world <= stride:
        return (aligned_spread(max(domain, 1), 2, stride),)
    crossing, inside = world > domain, stride < domain
    return tuple(s for s, have in ((Spread(1, 2), crossing), (Spread(2, 1), inside)) if have)
