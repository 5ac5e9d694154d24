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
wraparound, so one link's worth per axis and ``k - 1`` hops along an axis of ``k``. Only a group that
spans a whole torus axis has its wraparound link; a group on part of an axis (2 or 8 chips of a
16-ring) runs along a line, as on a mesh. The level's bandwidth is shared by at least the links its
dims wire to each chip (two per axis longer than two), so no collective runs faster than the chip's
total link bandwidth, whatever link count the data gives.

A full-mesh level (MI300X Infinity Fabric, Gaudi RoCE, a GroqNode) has a direct link, or an equal
share of the links, from each device to each of its ``N - 1`` peers: one peer pair gets
``bandwidth / (N - 1)``. A collective over ``n`` members of the domain runs on the ``n - 1`` pairs
among them (RCCL's extra channels for 2 or 4 of 8 MI300X spread its rings over those links; an
all-to-all sends on each directly), ``(n - 1) / (N - 1)`` of the level's rate; the full rate (the
measured all-``N`` bus bandwidth) needs all ``N``.

Which algorithms exist depends on the runtime as well as the wires: NCCL's (ring, tree, NVLS) for
every caller; the peer-load one-shot and two-shot all-reduces (:mod:`.algorithms`) only where the
runtime has them (:attr:`Topology.peer_all_reduce`: serving engines' custom all-reduce, on by default in
vLLM, SGLang and TensorRT-LLM on NVLink) and the chip gives their latency
(``peer_all_reduce_latency``), inside one switch domain or full mesh. A small tensor-parallel
all-reduce (8 KiB at decode) then takes one ~5 us step instead of NCCL's ``2(n-1)`` ring steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING

from ...backends import Target
from ...errors import PlanError
from ...ir import Node, Op
from ..cost import Cost
from .algorithms import (
    AlgoTime,
    bus_factor,
    hierarchical,
    in_network,
    one_shot,
    ring,
    ring_low_latency,
    split_all_to_all,
    torus,
    torus_bandwidth,
    tree,
    two_shot,
)
from .common import KernelTime, roofline
from .placement import Spread, aligned_spread, group_spreads, pair_spreads
from .torus_spans import named_wraps, torus_spans

if TYPE_CHECKING:
    from ...backends import System
    from ...backends.system import Level

__all__ = ["Topology", "NetLevel", "Link", "collective_time", "collective_seconds"]

_POINT_TO_POINT = frozenset({Op.SEND, Op.RECV, Op.COLLECTIVE_PERMUTE})


@dataclass(frozen=True)
class NetLevel:
    """One network level seen from one device."""

    bandwidth: float                      # link peak, per device, one direction
    latency: float                        # alpha per step
    bus_bandwidth: float | None = None    # measured achievable busbw (large messages)
    torus_dims: tuple[int, ...] = ()
    links: int | None = None
    #: False: a mesh (torus_dims without wraparound links); a tuple: per axis of ``torus_dims`` (a TPU
    #: v5e 8x16 slice closes only its 16-long axis)
    wraparound: bool | tuple[bool, ...] = True
    in_network_reduction: bool = False
    reduction_bus_bandwidth: float | None = None
    reduction_latency: float | None = None      # fixed cost of one in-network reduction
    full_mesh: bool = False                     # a direct link (or an equal share) to every peer
    #: one synchronize-and-load step of a peer-load (one-shot/two-shot) all-reduce; None: none known
    peer_latency: float | None = None
    #: NCCL's LL protocol on this level: (fixed cost, cost per ring step, bus bandwidth cap); None: none
    low_latency: tuple[float, float, float] | None = None

    @property
    def effective(self) -> float:
        """What the beta term runs at: the measured bus bandwidth where known, else the peak."""
        return self.bus_bandwidth or self.bandwidth

    @property
    def link_bandwidth(self) -> float:
        """One link of a torus: the level's bandwidth over its links, and over no fewer than the
        dims wire to a chip (two per axis longer than two, one for an axis of two): a spec giving
        fewer links than its torus needs (Trainium2's 4 NeuronLink-v3 against the UltraServer's
        4x4x4 torus, six neighbours) shares the chip's bandwidth over the links the torus uses
        rather than counting it more than once."""
        wired = sum(2 if k > 2 else 1 for k in self.torus_dims if k > 1)
        links = max(self.links or 0, wired) or 2
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
    #: a system with no scale-out level: no device beyond the scale-up domain, so a larger group is
    #: refused (chip fields without a scale-out figure keep timing it on the scale-up level)
    closed: str = ""
    #: the ranks in use (a plan's devices), which fill domains in order: each axis's groups are then
    #: timed where they fall (:mod:`.placement`; the slowest group's time); None: every group taken
    #: to start on a domain boundary (a lone collective, serving's replicas)
    world: int | None = None
    #: the runtime all-reduces inside a domain by peer loads (one-shot/two-shot) where the level gives
    #: their latency: serving engines' custom all-reduce; False: NCCL's algorithms alone (training
    #: frameworks, nccl-tests, a graph's own collectives)
    peer_all_reduce: bool = False

    @classmethod
    def of(cls, target: Target) -> Topology:
        torus_dims = tuple(getattr(target, "torus_dims", ()) or ())
        up = NetLevel(target.scale_up_bandwidth or 0.0, target.link_latency or 0.0,
                      torus_dims=torus_dims, links=target.scale_up_links,
                      full_mesh=target.scale_up_topology == "full-mesh",
                      peer_latency=None if torus_dims else _peer_latency(target),
                      low_latency=None if torus_dims else _low_latency(target))
        out = NetLevel(target.scale_out_bandwidth, target.link_latency or 0.0) if target.scale_out_bandwidth else None
        return cls(target.scale_up_domain, up, out)

    @classmethod
    def of_system(cls, system: System) -> Topology:
        def level(lv: Level | None, up: bool) -> NetLevel | None:
            if lv is None:
                return None
            torus_dims = tuple(lv.dims) if lv.topology in ("torus", "mesh") else ()
            chip = not torus_dims and up
            return NetLevel(lv.bandwidth, lv.latency, lv.bus_bandwidth, torus_dims, lv.links,
                            lv.wraps if torus_dims else True, bool(lv.in_network_reduction), lv.reduction_bus_bandwidth,
                            lv.reduction_latency, full_mesh=lv.topology == "full-mesh",
                            peer_latency=_peer_latency(system.target()) if chip else None,
                            low_latency=_low_latency(system.target()) if chip else None)
        up = level(system.scale_up, True) or NetLevel(0.0, 0.0)
        out = level(system.scale_out, False)
        return cls(system.scale_up_domain, up, out, closed=system.name if out is None else "")

    @property
    def torus(self) -> bool:
        return bool(self.scale_up.torus_dims)

    def spreads(self, group: int, stride: int = 1, op: Op | None = None) -> tuple[Spread, ...]:
        """The distinct footprints on scale-up domains of the groups of ``group`` members ``stride``
        ranks apart (:mod:`.placement`): every group of the axis in :attr:`world` ranks, or pipeline
        sends' pairs ``stride`` apart for a point-to-point ``op``; one group aligned on a domain
        boundary when the world is not known."""
        if self.world is None:
            return (aligned_spread(self.scale_up_domain, group, stride),)
        if op in (Op.SEND, Op.RECV) and group == 2:
            return pair_spreads(self.scale_up_domain, stride, self.world)
        return group_spreads(self.scale_up_domain, group, stride, self.world)

    def members_per_domain(self, group: int, stride: int = 1) -> int:
        """The fewest members any group of ``group`` devices ``stride`` ranks apart has in one
        scale-up domain (ranks fill domains in order): a tensor-parallel group of 8 at stride 1 on
        8-GPU nodes is one node (8); a data-parallel group at stride 8 has one member per node (1);
        ep=64 at stride 1 in 512 ranks on 72-GPU racks has a group with 8 in one rack (8)."""
        return min(s.local for s in self.spreads(group, stride))

    def check(self, group: int, stride: int = 1) -> None:
        """Refuse a group that does not fit a system with no scale-out level (a TPU slice, a
        GroqNode): its devices beyond the slice have no network to be timed on."""
        span = (group - 1) * stride + 1
        if self.closed and span > self.scale_up_domain:
            members = f"{group} devices" if stride == 1 else f"{group} devices {stride} ranks apart ({span} in all)"
            raise PlanError(f"a collective over {members} does not fit {self.closed}, which has "
                            f"{self.scale_up_domain} devices and no scale-out level to reach further: use at most "
                            f"{self.scale_up_domain} devices, or name a larger system")

    def up_bandwidth(self, members: int) -> float:
        """The scale-up rate ``members`` devices of one domain have among themselves: the level's on
        a switch; on a full mesh the ``members - 1`` peer pairs among them, each ``1 / (N - 1)`` of
        the level (a pair on an 8-way MI300X mesh: 336 / 7 = 48 GB/s usable of its 64 GB/s link)."""
        up = self.scale_up
        if not up.full_mesh or self.scale_up_domain <= 2 or members >= self.scale_up_domain:
            return up.effective
        return up.effective * max(members - 1, 1) / (self.scale_up_domain - 1)

    def link(self, group: int, stride: int = 1, op: Op | None = None) -> Link:
        """The level the slowest group of ``group`` devices is limited by (scale-out if any group
        reaches beyond its domain; chip fields without a scale-out figure use their scale-up level,
        no better number being known)."""
        self.check(group, stride)
        spread = min(self.spreads(group, stride, op), key=lambda s: (s.inside, s.local))
        local = spread.local
        if spread.inside or self.scale_out is None:
            up = self.scale_up
            if up.torus_dims:
                axes, wraps = torus_spans(group, up.torus_dims, stride, up.wraparound)
                bw = torus_bandwidth(axes, up.link_bandwidth, wraps)
            else:
                bw = self.up_bandwidth(local)
            return Link(bw, up.latency, spread.inside)
        return Link(self.scale_out.effective, self.scale_out.latency, False)

    def wraps(self, group: int, stride: int = 1, axes: tuple[int, ...] | None = None) -> bool:
        """Whether every torus axis the group spans closes into a ring (a whole axis of a torus
        level); False on a mesh and along part of an axis, where a shift's last buffer walks back."""
        up = self.scale_up
        if not up.torus_dims:
            return True
        if axes is not None:
            return all(named_wraps(axes, up.torus_dims, up.wraparound))
        return all(torus_spans(group, up.torus_dims, stride, up.wraparound)[1])

    def time(self, op: Op, size: float, group: int, stride: int = 1, *,
             axes: tuple[int, ...] | None = None) -> AlgoTime:
        """The fastest algorithm for ``op`` on a ``size``-byte buffer over ``group`` devices whose
        ranks are ``stride`` apart.

        ``axes``: the torus axes the group spans, where the caller's layout names them (a 2D
        weight-stationary ``x`` on one axis and ``yz`` on the others); by default they follow from
        ``group`` and ``stride`` (:func:`torus_spans`: whole axes in order, skipping those the inner
        groups fill). Named axes take the place of ``stride``. With the :attr:`world` known, every
        distinct footprint of the axis's groups is timed and the slowest kept: the collective is
        synchronous per group and the step waits for the slowest."""
        if group <= 1 or size <= 0:
            return AlgoTime("none", 0.0, 0.0, 0.0)
        self.check(group, 1 if axes is not None else stride)
        up = self.scale_up
        if axes is not None and up.torus_dims and group <= self.scale_up_domain:
            if prod(axes) != group:
                raise ValueError(f"torus axes {axes} do not hold a group of {group}")
            return self._on_torus(op, size, axes)
        return max((self._spread_time(op, size, group, stride, s) for s in self.spreads(group, stride, op)),
                   key=lambda t: t.seconds)

    def _spread_time(self, op: Op, size: float, group: int, stride: int, spread: Spread) -> AlgoTime:
        """The fastest algorithm for one group with ``spread.local`` members in the fewest-populated
        of the ``spread.domains`` domains it spans (its narrowest crossing between domains)."""
        up = self.scale_up
        local, nodes = spread.local, spread.domains
        if spread.inside or self.scale_out is None:
            return min(self._within(op, size, group, up, stride), key=lambda t: t.seconds)
        out = self.scale_out
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
        up_bw = self.up_bandwidth(local)
        flat_bw = min(up_bw, (local if rings else 1) * out.effective)
        options = [ring(op, size, group, flat_bw, max(up.latency, out.latency))]
        # NCCL's tree: a chain inside each domain at the scale-up alpha, a binary tree over the domains
        # at the network's (a flat tree over every rank at the network's alpha priced a 16 KiB
        # all-reduce over 2 x 8 GPUs at 24 us, under the 42 us of the 8-GPU ring inside one node)
        tr = tree(op, size, nodes, flat_bw, out.latency, local=local, local_alpha=up.latency)
        options += [tr] if tr is not None else []
        two = hierarchical(op, size, local, nodes, up_bw, up.latency, out.effective, out.latency)
        options += [two] if two is not None else []
        if op is Op.ALL_TO_ALL:
            lanes = split_all_to_all(size, group, local, up_bw, up.latency, out.effective, out.latency)
            options += [lanes] if lanes is not None else []
        return min(options, key=lambda t: t.seconds)

    def _within(self, op: Op, size: float, group: int, up: NetLevel, stride: int = 1) -> list[AlgoTime]:
        if up.torus_dims:
            axes, wraps = torus_spans(group, up.torus_dims, stride, up.wraparound)
            return [torus(op, size, axes, up.link_bandwidth, up.latency, wraps)]
        # NCCL's double binary trees span nodes; inside one switch domain its tree is a chain,
        # no faster than the ring (the 8xH200 sweep runs Ring/LL below 2 MiB, then NVLS)
        # a point-to-point transfer on a full mesh has one pair's link, whatever the group
        members = 2 if op in _POINT_TO_POINT else min(group, self.scale_up_domain)
        options = [ring(op, size, group, self.up_bandwidth(members), up.latency)]
        if up.low_latency is not None and op not in _POINT_TO_POINT:
            ll = ring_low_latency(op, size, group, self.up_bandwidth(members), *up.low_latency)
            options += [ll] if ll is not None else []
        if up.in_network_reduction:
            alpha = up.reduction_latency / 2 if up.reduction_latency is not None else up.latency
            nvls = in_network(op, size, group, up.bandwidth, alpha, up.reduction_bus_bandwidth)
            options += [nvls] if nvls is not None else []
        if self.peer_all_reduce and up.peer_latency is not None and group <= self.scale_up_domain:
            bw = self.up_bandwidth(members)
            options += [t for t in (one_shot(op, size, group, bw, up.peer_latency),
                                    two_shot(op, size, group, bw, up.peer_latency)) if t is not None]
        return options

    def _on_torus(self, op: Op, size: float, axes: tuple[int, ...]) -> AlgoTime:
        """Per-axis rings over the named ``axes`` of the scale-up torus: a whole torus axis with its
        wraparound link, any other length along a line (:func:`named_wraps`)."""
        up = self.scale_up
        return torus(op, size, axes, up.link_bandwidth, up.latency, named_wraps(axes, up.torus_dims, up.wraparound))


def _low_latency(target: Target) -> tuple[float, float, float] | None:
    """The chip's NCCL LL protocol terms in seconds and bytes/s, or None where it gives none."""
    base, step = getattr(target, "ll_base_latency", None), getattr(target, "ll_step_latency", None)
    cap = getattr(target, "ll_max_bus_bandwidth", None)
    return None if base is None or step is None or cap is None else (base, step, cap)


def _peer_latency(target: Target) -> float | None:
    """The chip's peer-load all-reduce step (GPU targets only; None where the catalog gives none)."""
    return getattr(target, "peer_all_reduce_latency", None)


def collective_seconds(op: Op, comm_bytes: float, group_size: int, topology: Topology,
                       stride: int = 1) -> tuple[float, Link]:
    """Seconds of one collective whose ring sends ``comm_bytes`` per device (the cost rules' count),
    on the fastest algorithm, and the link it ran over (inf without bandwidth)."""
    link = topology.link(group_size, stride, op)
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
