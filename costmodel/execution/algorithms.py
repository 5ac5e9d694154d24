"""Collective algorithms as alpha-beta models: time = steps x alpha + bytes on the wire / bandwidth.

Each function times one algorithm for a buffer of ``size`` bytes (the full tensor each device holds
before an all-reduce, gathers after an all-gather, or scatters before a reduce-scatter) over ``n``
devices, with ``bw`` the per-device one-direction bandwidth the beta term runs at and ``alpha`` the
latency of one step. The byte factors are NCCL's bus-bandwidth factors (nccl-tests PERFORMANCE.md):
an all-reduce moves 2(n-1)/n of the buffer through every device, an all-gather or reduce-scatter
(n-1)/n, so a measured ``busbw`` plugs straight into ``bw``.

* ring: 2(n-1) steps for an all-reduce, n-1 for the others; bandwidth-optimal.
* ring on NCCL's low-latency protocol (LL): the same ring, but each 8-byte store carries 4 data bytes
  and a 4-byte flag, so a receiver polls its own memory for the flag instead of waiting on a memory
  fence and a separate signal: a step costs well under a microsecond on NVLink (NCCL's tuning model:
  0.6 us against the Simple protocol's 3.4) at half the link's rate, capped per architecture, plus a
  fixed cost per collective. NCCL picks it for small buffers (its tuner takes the fastest of the
  protocols by the same latency + size / bandwidth sum), so a small all-reduce over 8 GPUs takes
  ~15 us, not 14 Simple steps.
* tree (NCCL's tree all-reduce): hierarchical. Inside each scale-up domain the ``local`` ranks form
  a chain, across domains a double binary tree over the domains; a reduce up and a broadcast down,
  so 2 ((local - 1) intra-domain steps + ceil(log2 nodes) network steps), the whole buffer up and
  down each tree half: latency-optimal across many domains, never better than the ring inside one.
* in-network reduction (NVLS, SHARP): the switch reduces, so each device sends its buffer once and
  receives the result once, concurrently: size / bw, two steps.
* torus: a bidirectional ring per mesh axis the group spans, all spanned axes busy at once (the
  buffer split into one part per axis, each part visiting the axes in a rotated order), so the
  transfer runs on both links of every spanned axis. With wraparound links each shard travels both
  ways at once and reaches the farthest chip of an axis of ``k`` in ``k // 2`` hops; a mesh (a slice
  smaller than a full cube has no wraparound, SB-TPU "How to Think About TPUs") needs ``k - 1`` hops
  and its busiest link carries the whole ``(k-1)/k`` of the buffer one way, so the transfer runs at
  one link per axis, half a torus's rate (SB-TPU: "typically doubles the time of most
  communication"). Wraparound is per axis: a group spanning only part of a torus axis (2 or 8 of a
  16-ring) has no link closing its ring and runs along a line, like a mesh axis.
* collective-permute on a torus axis: every device sends one buffer to its neighbour along the axis
  (XLA's ``collective-permute``, the step of a looped collective matmul): one hop on one link; along
  a line without wraparound the shift's last buffer walks back over the ``k - 1`` links.
* one-shot and two-shot (peer loads inside a switch domain or full mesh; the custom all-reduces of
  serving runtimes: vLLM's ``custom_all_reduce`` 1-stage/2-stage, TensorRT-LLM's ONESHOT/TWOSHOT,
  SGLang's port of them, PyTorch symmetric memory): every rank maps its peers' buffers and reads them
  directly, so the steps do not grow with ``n``. One-shot: after one synchronization each rank loads
  the ``n - 1`` peers' whole buffers at once and sums them, ``(n - 1) x size`` through its links in one
  step (more bytes than a ring, the fewest steps: small buffers). Two-shot: each rank reduces its
  ``1/n`` slice from the peers, then every rank gathers the slices, the ring's ``2(n-1)/n x size`` in
  two steps. Their step is the runtime's synchronize-and-load latency, not NCCL's per-hop one.
* hierarchical: reduce-scatter inside each scale-up domain, the inter-domain collective on the
  1/local shard over the scale-out network, all-gather inside again (NCCL's and XLA's two-level
  all-reduce).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, log2, prod

from ...ir import Op

__all__ = ["AlgoTime", "ring", "ring_low_latency", "tree", "in_network", "one_shot", "two_shot", "torus",
           "torus_bandwidth", "axis_hops", "hierarchical", "bus_factor", "permute", "split_all_to_all"]


@dataclass(frozen=True)
class AlgoTime:
    """One algorithm's time for one collective, split into its alpha and beta terms."""

    algorithm: str
    seconds: float
    latency_s: float
    transfer_s: float


def bus_factor(op: Op, n: int) -> float:
    """Bytes through each device per byte of buffer: 2(n-1)/n for an all-reduce, (n-1)/n for an
    all-gather, reduce-scatter or all-to-all, 1 for a point-to-point transfer or broadcast."""
    if n <= 1:
        return 0.0
    if op is Op.ALL_REDUCE:
        return 2 * (n - 1) / n
    if op in (Op.ALL_GATHER, Op.REDUCE_SCATTER, Op.ALL_TO_ALL):
        return (n - 1) / n
    return 1.0


def _steps(op: Op, n: int) -> int:
    if op is Op.ALL_REDUCE:
        return 2 * (n - 1)
    if op in (Op.ALL_GATHER, Op.REDUCE_SCATTER, Op.ALL_TO_ALL):
        return n - 1
    return 1


def _time(name: str, steps: float, alpha: float, nbytes: float, bw: float) -> AlgoTime:
    lat = steps * alpha
    beta = nbytes / bw if bw > 0 else float("inf")
    return AlgoTime(name, lat + beta, lat, beta)


def ring(op: Op, size: float, n: int, bw: float, alpha: float) -> AlgoTime:
    """Ring: every device sends bus_factor x size in ``_steps`` steps."""
    if n <= 1:
        return AlgoTime("ring", 0.0, 0.0, 0.0)
    return _time("ring", _steps(op, n), alpha, bus_factor(op, n) * size, bw)


def ring_low_latency(op: Op, size: float, n: int, bw: float, base: float, step: float,
                     max_bus_bandwidth: float) -> AlgoTime | None:
    """The ring on NCCL's LL protocol: ``base + steps x step`` of latency, the ring's bytes at half of
    ``bw`` capped at ``max_bus_bandwidth`` (NCCL-TUNE, src/graph/tuning.cc: ring LL latency =
    baseLat[ring][LL] + nsteps x hwLat[link][ring][LL], bus bandwidth = min(llMaxBw, busBw x 0.5)).
    Only the ring collectives (all-reduce, all-gather, reduce-scatter) have it here."""
    if n <= 1 or op not in (Op.ALL_REDUCE, Op.ALL_GATHER, Op.REDUCE_SCATTER):
        return None
    out = _time("ring (LL)", _steps(op, n), step, bus_factor(op, n) * size, min(0.5 * bw, max_bus_bandwidth))
    return AlgoTime(out.algorithm, out.seconds + base, out.latency_s + base, out.transfer_s)


def tree(op: Op, size: float, nodes: int, bw: float, alpha: float, local: int = 1,
         local_alpha: float = 0.0) -> AlgoTime | None:
    """NCCL's tree all-reduce over ``nodes`` domains of ``local`` ranks each: a reduce up and a
    broadcast down. NCCL does not build one flat tree over every rank: inside a domain the ranks
    form a chain (src/graph/connect.cc: tree.up/down are the previous/next rank of the intra-node
    order) and only the domains' heads join the double binary tree (src/graph/trees.cc), so the
    latency is ``2 ((local - 1) local_alpha + ceil(log2 nodes) alpha)``, NCCL's own tuning formula
    (NCCL-TUNE: src/graph/tuning.cc, ncclTopoTuneModel: ``2 * ((nRanks/nNodes-1) * intraLat +
    log2i(nNodes) * interLat)``; ceil, not its floor, being the depth its btree builds: 3 domains
    need 2 levels). A flat tree over all 16 ranks of two nodes priced 2 x 4 steps, fewer than the
    2 x 7 of the chain inside one node, so 16 GPUs came out faster than the 8-GPU ring. With the two
    complementary trees each device forwards the whole buffer once going up and once coming down
    (2 x size, against the ring's 2(n-1)/n x size): worse on bandwidth, better on latency across
    many domains. Only all-reduce has a tree algorithm; ``local`` 1 is a tree over single devices
    (one member per domain)."""
    if op is not Op.ALL_REDUCE or local * nodes <= 2:
        return None
    lat = 2 * ((local - 1) * local_alpha + ceil(log2(nodes)) * alpha)
    beta = 2 * size / bw if bw > 0 else float("inf")
    return AlgoTime("tree", lat + beta, lat, beta)


def in_network(op: Op, size: float, n: int, bw: float, alpha: float,
               measured_busbw: float | None = None) -> AlgoTime | None:
    """Switch-side reduction (NVLS / SHARP): the buffer goes up once and the sum comes down once,
    in both directions at the same time, so an all-reduce moves ``size`` at the link's ``bw`` in two
    steps. A measured NVLS bus bandwidth is NCCL's ``busbw`` (2(n-1)/n x size / time), so with one
    the transfer term is the bus volume over it instead."""
    if op is not Op.ALL_REDUCE or n <= 1:
        return None
    if measured_busbw:
        return _time("in-network", 2, alpha, bus_factor(op, n) * size, measured_busbw)
    return _time("in-network", 2, alpha, size, bw)


def one_shot(op: Op, size: float, n: int, bw: float, alpha: float) -> AlgoTime | None:
    """Peer-load one-shot all-reduce: one synchronization (``alpha``), then each rank reads the
    ``n - 1`` peers' whole buffers over its links at once (``(n - 1) x size`` at ``bw``) and sums
    them locally, so every rank ends with the sum and nothing is sent back."""
    if op is not Op.ALL_REDUCE or n <= 1:
        return None
    return _time("one-shot", 1, alpha, (n - 1) * size, bw)


def two_shot(op: Op, size: float, n: int, bw: float, alpha: float) -> AlgoTime | None:
    """Peer-load two-shot all-reduce: a reduce-scatter (each rank reads its ``1/n`` slice from the
    ``n - 1`` peers) and an all-gather (each writes its summed slice to them), each one
    synchronization: the ring's ``2(n-1)/n x size`` in two steps instead of ``2(n-1)``."""
    if op is not Op.ALL_REDUCE or n <= 1:
        return None
    return _time("two-shot", 2, alpha, bus_factor(op, n) * size, bw)


Wrap = bool | tuple[bool, ...]


def _wraps(axes: tuple[int, ...], wrap: Wrap) -> tuple[bool, ...]:
    """One wraparound flag per axis: a single flag applies to every axis."""
    if isinstance(wrap, bool):
        return (wrap,) * len(axes)
    if len(wrap) != len(axes):
        raise ValueError(f"{len(wrap)} wraparound flags for {len(axes)} axes")
    return tuple(wrap)


def torus_bandwidth(axes: tuple[int, ...], link_bw: float, wrap: Wrap = True) -> float:
    """Per-device bandwidth of rings over ``axes`` all busy at once: both links (directions) of
    every axis longer than one device that has wraparound; along an axis without it (a mesh, or a
    part of a torus axis) one link's worth, the busiest link of a line carrying the whole share one
    way. ``wrap``: one flag for every axis or one per axis."""
    wraps = _wraps(axes, wrap)
    links = sum(2 if w else 1 for k, w in zip(axes, wraps) if k > 1)
    return link_bw * max(links, 1)


def axis_hops(k: int, wrap: bool = True) -> int:
    """Hops for a shard to reach every chip of an axis of ``k``: ``k // 2`` on a ring with
    wraparound (each shard sent both ways at once; SB-TPU sharding.md: a bidirectional AllGather
    takes |X|/2 hops, 2 on a TPU v4 axis of 4), ``k - 1`` along a line without it."""
    return k // 2 if wrap else k - 1


def torus(op: Op, size: float, axes: tuple[int, ...], link_bw: float, alpha: float,
          wrap: Wrap = True) -> AlgoTime:
    """Bidirectional rings along every axis the group spans, all axes busy at once: the buffer is
    cut into one part per axis and each part visits the axes in a rotated order (a reduce-scatter
    leaves 1/k of a part for the next axis, an all-gather grows it back), so every link of the
    spanned axes carries traffic the whole time. The transfer term is the bus volume over the
    spanned axes' links (:func:`torus_bandwidth`); the latency term walks the axes one after the
    other, :func:`axis_hops` each (twice for an all-reduce: a reduce-scatter and an all-gather).
    ``wrap`` False is a mesh: no wraparound links; a tuple gives each axis its own (a whole torus
    axis wraps, a part of one does not). At the links' peak on a whole pod this is the pod's published
    all-reduce bandwidth per chip (TPU v4: 6 links x 45 GB/s = 270 GB/s, 1.1 PB/s over 4,096 chips;
    v5e: 200 GB/s, 51.2 TB/s over 256); a system file's measured bus bandwidth runs below it."""
    all_wraps = _wraps(axes, wrap)
    kept = [(k, w) for k, w in zip(axes, all_wraps) if k > 1]
    axes, wraps = tuple(k for k, _ in kept), tuple(w for _, w in kept)
    n = prod(axes) if axes else 1
    name = "torus" if any(wraps or all_wraps) else "mesh"
    if n <= 1:
        return AlgoTime(name, 0.0, 0.0, 0.0)
    if op is Op.ALL_TO_ALL:
        return _torus_all_to_all(size, axes, link_bw, alpha, wraps)
    if op is Op.COLLECTIVE_PERMUTE and len(axes) == 1:
        return permute(size, axes[0], link_bw, alpha, wraps[0])
    if op not in (Op.ALL_REDUCE, Op.ALL_GATHER, Op.REDUCE_SCATTER):
        return ring(op, size, n, torus_bandwidth(axes, link_bw, wraps), alpha)
    phases = 2 if op is Op.ALL_REDUCE else 1
    steps = phases * sum(axis_hops(k, w) for k, w in zip(axes, wraps))
    return _time(name, steps, alpha, bus_factor(op, n) * size, torus_bandwidth(axes, link_bw, wraps))


def permute(size: float, k: int, link_bw: float, alpha: float, wrap: bool = True) -> AlgoTime:
    """A shift by one along an axis of ``k``: each device sends its ``size`` bytes to the next one
    (one direction; on a torus a pair of shifts the two ways runs on the two links at once, each in
    this time; on a line both of the pair's buffers cross every link direction: twice the bytes).
    With wraparound that is one hop on one link; on a line the last device's buffer travels back
    over all ``k - 1`` links (each carrying that one buffer against the shift's direction)."""
    hops = 1 if wrap or k <= 2 else k - 1
    return _time("torus" if wrap else "mesh", hops, alpha, size, link_bw)


def _torus_all_to_all(size: float, axes: tuple[int, ...], link_bw: float, alpha: float,
                      wrap: Wrap = True) -> AlgoTime:
    """Dimension-ordered all-to-all: one exchange per axis, in turn, each :func:`axis_hops` long (6
    on a 4x4x4 cube with wraparound, not the 63 steps of one ring over every device). Each device's
    buffer keeps its size; along an axis of ``k`` a device sends (k-1)/k of it, and the k/2
    devices on each side of the axis's bisection send it k/2 x k/2 x 1/k = k/4 buffers each way:
    the transfer is the larger of the two over the links the axis has per direction (two cuts of a
    ring, one of a line)."""
    wraps = _wraps(axes, wrap)
    steps = sum(axis_hops(k, w) for k, w in zip(axes, wraps))
    beta = sum(max((k - 1) / k, k / 4) * size / (2 * link_bw if w else link_bw) for k, w in zip(axes, wraps))
    name = "torus" if any(wraps) else "mesh"
    return AlgoTime(name, steps * alpha + beta, steps * alpha, beta)


def hierarchical(op: Op, size: float, local: int, nodes: int, local_bw: float, local_alpha: float,
                 net_bw: float, net_alpha: float) -> AlgoTime | None:
    """Two levels: inside the domain, then across domains on the shard each device owns."""
    if local <= 1 or nodes <= 1 or op not in (Op.ALL_REDUCE, Op.ALL_GATHER, Op.REDUCE_SCATTER):
        return None
    phases = 2 if op is Op.ALL_REDUCE else 1
    inner = ring(Op.REDUCE_SCATTER, size, local, local_bw, local_alpha)
    outer_ring = ring(op, size / local, nodes, net_bw, net_alpha)
    outer_tree = tree(op, size / local, nodes, net_bw, net_alpha)
    outer = min((t for t in (outer_ring, outer_tree) if t is not None), key=lambda t: t.seconds)
    lat = phases * inner.latency_s + outer.latency_s
    beta = phases * inner.transfer_s + outer.transfer_s
    return AlgoTime(f"hierarchical ({outer.algorithm} across domains)", lat + beta, lat, beta)


def split_all_to_all(size: float, group: int, local: int, local_bw: float, local_alpha: float,
                     net_bw: float, net_alpha: float) -> AlgoTime | None:
    """An all-to-all over domains, each peer's share on its own transport: NCCL runs it as grouped
    ``ncclSend``/``ncclRecv`` to every peer (nccl-tests src/alltoall.cu), so the ``local - 1`` peers
    in the member's domain get their ``size / group`` over the scale-up link (P2P transport) while
    the ``group - local`` others get theirs through the member's NIC, at the same time: the slower
    lane's bytes set the transfer. Pricing all ``(group - 1) / group`` at the network rate, as a
    ring over the slowest link does, charged the in-domain share (7 of DeepSeek-V3's 63 peers at
    ep=64) at NIC speed. The latency stays the ring's, ``group - 1`` steps at the slower alpha (no
    measurement here of how the grouped sends' latencies overlap)."""
    if local <= 1 or group <= local:
        return None
    share = size / group
    beta = max((local - 1) * share / local_bw if local_bw > 0 else float("inf"),
               (group - local) * share / net_bw if net_bw > 0 else float("inf"))
    lat = (group - 1) * max(local_alpha, net_alpha)
    return AlgoTime("per-peer (scale-up and network lanes)", lat + beta, lat, beta)
