"""Serving under a latency target: how many devices, in which layout, at what batch, for what price.

"How many H100s for 1,000 requests/s of 2k-in/256-out at 30 ms/token?" For each target and each
layout (tensor-parallel degrees that divide the heads and fit a scale-up domain, optionally with
pipeline stages; a dataflow chip's own layout), continuous batching is run at its steady state
(:func:`.generate.steady_state`) and the largest batch is found whose iteration (TPOT) and first
token (TTFT) meet the targets and whose KV cache, at ``input_len + output_len`` tokens per request,
fits (:meth:`.replica.Replica.memory`). On a layout of fixed devices that batch needs the fewest
replicas for the rate (a replica's tokens/s grow with its batch). A dataflow layout adds chips for
its KV cache, so there the largest batch can cost 4x the chips a smaller one does (Llama-3-8B on
Groq at 30 ms: batch 1,052 on 1,453 chips, batch 64 on 154 at 5x the tokens/s per chip): its batch
is the one, among those meeting the targets, whose fleet for the rate has the fewest chips
(:func:`_dataflow_batch`). Replicas for the rate follow: ``ceil(rate / (batch / (output_len x TPOT)))``.

The plan ranks candidates by the fleet the rate needs, not by one replica: the answer has the fewest
devices in all (then the most tokens/s per device), the cheapest the lowest fleet $/h (a layout
with more tokens/s per device can need more devices once replicas round up); and it says which
layout wins for latency (the lowest TPOT any batch reaches: batch 1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from math import ceil, inf
from typing import Any

from ...backends import Target
from ...durations import as_seconds
from ...errors import NarrowpipeError, as_integer
from ...ir import Graph
from ...jsonout import dumps as dump_json
from ...models.spec import TransformerSpec
from ..prices import price_per_target
from .generate import SteadyState, steady_state
from .memory import Memory
from .parallel import tp_spec
from .prepare import ServingGraph
from .replica import BATCH_SEARCH_LIMIT, Layout, Replica
from .serve import replica_for

__all__ = ["Candidate", "CapacityPlan", "plan_capacity", "layouts_for", "CAPACITY_FORMAT"]

CAPACITY_FORMAT = "narrowpipe.capacity"
#: 2: candidates add ``fleet_price_per_hour`` and ``cost_per_million_tokens_at_rate``; the answer and
#: ``cheapest`` rank the rate's fleet, and ``cheapest`` is null when nothing is priced.
CAPACITY_VERSION = 2


@dataclass(frozen=True)
class Candidate:
    """One target and layout at its best batch under the targets (``batch`` 0: none meets them)."""

    target: str
    layout: str
    devices: int                      # per replica
    batch: int
    tpot_s: float
    ttft_s: float
    min_tpot_s: float                 # at batch 1: the layout's latency floor
    tokens_per_s: float               # output tokens/s of one replica
    replicas: int
    total_devices: int
    price_per_hour: float | None
    memory: Memory
    why_not: str = ""
    state: SteadyState | None = None
    limited_by: str = ""              # what stops a larger batch: "memory", "TPOT", "TTFT", "batch cap" or
    #                                   "devices" (a dataflow layout's larger batch needs more chips for the rate)
    demand_tokens_per_s: float = 0.0  # the rate's output tokens/s (rate x output_len)

    @property
    def meets(self) -> bool:
        return self.batch > 0

    @property
    def fits_one(self) -> bool:
        """Whether one sequence fits the layout's memory (a layout that does not reaches no TPOT)."""
        return self.state is not None

    @property
    def tokens_per_s_per_device(self) -> float:
        return self.tokens_per_s / self.devices if self.devices else 0.0

    @property
    def cost_per_million_tokens(self) -> float | None:
        if self.price_per_hour is None or not self.tokens_per_s:
            return None
        return self.price_per_hour * self.devices / 3600 / self.tokens_per_s * 1e6

    @property
    def fleet_price_per_hour(self) -> float | None:
        """$/h of every device the rate needs (``total_devices``), or None unpriced or not meeting."""
        if self.price_per_hour is None or not self.meets:
            return None
        return self.price_per_hour * self.total_devices

    @property
    def cost_per_million_tokens_at_rate(self) -> float | None:
        """$ per million output tokens at the requested rate: the fleet's $/h over the tokens the rate
        asks for, which the rounded-up replicas leave above the full-batch figure."""
        fleet = self.fleet_price_per_hour
        if fleet is None or not self.demand_tokens_per_s:
            return None
        return fleet / 3600 / self.demand_tokens_per_s * 1e6

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k not in ("memory", "state", "demand_tokens_per_s")}
        d.update(memory=self.memory.to_dict(), meets=self.meets, tokens_per_s_per_device=self.tokens_per_s_per_device,
                 cost_per_million_tokens=self.cost_per_million_tokens, fleet_price_per_hour=self.fleet_price_per_hour,
                 cost_per_million_tokens_at_rate=self.cost_per_million_tokens_at_rate,
                 state=self.state.to_dict() if self.state is not None else None)
        return d


@dataclass
class CapacityPlan:
    model: str
    rate: float
    input_len: int
    output_len: int
    tpot_target_s: float
    ttft_target_s: float | None
    candidates: list[Candidate]
    notes: list[str] = field(default_factory=list)

    @property
    def feasible(self) -> list[Candidate]:
        return [c for c in self.candidates if c.meets]

    @property
    def best_throughput(self) -> Candidate | None:
        """Fewest devices for the rate under the targets (replicas rounded up), then the most output
        tokens/s per device: Llama-3-70B at 1 req/s of 2048/256 on H100s under 50 ms TPOT is served by
        one TP2 replica (2 devices) though TP4 has the most tokens/s per device (4 devices)."""
        ok = self.feasible
        return min(ok, key=lambda c: (c.total_devices, -c.tokens_per_s_per_device)) if ok else None

    @property
    def cheapest(self) -> Candidate | None:
        """The lowest $/h for the rate's fleet among priced candidates (then the lowest full-batch $/M
        tokens); None when none is priced (unpriced ones: :attr:`unpriced`)."""
        priced = [c for c in self.feasible if c.fleet_price_per_hour is not None]
        if not priced:
            return None
        return min(priced, key=lambda c: (c.fleet_price_per_hour or 0.0, c.cost_per_million_tokens or 0.0))

    @property
    def unpriced(self) -> list[str]:
        """Targets with a candidate meeting the targets but no price: left out of :attr:`cheapest`."""
        return sorted({c.target for c in self.feasible if c.price_per_hour is None})

    @property
    def best_latency(self) -> Candidate | None:
        """The lowest TPOT any layout reaches (its batch-1 step), among layouts one sequence fits."""
        reachable = [c for c in self.candidates if c.fits_one]
        return min(reachable, key=lambda c: c.min_tpot_s) if reachable else None

    def why_none(self) -> str:
        """Which target no layout meets ('' when one does), with the best each layout reaches at batch
        1: the TPOT, the TTFT, or, where each is reachable alone but no layout reaches both, the two."""
        reachable = [c for c in self.candidates if c.fits_one]
        if self.feasible:
            return ""
        if not reachable:
            return "none holds even one sequence in memory" + \
                (" on one device (the only layout tried: see the note)" if ONE_DEVICE_NOTE in self.notes else "")
        fast = min(reachable, key=lambda c: c.min_tpot_s)
        tpot = f"the lowest TPOT reachable is {_ms(fast.min_tpot_s)} ({fast.target} {fast.layout})"
        if self.ttft_target_s is None:
            return tpot
        first = min(reachable, key=lambda c: c.ttft_s)      # each layout's at batch 1, as none meets
        ttft = f"the lowest TTFT reachable is {_ms(first.ttft_s)} ({first.target} {first.layout})"
        tpot_ok, ttft_ok = fast.min_tpot_s <= self.tpot_target_s, first.ttft_s <= self.ttft_target_s
        if tpot_ok and ttft_ok:
            return f"no layout reaches both targets: {tpot}, {ttft}"
        return tpot if ttft_ok else ttft if tpot_ok else f"{tpot}; {ttft}"

    def to_dict(self) -> dict[str, Any]:
        def name(c: Candidate | None) -> dict[str, Any] | None:
            return None if c is None else {"target": c.target, "layout": c.layout, "batch": c.batch,
                                           "total_devices": c.total_devices}
        return {"format": CAPACITY_FORMAT, "version": CAPACITY_VERSION, "model": self.model, "rate": self.rate,
                "input_len": self.input_len, "output_len": self.output_len, "tpot_target_s": self.tpot_target_s,
                "ttft_target_s": self.ttft_target_s, "candidates": [c.to_dict() for c in self.candidates],
                "best_throughput": name(self.best_throughput), "cheapest": name(self.cheapest),
                "best_latency": name(self.best_latency), "notes": self.notes}

    def to_json(self, indent: int | None = 2) -> str:
        return dump_json(self.to_dict(), indent, "capacity plan")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


#: Said when a graph's architecture is not recognised: a capacity plan that tried TP1 alone and
#: said "none holds even one sequence" read as if no layout could serve the model.
ONE_DEVICE_NOTE = ("only one device per replica was tried: tensor and pipeline parallel layouts need the model's "
                   "architecture, which this graph does not show (a Llama/GPT-2 layout or narrowpipe.transformer: "
                   "give its config.json)")


def layouts_for(sg: ServingGraph, target: Target, *, max_tp: int | None = None,
                pps: Sequence[int] = (1,)) -> list[Layout]:
    """Tensor-parallel degrees (powers of two up to the scale-up domain) that split the model,
    times the pipeline depths asked for; one device only without a recognised architecture. A mixture
    of experts also gets the wide expert-parallel layouts vLLM's documentation launches (``--data-parallel-size
    n --enable-expert-parallel``, :mod:`.layout`): data-parallel attention over ``ep`` devices (``DPn x EPn``)
    where ``ep`` (a power of two) stays in the domain and places whole experts. ``TPn x EPn`` reads the
    same expert bytes as ``TPn`` on average (whole experts, ``1/n`` of those reached, instead of ``1/n`` of
    each) and has no all-to-all, so it is left to ``serve --tp --ep`` with the mixes (``TP2 x DP4 x EP8``),
    to keep the search's steps few (each layout is a batch search of its own)."""
    if target.family == "dataflow" or sg.spec is None:
        return [Layout()]
    spec = sg.spec
    limit = min(max_tp or target.scale_up_domain, target.scale_up_domain)
    out: list[Layout] = []
    tp = 1
    while tp <= limit:
        if _splits(spec, tp):
            out.extend(Layout(tp, pp) for pp in pps if pp <= spec.layers)
        tp *= 2
    if spec.is_moe:
        out.extend(Layout(1, pp, ep) for ep in _powers(2, limit) if _splits(spec, 1, ep)
                   for pp in pps if pp <= spec.layers)
    return out


def _powers(least: int, most: int) -> list[int]:
    return [1 << i for i in range(most.bit_length()) if least <= 1 << i <= most]


def _splits(spec: TransformerSpec, tp: int, ep: int = 1) -> bool:
    """Whether ``tp`` devices split the model (heads, MLP and expert widths; with ``ep``, whole experts over
    ``ep``): :func:`.parallel.tp_spec` decides."""
    try:
        tp_spec(spec, tp, ep)
    except NarrowpipeError:
        return False
    return True


def _best_batch(replica: Replica, input_len: int, output_len: int, tpot: float, ttft: float | None,
                limit: int) -> tuple[int, SteadyState | None, str]:
    def ok(b: int) -> tuple[bool, SteadyState]:
        s = steady_state(replica, b, input_len, output_len)
        return s.tpot_s <= tpot and (ttft is None or s.ttft_s <= ttft), s
    good, state = ok(1)
    if not good:
        what = "TPOT" if state.tpot_s > tpot else "TTFT"
        got = state.tpot_s if what == "TPOT" else state.ttft_s
        return 0, state, f"{what} {got * 1e3:.1f} ms at batch 1 misses the target"
    lo, hi, best = 1, 2, state
    while hi <= limit:  # doubling, then bisection: an iteration's time grows with the batch
        good, s = ok(hi)
        if not good:
            break
        lo, hi, best = hi, hi * 2, s
    hi = min(hi, limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        good, s = ok(mid)
        if good:
            lo, best = mid, s
        else:
            hi = mid
    return lo, best, ""


def plan_capacity(model: Graph | ServingGraph, targets: str | Target | Iterable[str | Target], *, rate: float,
                  input_len: int, output_len: int, tpot: float, ttft: float | None = None,
                  max_tp: int | None = None, pps: Sequence[int] = (1,), weights: Any = None,
                  activations: Any = None, kv: Any = None, price: float | Mapping[str, float] | None = None,
                  system: Any = None, gemm_inputs: Any = None, mla_decode: str = "absorbed") -> CapacityPlan:
    """The plan for ``rate`` requests/s (see the module doc); ``tpot``/``ttft`` in seconds;
    ``mla_decode`` as :func:`.serve.replica_for`'s. ``price``: USD per device-hour, one for every
    target or a mapping by target name or alias (:func:`..prices.price_per_target`, as compare
    resolves them); a target without one takes its catalog price. A target may be a system's file
    (its chip, on its links). ``tpot``/``ttft`` may be written as the CLI takes them (``"30ms"``)."""
    tpot_s, ttft = as_seconds(tpot, "tpot"), as_seconds(ttft, "ttft")
    input_len, output_len = as_integer("input_len", input_len), as_integer("output_len", output_len)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate < inf \
            or input_len < 1 or output_len < 1 or tpot_s is None:
        raise NarrowpipeError("serve: rate, input and output lengths and the TPOT target must be positive "
                              f"(and finite), got rate={rate!r}, input_len={input_len}, output_len={output_len}")
    tpot = tpot_s
    specs = [targets] if isinstance(targets, (str, Target)) else list(targets)
    candidates: list[Candidate] = []
    notes: list[str] = []
    name = ""
    bases = [replica_for(model, spec, weights=weights, activations=activations, kv=kv, system=system,
                         gemm_inputs=gemm_inputs, mla_decode=mla_decode) for spec in specs]
    price_of = price_per_target(price, [b.target for b in bases])
    for base in bases:
        target = base.target
        own = price_of.get(target.name)
        base.source.check_context(input_len + output_len)
        name = base.source.graph.name
        notes = notes or list(base.notes)
        if base.source.spec is None and target.family != "dataflow" and ONE_DEVICE_NOTE not in notes:
            notes.append(ONE_DEVICE_NOTE)
        for layout in layouts_for(base.source, target, max_tp=max_tp, pps=pps):
            replica = base if layout == Layout() else Replica(base.source, target, layout, topology=base.topology,
                                                              mla_decode=base.mla_decode)
            candidates.append(_candidate(replica, rate, input_len, output_len, tpot, ttft, own))
    return CapacityPlan(name, rate, input_len, output_len, tpot, ttft, candidates, notes)


def _candidate(replica: Replica, rate: float, input_len: int, output_len: int, tpot: float,
               ttft: float | None, price: float | None) -> Candidate:
    context = input_len + output_len
    fits = replica.max_batch(context, prefill_tokens=input_len, prefill_batch=1)
    devices = replica.devices(1, context)
    price_h = price if price is not None else replica.target.price_per_hour
    floor = steady_state(replica, 1, input_len, output_len)
    label = replica.layout.label if not replica.dataflow else f"dataflow layout ({devices} chips)"
    if fits == 0:
        mem = replica.memory(1, context, prefill_tokens=input_len, prefill_batch=1)
        return Candidate(replica.target.name, label, devices, 0, floor.tpot_s, floor.ttft_s, floor.tpot_s, 0.0, 0, 0,
                         price_h, mem, f"memory: {mem.short()} at batch 1")
    batch, state, why = _best_batch(replica, input_len, output_len, tpot, ttft, fits)
    mem = replica.memory(max(batch, 1), context, prefill_tokens=input_len, prefill_batch=1)
    if batch == 0 or state is None:
        return Candidate(replica.target.name, label, devices, 0, floor.tpot_s, floor.ttft_s, floor.tpot_s, 0.0, 0, 0,
                         price_h, mem, why, floor)
    largest = batch
    if batch == fits:
        limit = "batch cap" if fits >= BATCH_SEARCH_LIMIT else "memory"
    else:
        nxt = steady_state(replica, batch + 1, input_len, output_len)
        limit = "TPOT" if nxt.tpot_s > tpot else "TTFT"
    demand = rate * output_len
    if replica.dataflow:              # a dataflow layout grows with its KV cache: the batch the fleet needs
        batch, state = _dataflow_batch(replica, input_len, output_len, demand, largest, state)
        if batch < largest:
            limit = "devices"
            mem = replica.memory(batch, context, prefill_tokens=input_len, prefill_batch=1)
    tokens = batch / state.tpot_s
    devices = replica.devices(batch, context)
    label = replica.layout.label if not replica.dataflow else f"dataflow layout ({devices} chips)"
    replicas = ceil(demand / tokens)
    return Candidate(replica.target.name, label, devices, batch, state.tpot_s, state.ttft_s, floor.tpot_s,
                     tokens, replicas, replicas * devices, price_h, mem, "", state, limit, demand)


def _dataflow_batch(replica: Replica, input_len: int, output_len: int, demand: float, largest: int,
                    at_largest: SteadyState) -> tuple[int, SteadyState]:
    """The batch (at most ``largest``, the largest meeting the targets, so every one considered meets
    them) whose fleet for ``demand`` output tokens/s has the fewest chips, then the most tokens/s per
    chip. A replica's tokens/s and chips both grow with its batch, so for ``r`` replicas the best
    batch is the smallest giving ``demand / r`` each; with the tokens/s per chip peaking at ``b*``
    (a doubling grid, then quarter-octave steps around its best), the fleets of ``r*`` replicas
    (``b*``'s count) and one fewer or more are compared. Steps cost a timing each: about 40."""
    context = input_len + output_len
    seen: dict[int, tuple[SteadyState, float, int]] = {largest: (at_largest, largest / at_largest.tpot_s,
                                                                 replica.devices(largest, context))}

    def at(b: int) -> tuple[SteadyState, float, int]:
        if b not in seen:
            s = steady_state(replica, b, input_len, output_len)
            seen[b] = (s, b / s.tpot_s, replica.devices(b, context))
        return seen[b]

    def per_chip(b: int) -> float:
        _s, tok, dev = at(b)
        return tok / dev

    grid = sorted({1 << i for i in range(largest.bit_length()) if 1 << i <= largest} | {largest})
    peak = max(grid, key=per_chip)
    fine = {min(largest, max(1, round(peak * 2 ** (k / 4)))) for k in range(-3, 4)}
    peak = max(sorted(fine | {peak}), key=per_chip)
    options = {peak}
    base = ceil(demand / at(peak)[1])
    for r in (base - 1, base, base + 1):
        if r < 1 or at(largest)[1] * r < demand:
            continue
        lo, hi = 0, largest               # the smallest batch whose r replicas carry the demand
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if at(mid)[1] * r >= demand else (mid, hi)
        options.add(hi)

    def fleet(b: int) -> tuple[int, float]:
        _s, tok, dev = at(b)
        return ceil(demand / tok) * dev, -tok / dev
    best = min(sorted(options), key=fleet)
    return best, at(best)[0]
