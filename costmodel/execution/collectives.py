"""Alpha-beta times of collectives on a target's topology: the one place that picks the link.

Ring algorithms over ``group_size`` devices: an all-reduce takes 2(n-1) steps, all-gather,
reduce-scatter and all-to-all n-1, a point-to-point transfer one. Time = steps x link latency +
bytes each device sends / link bandwidth (one direction). Groups larger than the scale-up domain
(NVLink island, TPU slice) cross the scale-out network, whose bandwidth then sets the beta term.
On a torus, a ring along one axis uses both directions of each link. Every caller that needs a
collective's link (the execution models, diagnose) asks :meth:`Topology.link`, so the scale-up vs
scale-out choice and the torus factor cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...backends import Target
from ...ir import Node, Op
from ..cost import Cost
from .common import KernelTime, roofline

__all__ = ["Topology", "Link", "collective_time", "collective_seconds"]

_STEPS = {Op.ALL_REDUCE: 2, Op.ALL_GATHER: 1, Op.REDUCE_SCATTER: 1, Op.ALL_TO_ALL: 1}


@dataclass(frozen=True)
class Link:
    """The link a collective's ring runs over: per-device one-direction bandwidth (torus factor
    applied), latency per step, and whether it stays inside the scale-up domain."""

    bandwidth: float
    latency: float
    intra: bool

    @property
    def name(self) -> str:
        return "scale-up link" if self.intra else "scale-out network"


@dataclass(frozen=True)
class Topology:
    """How a target's devices are wired, as far as collectives care: a scale-up domain (a torus
    when ``torus``) joined by a scale-out network. The seam where a System's levels plug in."""

    scale_up_domain: int
    scale_up_bandwidth: float
    scale_out_bandwidth: float
    latency: float
    torus: bool

    @classmethod
    def of(cls, target: Target) -> Topology:
        return cls(target.scale_up_domain, target.scale_up_bandwidth or 0.0, target.scale_out_bandwidth or 0.0,
                   target.link_latency or 0.0, bool(getattr(target, "torus_dims", ())))

    def link(self, group_size: int) -> Link:
        """The link a ring over ``group_size`` devices is limited by. A target without a scale-out
        figure uses its scale-up bandwidth for large groups too (no better number is known)."""
        intra = group_size <= self.scale_up_domain
        bw = (self.scale_up_bandwidth if intra else self.scale_out_bandwidth) or self.scale_up_bandwidth
        if self.torus and intra:
            bw *= 2  # a torus ring sends both ways around the axis
        return Link(bw, self.latency, intra)


def collective_seconds(op: Op, comm_bytes: float, group_size: int, topology: Topology) -> tuple[float, Link]:
    """Alpha-beta seconds of one collective (inf without bandwidth) and the link it ran over."""
    link = topology.link(group_size)
    if link.bandwidth <= 0:
        return float("inf"), link
    steps = _STEPS.get(op, 0) * (group_size - 1) or 1
    return steps * link.latency + comm_bytes / link.bandwidth, link


def collective_time(node: Node, cost: Cost, target: Target) -> KernelTime:
    n = max(int(node.attrs.get("group_size", 1)), 1)
    if n <= 1 or cost.comm_bytes == 0:
        return roofline(0.0, 0.0, 0.0, target.launch_overhead, "interconnect")
    seconds, link = collective_seconds(node.op, cost.comm_bytes, n, Topology.of(target))
    if link.bandwidth <= 0:
        return roofline(0.0, 0.0, seconds, 0.0, "interconnect", note="no interconnect bandwidth")
    return roofline(0.0, 0.0, seconds, target.launch_overhead, link.name, comm_bytes=cost.comm_bytes,
                    link_bandwidth=link.bandwidth)
