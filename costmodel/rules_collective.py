"""The cost rule of the collectives: bytes each device sends under bandwidth-optimal algorithms
(kept beside :mod:`.rules`, in the same registry, so that module stays one screenful of formulas
per op family)."""

from __future__ import annotations

from ..ir import Op
from .cost import Cost
from .opview import OpView

__all__ = ["COLLECTIVE_RULES"]


def collective(v: OpView) -> Cost:
    """Bytes one device sends with bandwidth-optimal (ring) algorithms over ``group_size`` devices.

    all-reduce 2(n-1)/n x size, all-gather (n-1)/n x output, reduce-scatter (n-1)/n x input,
    all-to-all (n-1)/n x the larger of what a device sends and receives (an expert-parallel
    exchange under a skewed router receives more than it sends), broadcast/send/permute the size,
    recv nothing (its sender pays).
    Reductions add (n-1)/n x elements FLOPs.
    """
    n = max(int(v.attrs.get("group_size", 1)), 1)
    op = v.node.op
    size_in = v.in_bytes(0) if v.has_input(0) else 0
    flops = 0
    if op is Op.ALL_REDUCE:
        comm = 2 * (n - 1) * size_in // n
        flops = (n - 1) * v.numel(0) // n
    elif op is Op.ALL_GATHER:
        comm = (n - 1) * v.out_bytes() // n
    elif op is Op.REDUCE_SCATTER:
        comm = (n - 1) * size_in // n
        flops = (n - 1) * v.numel(0) // n
    elif op is Op.ALL_TO_ALL:
        comm = (n - 1) * max(size_in, v.out_bytes()) // n
    elif op is Op.RECV:
        comm = 0
    else:
        comm = size_in
    return Cost(flops, 0, v.all_in_bytes(), v.all_out_bytes(), comm)


COLLECTIVE_RULES = {op: collective for op in (Op.ALL_REDUCE, Op.ALL_GATHER, Op.REDUCE_SCATTER, Op.ALL_TO_ALL,
                                              Op.BROADCAST, Op.SEND, Op.RECV, Op.COLLECTIVE_PERMUTE)}
