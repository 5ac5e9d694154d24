"""Collectives on a topology: the one place that picks the network level and the algorithm.

A :class:`Topology` is what collectives need to know of how devices are wired: a scale-up domain
(NVLink/NVSwitch island, TPU ICI torus) whose devices share a fast level, joined by a scale-out
network. It comes from a chip's target fields (:meth:`Topology.of`) or from a system file with its
measured bus bandwidths and in-network reduction (:meth:`Topology.of_system`). For a collective over
``group`` devices :meth:`Topology.time` times every algorithm that applies (:mod:`.algorithms`: ring,
tree, in-network reduction inside a switch domain, per-axis rings on a torus, hierarchical across
domains) and keeps the fastest, as NCCL's tuner and XLA's collective planner do. The execution models
(collective nodes of a graph) and ``diagnose`` (link utilization) both ask here, so the level choice
and the torus accounting cannot drift apart.

Bandwidths are per device and one direction. A torus level's ``bandwidth`` is the sum over all its
links, so a ring along one axis runs on ``2 x bandwidth / links`` (the axis's two links); a mesh
level (a TPU slice smaller than a full cube: no wraparound links) has the same axes without the
wraparound, so one link's worth per axis and ``k - 1`` hops along an axis of ``k``.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod
from typing import TYPE_CHECKING

from ...backends import Target
from ...ir import Node, Op
from ..cost import Cost
from .algorithms import AlgoTime, bus_factor, hierarchical, in_network, ring, torus, torus_bandwidth, tree
from .common import KernelTime, roofline

if TYPE_CHECKING:
    from ...backends import System
    from ...backends.system import Level

__all__ = ["Topology", "NetLevel", "Link", "collective_time", "collective_seconds"]


@dataclass(frozen=True)
class NetLevel:
    """One network level seen from one device."""

    bandwidth: float                      # link peak, per device, one direction
    latency: float                        # alpha per step
    bus_bandwidth: float | None = None    # measured achievable busbw (large messages)
    torus_dims: tuple[int, ...] = ()
    links: int | None = None
    wraparound: bool = True                # False: a mesh (torus_dims without wraparound links)
    in_network_reduction: bool = False
    reduction_bus_bandwidth: float | None = None
    reduction_latency: float | None = None      # fixed cost of one in-network reduction

    @property
    def effective(self) -> float:
        """What the beta term runs at: the measured bus bandwidth where known, else the peak."""
        return self.bus_bandwidth or self.bandwidth

    @property
    def link_bandwidth(self) -> float:
        """One link of a torus (the level's bandwidth over its links, two per axis by default)."""
        links = self.links or 2 * max(len(self.torus_dims), 1)
        return self.effective / links


@dataclass(frozen=True)
class Link:
    """The level a collective runs over and the bandwidth its transfer term used."""

    bandwidth: float
    latency: float
    intra: bool

    @property
    def name(self) -> str:
        return "scale-up link" if self.intra else "scale-out network"


@dataclass(frozen=True)
class Topology:
    """A scale-up domain of ``scale_up_domain`` devices on ``scale_up``, domains on ``scale_out``."""

    scale_up_domain: int
    scale_up: NetLevel
    scale_out: NetLevel | None = None

    @classmethod
    def of(cls, target: Target) -> Topology:
        up = NetLevel(target.scale_up_bandwidth or 0.0, target.link_latency or 0.0,
                      torus_dims=tuple(getattr(target, "torus_dims", ()) or ()), links=target.scale_up_links)
        out = NetLevel(target.scale_out_bandwidth, target.link_latency or 0.0) if target.scale_out_bandwidth else None
        return cls(target.scale_up_domain, up, out)

    @classmethod
    def of_system(cls, system: System) -> Topology:
        def level(lv: Level | None) -> NetLevel | None:
            if lv is None:
                return None
            torus_dims = tuple(lv.dims) if lv.topology in ("torus", "mesh") else ()
            return NetLevel(lv.bandwidth, lv.latency, lv.bus_bandwidth, torus_dims, lv.links,
                            lv.topology != "mesh", bool(lv.in_network_reduction), lv.reduction_bus_bandwidth,
                            lv.reduction_latency)
        up = level(system.scale_up) or NetLevel(0.0, 0.0)
        return cls(system.scale_up_domain, up, level(system.scale_out))

    @property
    def torus(self) -> bool:
        return bool(self.scale_up.torus_dims)

    def members_per_domain(self, group: int, stride: int = 1) -> int:
        """How many members of a group whose members are ``stride`` ranks apart share one scale-up
        domain (ranks fill domains in order): a tensor-parallel group of 8 at stride 1 on 8-GPU
        nodes is one node; a data-parallel group at stride 8 has one member per node."""
        if stride >= self.scale_up_domain:
            return 1
        return max(1, min(group, self.scale_up_domain // stride))

    def link(self, group: int, stride: int = 1) -> Link:
        """The level a group of ``group`` devices is limited by (scale-out beyond the domain; a
        topology without a scale-out figure uses its scale-up level, no better number being known)."""
        local = self.members_per_domain(group, stride)
        if local >= group or self.scale_out is None:
            up = self.scale_up
            axes = _torus_axes(group, up.torus_dims, stride)
            bw = torus_bandwidth(axes, up.link_bandwidth, up.wraparound) if up.torus_dims else up.effective
            return Link(bw, up.latency, local >= group)
        return Link(self.scale_out.effective, self.scale_out.latency, False)

    def time(self, op: Op, size: float, group: int, stride: int = 1, *,
             axes: tuple[int, ...] | None = None) -> AlgoTime:
        """The fastest algorithm for ``op`` on a ``size``-byte buffer over ``group`` devices whose
        ranks are ``stride`` apart.

        ``axes``: the torus axes the group spans, where the caller's layout names them (a 2D
        weight-stationary ``x`` on one axis and ``yz`` on the others); by default they follow from
        ``group`` and ``stride`` (:func:`_torus_axes`: whole axes in order, skipping those the inner
        groups fill). Named axes take the place of ``stride``."""
        if group <= 1 or size <= 0:
            return AlgoTime("none", 0.0, 0.0, 0.0)
        up = self.scale_up
        if axes is not None and up.torus_dims and group <= self.scale_up_domain:
            if prod(axes) != group:
                raise ValueError(f"torus axes {axes} do not hold a group of {group}")
            return self._on_torus(op, size, axes)
        local = self.members_per_domain(group, stride)
        if local >= group or self.scale_out is None:
            return min(self._within(op, size, group, up, stride), key=lambda t: t.seconds)
        out = self.scale_out
        nodes = ceil(group / local)
        if local == 1:                 # one member per domain: the network alone
            options = [ring(op, size, group, out.effective, out.latency)]
            tr = tree(op, size, group, out.effective, out.latency)
            return min(options + ([tr] if tr is not None else []), key=lambda t: t.seconds)
        # NCCL runs one ring per channel, each crossing between domains through a different NIC: a
        # domain's `local` members send at most `local` NICs' worth across it, and each member sends
        # on all the rings, so a member's ring rate is capped by its scale-up link and by the domain's
        # NICs together (8 x 50 GB/s on a DGX H100: ~400 GB/s bus bandwidth across nodes, as
        # nccl-tests shows), not by one NIC. An all-to-all is no ring: each member's off-domain share
        # leaves through its own NIC
        rings = op in (Op.ALL_REDUCE, Op.ALL_GATHER, Op.REDUCE_SCATTER, Op.BROADCAST)
        flat_bw = min(up.effective, (local if rings else 1) * out.effective)
        options = [ring(op, size, group, flat_bw, max(up.latency, out.latency))]
        tr = tree(op, size, group, flat_bw, max(up.latency, out.latency))
        options += [tr] if tr is not None else []
        two = hierarchical(op, size, local, nodes, up.effective, up.latency, out.effective, out.latency)
        options += [two] if two is not None else []
        return min(options, key=lambda t: t.seconds)

    def _within(self, op: Op, size: float, group: int, up: NetLevel, stride: int = 1) -> list[AlgoTime]:
        if up.torus_dims:
            return [self._on_torus(op, size, _torus_axes(group, up.torus_dims, stride))]
        # NCCL's double binary trees span nodes; inside one switch domain its tree is a chain,
        # no faster than the ring (the 8xH200 sweep runs Ring/LL below 2 MiB, then NVLS)
        options = [ring(op, size, group, up.effective, up.latency)]
        if up.in_network_reduction:
            alpha = up.reduction_latency / 2 if up.reduction_latency is not None else up.latency
            nvls = in_network(op, size, group, up.bandwidth, alpha, up.reduction_bus_bandwidth)
            options += [nvls] if nvls is not None else []
        return options

    def _on_torus(self, op: Op, size: float, axes: tuple[int, ...]) -> AlgoTime:
        """Per-axis rings over ``axes`` of the scale-up torus, with or without wraparound links:
        the one torus path both the default axes (from group and stride) and named axes take."""
        up = self.scale_up
        return torus(op, size, axes, up.link_bandwidth, up.latency, up.wraparound)


def _torus_axes(group: int, dims: tuple[int, ...], stride: int = 1) -> tuple[int, ...]:
    """The axes a group of ``group`` devices spans, filling whole axes first (how slices are laid
    out on the torus): 16 devices on 16x16 use one axis, 64 on 4x4x4 all three; a remainder runs
    as a ring along part of the next axis. Members ``stride`` ranks apart skip the axes the inner
    groups fill (a data-parallel group at stride 16 on 16x16 runs along the second axis)."""
    rest: list[int] = []
    for k in dims:
        if stride >= k and stride % k == 0:
            stride //= k
        elif stride > 1:
            rest.append(max(1, k // stride))
            stride = 1
        else:
            rest.append(k)
    axes: list[int] = []
    for k in rest or [group]:
        have = prod(axes) if axes else 1
        if have >= group:
            break
        axes.append(min(k, ceil(group / have)))
    return tuple(axes) or (group,)


def collective_seconds(op: Op, comm_bytes: float, group_size: int, topology: Topology,
                       stride: int = 1) -> tuple[float, Link]:
    """Seconds of one collective whose ring sends ``comm_bytes`` per device (the cost rules' count),
    on the fastest algorithm, and the link it ran over (inf without bandwidth)."""
    link = topology.link(group_size, stride)
    if link.bandwidth <= 0:
        return float("inf"), link
    factor = bus_factor(op, group_size) or 1.0
    return topology.time(op, comm_bytes / factor, group_size, stride).seconds, link


def collective_time(node: Node, cost: Cost, target: Target, topology: Topology | None = None) -> KernelTime:
    """A collective node's time: over ``topology`` (a system's, with its measured bus bandwidths)
    or the chip's own fields, for a group of ``group_size`` ranks ``stride`` apart."""
    n = max(int(node.attrs.get("group_size", 1)), 1)
    if n <= 1 or cost.comm_bytes == 0:
        return roofline(0.0, 0.0, 0.0, target.launch_overhead, "interconnect")
    stride = max(int(node.attrs.get("stride", 1)), 1)
    seconds, link = collective_seconds(node.op, cost.comm_bytes, n, topology or Topology.of(target), stride)
    if link.bandwidth <= 0:
        return roofline(0.0, 0.0, seconds, 0.0, "interconnect", note="no interconnect bandwidth")
    return roofline(0.0, 0.0, seconds, target.launch_overhead, link.name, comm_bytes=cost.comm_bytes,
                    link_bandwidth=link.bandwidth)
