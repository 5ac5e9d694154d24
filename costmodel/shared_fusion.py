"""Fusion of a value that several nodes of one kernel read: the diamonds of norms, RoPE and GELU.

Why: the producer-to-one-consumer rule of :func:`~.kernels.fuse` leaves a value with two readers in a
kernel of its own, written to memory and read back, even when both readers end up in the same kernel.
Exported graphs are full of such diamonds: Hugging Face's RMSNorm casts ``x`` to fp32 and feeds the
copy to ``pow`` and to the later ``mul``; LayerNorm written out feeds ``x`` to ``mean`` and ``sub``;
RoPE's ``q`` feeds ``q * cos`` and ``rotate_half``'s slices, and the branches rejoin at the add;
GPT-2's tanh GELU reads its input three times. Fusing compilers run each as one kernel: Inductor
inlines a pointwise producer into each of its few users and schedules the whole region (a norm, a
RoPE) as one kernel; XLA's loop and multi-output fusion do the same (duplicating a cheap producer
into the consumer fusion). So a producer joins its readers' kernel when every reader of the value
is in that one kernel and each could have fused with it as its only reader: the value is then
produced and consumed inside the kernel, read from memory never and written never.

Each node stays in exactly one kernel (a union, no duplication), at most one heavy op per kernel as
before, and the merged kernel must still come after every kernel it reads from in program order
(kernels are listed by their first node), which also rules out a cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..ir import VIEW_OPS, Node, Op, OpGroup, Value

if TYPE_CHECKING:
    from .kernels import _Groups

__all__ = ["join_shared_producers"]

_PHASE = "phase"   # a training step's phase attr (costmodel.training.phases.PHASE)


def join_shared_producers(nodes: list[Node], index: dict[Node, int], base: dict[Value, Value],
                          consumers: dict[Value, list[Node]], groups: _Groups, outputs: set[Value],
                          can_join: Callable[[Node, Node], bool]) -> None:
    """Join each value's producer to the one kernel all its readers are in, when ``can_join`` allows
    the producer with each reader (the single-reader rule of the fusion mode) and the merge keeps one
    heavy op at most and the program order. Later producers first, so a diamond nested inside another
    closes before the outer one is looked at; repeated until nothing joins. A value with one reader
    gets the same exact order test here, which the first pass's quicker test (the reader's other
    inputs come before the producer) refused where the branches rejoin: RoPE's ``q * cos``."""
    changed = True
    while changed:
        changed = False
        for j in range(len(nodes) - 1, -1, -1):
            p = nodes[j]
            if p.op in VIEW_OPS or p.group is OpGroup.COLLECTIVE or p.op is Op.UNKNOWN:
                continue
            for v in p.outputs:
                readers = consumers.get(v, ())
                if v in outputs or not readers or base.get(v, v) is not v:
                    continue
                if _join(j, p, readers, nodes, index, groups, base, can_join):
                    changed = True


def _join(j: int, p: Node, readers: list[Node] | tuple[Node, ...], nodes: list[Node], index: dict[Node, int],
          groups: _Groups, base: dict[Value, Value], can_join: Callable[[Node, Node], bool]) -> bool:
    if any(r not in index for r in readers):
        return False
    roots = {groups.find(index[r]) for r in readers}
    gp = groups.find(j)
    if len(roots) != 1:
        return False
    gc = roots.pop()
    if gc == gp or groups.heavy[gp] + groups.heavy[gc] > 1:
        return False
    if any(r.attrs.get(_PHASE) != p.attrs.get(_PHASE) or not can_join(p, r) for r in readers):
        return False
    if not _keeps_order(gp, gc, nodes, groups, index, base):
        return False
    groups.union(gp, gc)
    return True


def _keeps_order(ga: int, gb: int, nodes: list[Node], groups: _Groups, index: dict[Node, int],
                 base: dict[Value, Value]) -> bool:
    """Whether every kernel the merged group reads from starts before it: kernels are listed in the
    order of their first node, and with every edge going forward no cycle can form."""
    start = min(groups.first[ga], groups.first[gb])
    inside = {ga, gb}
    for i in groups.members[ga] + groups.members[gb]:
        for v in nodes[i].inputs:
            if v is None:
                continue
            q = base.get(v, v).producer
            if q is None or q not in index:
                continue
            gq = groups.find(index[q])
            if gq not in inside and groups.first[gq] > start:
                return False
    return True
