"""The batch at which decode turns compute-bound, by the chip's ridge point and by the model.

Decode at batch B does ``B x f`` FLOPs (f: the FLOPs of one sequence's token, attention over the
context included) and moves ``W(B) + B x b`` bytes. ``W(B)`` is what a step reads once for the whole
batch: the weights, and for a mixture of experts only the experts its tokens are routed to: under
the analyses' default, random routing (:mod:`narrowpipe.costmodel.experts`), the expected
``D(B) = E (1 - (1 - k/E)^B)`` of a layer's ``E`` experts for top-``k`` routing (Mixtral at batch 4:
5.47 of 8), which nears ``E`` only gradually; under balanced routing, the upper bound,
``min(E, k x B)``, all of them from ``B = E / k`` on (expert saturation: batch 4 for Mixtral's 8
experts and top-2, 32 for DeepSeek-V3's 256 and top-8); so
``W(B) = W0 + sum over MoE layers of e x D(B)`` with W0 the batch-independent rest (attention,
dense MLPs, shared experts, norms, the head) and e one expert's bytes; a dense model's W is W0. b is
one sequence's KV cache traffic: the cache it holds at ``context`` tokens (a sliding-window layer at
most its window, :meth:`~.kvcache.KvCache.resident_bytes`, as the memory budget counts it) read, and
the new token's keys and values read and written. Decode turns compute-bound where
``B f / P = (W(B) + B b) / BW`` with P and BW the achievable matrix rate and bandwidth:

    B* = R W(B*) / (f - R b),   R = P / BW (the ridge point, FLOP/byte)

Under balanced routing W(B) is linear between saturation points, so B* is solved regime by regime,
from the smallest batches up (:func:`solve_crossover`): below saturation each sequence's experts add
``e k`` per MoE layer to what it moves, ``B* = R W0 / (f - R (b + sum e k))``; past it
``B* = R W_sat / (f - R b)`` with every expert read (Mixtral on H200 at 128 tokens, not the 26
that W0 alone gives). Under random routing W(B) is concave, so ``B f - R (W(B) + B b)`` is convex and
negative at 0, and its one root is found (scipy's brentq) in ``(0, R W_sat / (f - R b)]``; at Mixtral's crossover
(hundreds of sequences) every expert is reached either way. ``shared_bytes`` is W at B* (with
every expert read when decode never turns).

P is the matrix rate of the GEMM format carrying most of the step's FLOPs (FP8 under W8A8, though the
head stays bf16). Without KV traffic (b = 0) and with 2-byte weights read once per 2 FLOPs per token (f = W), B* = R:
the chip's FLOP/byte ratio. The KV read raises it, and when one sequence's attention alone is
below the ridge (``f <= R b``: long contexts, GQA caches) decode never turns compute-bound.

``modelled`` asks the execution model instead: the first batch whose step spends more time
computing than moving memory (sums of the kernels' compute and memory terms), which includes tile
padding, wave quantization and L2 re-reads, so it differs from B* where the matrix units run
padded rows (see :func:`_first_compute_bound` for the search).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import inf, prod
from typing import Any

from scipy.optimize import brentq

from ...ir import Op
from ..execution.common import matrix_rate
from ..execution.gemm import dot_gemm, grouped_gemm
from ..experts import expected_reached
from ..interpreter import CostTable, interpret
from .replica import Replica
from .step import time_step

__all__ = ["Crossover", "crossover", "RoutedWeights", "routed_weights", "solve_crossover"]


@dataclass(frozen=True)
class Crossover:
    """``analytic``: B* from the ridge point (None: never compute-bound); ``modelled``: the
    execution model's first compute-bound batch (None: not below ``limit``). ``shared_bytes`` is
    W(B*), what a step at the crossover reads once for the whole batch (the weights, of a mixture of
    experts the experts routed to); where decode never turns, W with every expert read. So
    ``analytic == ridge x shared_bytes / (flops_per_sequence - ridge x bytes_per_sequence)``, times ``dp``
    on an expert-parallel layout with data-parallel ranks (:mod:`.layout`: the step and W are one
    rank's, the batch the replica's)."""

    analytic: float | None
    modelled: int | None
    ridge: float                  # achievable FLOP/s over achievable bytes/s
    flops_per_sequence: float     # f
    bytes_per_sequence: float     # b: one sequence's KV traffic, windows capped
    shared_bytes: float           # W(B*) (module doc)
    context: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _dtype(table: CostTable) -> Any:
    """The GEMM input format that carries most of a decode step's matrix FLOPs, whose rate sets P.
    Summed by format, not the largest GEMM's: W8A8 FP8 keeps ``lm_head`` in bf16, the one largest
    GEMM of Llama-3-8B, while its 224 FP8 projections carry 93% of the FLOPs (taking the head's
    format put the ridge at bf16's 279 FLOP/B, not FP8's 558)."""
    by_dtype: dict[Any, int] = {}
    for node, cost in table.costs.items():
        if node.op is Op.DOT or node.op is Op.GROUPED_DOT:
            gemm = dot_gemm(table, node) if node.op is Op.DOT else grouped_gemm(table, node)
            by_dtype[gemm.dtype] = by_dtype.get(gemm.dtype, 0) + cost.flops
    return max(by_dtype, key=by_dtype.__getitem__) if by_dtype else None


@dataclass(frozen=True)
class RoutedWeights:
    """The routed experts of one grouped GEMM: ``expert_bytes`` one expert's weight, ``experts`` E,
    ``rows`` the rows one sequence's token routes to it (its top-k); ``random``: random routing
    (the expected experts reached), else balanced (the most)."""

    expert_bytes: int
    experts: int
    rows: int
    random: bool = False
    #: An expert-parallel serving shard (:mod:`.layout`): its device holds ``experts / ep`` of them, and
    #: ``dp`` data-parallel ranks each route ``batch`` sequences; 1, 1: a device holds every expert.
    ep: int = 1
    dp: int = 1

    def read(self, batch: float) -> float:
        """Bytes a step of ``batch`` sequences reads: random routing reaches the expected
        ``E (1 - (1 - k/E)^batch)`` experts, balanced routing ``min(E, k x batch)``
        (:func:`~narrowpipe.costmodel.experts.reached_experts`); on an expert-parallel shard the
        device's ``1 / ep`` of what the group's ``dp x batch`` sequences reach."""
        tokens = batch * self.dp
        if self.random:
            return self.expert_bytes * expected_reached(tokens, self.experts, self.rows) / self.ep
        return self.expert_bytes * min(self.experts, self.rows * tokens) / self.ep

    @property
    def per_sequence(self) -> float:
        """Expert bytes one more sequence adds below saturation (balanced routing)."""
        return self.expert_bytes * self.rows * self.dp / self.ep

    @property
    def saturation(self) -> float:
        """The batch (of one data-parallel rank) from which every expert is read."""
        return self.experts / (self.rows * self.dp)


def routed_weights(table: CostTable) -> list[RoutedWeights]:
    """The grouped GEMMs of a one-sequence decode step (``table``) whose reached experts grow with
    the batch (a split fixed by expert-parallel sharding does not grow: its bytes stay in W0)."""
    out = []
    for node in table.costs:
        if node.op is not Op.GROUPED_DOT or node.attrs.get("role") or "expert_rows" in node.attrs:
            continue
        gemm = grouped_gemm(table, node)
        w = node.inputs[1]
        assert w is not None
        if gemm.m and gemm.group_rows:
            shape = table.shapes[w]
            shard, top_k = node.attrs.get("expert_parallel"), node.attrs.get("top_k")
            ep, dp = (int(shard[0]), int(shard[1])) if isinstance(shard, (tuple, list)) else (1, 1)
            rows = int(top_k) if ep > 1 and isinstance(top_k, int) else gemm.m
            out.append(RoutedWeights(w.type.dtype.nbytes(prod(shape[1:])), shape[0] * ep, rows,
                                     table.expert_balance.kind == "random", ep, dp))
    return out


def solve_crossover(ridge: float, f: float, b: float, w0: float,
                    routed: Sequence[RoutedWeights]) -> tuple[float | None, float]:
    """(B*, W(B*)) for ``B f = R (W(B) + B b)`` with ``W(B) = w0 + sum of routed reads`` (module doc);
    (None, W with every expert read) where decode never turns compute-bound. W is linear between
    saturation points: each regime's linear solution is taken if it falls inside the regime, from
    the smallest batches up (``B (f - R b) - R W(B)`` is convex and negative at 0, so it crosses
    zero once). Random routing's W(B) is not piecewise linear: that root is bracketed (:func:`_concave_root`)."""
    if any(r.random for r in routed):
        return _concave_root(ridge, f, b, w0, routed)
    edges = sorted({r.saturation for r in routed})
    lo = 0.0
    for hi in (*edges, inf):
        full = [r for r in routed if r.saturation <= lo]
        a = w0 + sum(r.read(r.saturation) for r in full)             # saturated: every expert read
        c = sum(r.per_sequence for r in routed if r.saturation > lo)   # bytes per sequence more
        if f > ridge * (b + c):
            batch = ridge * a / (f - ridge * (b + c))
            if batch <= hi:
                return batch, a + c * batch
        lo = hi
    return None, w0 + sum(r.read(r.saturation) for r in routed)


def _concave_root(ridge: float, f: float, b: float, w0: float,
            routed: Sequence[RoutedWeights]) -> tuple[float | None, float]:
    """The root of ``B (f - R b) - R W(B)`` for a concave W(B) below ``W_sat``: it lies in
    ``(0, R W_sat / (f - R b)]`` (there ``W(B) <= W_sat`` makes it non-negative), found by scipy's
    Brent method on that bracket."""
    def shared(batch: float) -> float:
        return w0 + sum(r.read(batch) for r in routed)

    full = w0 + sum(r.expert_bytes * r.experts / r.ep for r in routed)
    slope = f - ridge * b
    if slope <= 0:
        return None, full

    def excess(batch: float) -> float:       # FLOP time past byte time, in FLOPs: 0 at the crossover
        return batch * slope - ridge * shared(batch)

    hi = ridge * full / slope
    if excess(0.0) >= 0:                     # nothing shared: compute-bound from the first sequence
        return 0.0, shared(0.0)
    root = float(brentq(excess, 0.0, hi, xtol=1e-12, rtol=1e-13))
    return root, shared(root)


def crossover(replica: Replica, context: int, *, limit: int = 1 << 14) -> Crossover:
    """The crossover batch of ``replica``'s per-device decode step at ``context``."""
    g, target = replica.decode_graph, replica.target
    one = time_step(g, target, batch=1, tokens=1, past=context, options=replica.options)
    two = time_step(g, target, batch=2, tokens=1, past=context, options=replica.options)
    table = interpret(g.graph, g.bindings(1, 1, 0))
    routed = routed_weights(table)
    f = float(two.flops - one.flops)
    # the batch-independent part of the fused traffic, the routed experts' reads (not affine) taken out
    w0 = float(2 * (one.traffic - sum(r.read(1) for r in routed)) - (two.traffic - sum(r.read(2) for r in routed)))
    b = float(g.cache.decode_traffic(context))
    peak = matrix_rate(target, _dtype(table), replica.options).flops_per_s * target.matmul_efficiency
    bw = target.memory_bandwidth * target.memory_efficiency
    ridge = peak / bw
    analytic, w = solve_crossover(ridge, f, b, w0, routed)

    def compute_bound(batch: int) -> bool:
        s = time_step(g, target, batch=batch, tokens=1, past=context, options=replica.options)
        return s.compute_s >= s.memory_s

    modelled = _first_compute_bound(compute_bound, limit)
    dp = replica.layout.dp      # the step is one data-parallel rank's: the replica's batch is dp of them
    return Crossover(None if analytic is None else analytic * dp, None if modelled is None else modelled * dp,
                     ridge, f, b, w, context)


def _first_compute_bound(compute_bound: Callable[[int], bool], limit: int) -> int | None:
    """The first batch at which ``compute_bound`` holds. Tile padding makes it saw-toothed (a batch
    just past a tile boundary computes padded rows), so doubling finds a compute-bound power of
    two, the range from a quarter of it is scanned in 16 steps, and the first step that holds is
    bisected."""
    if compute_bound(1):
        return 1
    hi = 2
    while hi <= limit and not compute_bound(hi):
        hi *= 2
    if hi > limit:
        return None
    lo = max(1, hi // 4)
    stride = max(1, (hi - lo) // 16)
    prev = lo
    for b in range(lo + stride, hi + 1, stride):
        if compute_bound(b):
            hi = b
            break
        prev = b
    lo = prev
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if compute_bound(mid) else (mid, hi)
    return hi
