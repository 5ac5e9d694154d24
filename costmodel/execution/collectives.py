"""Alpha-beta times of collectives on a target's interconnect.

Ring algorithms over ``group_size`` devices: an all-reduce takes 2(n-1) steps, all-gather,
reduce-scatter and all-to-all n-1, a point-to-point transfer one. Time = steps x link latency +
bytes each device sends / link bandwidth (one direction). Groups larger than the scale-up domain
(NVLink island, TPU slice) cross the scale-out network, whose bandwidth then sets the beta term.
On a torus, a ring along one axis uses both directions of each link.
"""

from __future__ import annotations

from ...backends import Target, TpuTarget
from ...ir import Node, Op
from ..cost import Cost
from .common import KernelTime, roofline

__all__ = ["collective_time"]

_STEPS = {Op.ALL_REDUCE: 2, Op.ALL_GATHER: 1, Op.REDUCE_SCATTER: 1, Op.ALL_TO_ALL: 1}


def collective_time(node: Node, cost: Cost, target: Target) -> KernelTime:
    n = max(int(node.attrs.get("group_size", 1)), 1)
    if n <= 1 or cost.comm_bytes == 0:
        return roofline(0.0, 0.0, 0.0, target.launch_overhead, "interconnect")
    steps = _STEPS.get(node.op, 0) * (n - 1) or 1
    alpha = target.link_latency or 0.0
    intra = n <= target.scale_up_domain
    bw = (target.scale_up_bandwidth if intra else target.scale_out_bandwidth) or target.scale_up_bandwidth or 0.0
    if isinstance(target, TpuTarget) and intra and target.torus_dims:
        bw *= 2  # a torus ring sends both ways around the axis
    if bw <= 0:
        return roofline(0.0, 0.0, float("inf"), 0.0, "interconnect", note="no interconnect bandwidth")
    comm_s = steps * alpha + cost.comm_bytes / bw
    return roofline(0.0, 0.0, comm_s, target.launch_overhead, "scale-up link" if intra else "scale-out network",
                    comm_bytes=cost.comm_bytes, link_bandwidth=bw)
