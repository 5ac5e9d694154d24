"""One training step's time from per-block costs: stages, pipeline schedule, and the communication
between blocks (pipeline sends, data-parallel gradient reduction, ZeRO/FSDP parameter gathers).

Why analytic: block costs are computed once per distinct block and sharding; a strategy only changes
how they add up. The step is the pipeline's makespan (:func:`.pipeline.pipeline_time`) plus what
cannot hide behind it: the data-parallel gradient reduction (:mod:`.dp_comm`: once after the last
backward, or every microbatch under ZeRO-2; all of it when the runtime reduces after the backward,
only what outlasts the compute when it overlaps), the all-reduce of a weight two stages share
(:mod:`.tied_grads`: tied embeddings under pipeline parallelism), the optimizer, and exposed
parameter gathers.
Tensor-parallel collectives are ops inside the block times, exposed unless the runtime overlaps them.
The breakdown adds up to the total: the slowest stage's per-microbatch terms times the microbatch
count, the bubble, then the once-per-step terms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...ir import DType, Op
from ..execution.collectives import Topology
from .block_cost import BlockCost, unique_params
from .dp_comm import grad_reduction, param_gathers
from .ep_overlap import applies as ep_overlap_applies
from .ep_overlap import block_hidden, paired_share
from .pipeline import Stage, assign_stages, balance_devices
from .runtime import Runtime
from .strategy import Parallel
from .tied_grads import TiedWeight, tied_grad_collectives, tied_weights

__all__ = ["ONCE_PER_STEP", "StepTime", "step_time", "device_chunks", "layer_times", "Layout", "DeviceLoad", "layout"]

#: Breakdown keys, in the order a report prints them.
TERMS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "p2p", "param_gather", "bubble", "dp_comm",
         "tied_grad", "optimizer")
#: The terms added once per step after the pipeline drains (the rest of the breakdown is the pipeline's).
ONCE_PER_STEP = ("dp_comm", "tied_grad", "optimizer")


@dataclass
class StepTime:
    total_s: float
    breakdown: dict[str, float]
    layout: Layout
    #: Per pipeline device, per microbatch: point-to-point and exposed parameter-gather seconds.
    extra_s: list[float]
    #: Communication time that compute hides (not in ``total_s``), by kind.
    hidden: dict[str, float] = field(default_factory=dict)
    #: Full durations of the once-per-step collectives (before overlap).
    collectives: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: Per pipeline device, per microbatch: the exposed ZeRO-3 parameter-gather seconds (in ``extra_s``).
    gather_s: list[float] = field(default_factory=list)
    #: The closed-form step (``m * t_max + (sum(t) - t_max) / v`` plus the once-per-step terms) when
    #: ``total_s`` is the simulated schedule's (:mod:`.simulated`); None while it is the closed form.
    closed_form_s: float | None = None

    @property
    def chunks(self) -> list[list[int]]:
        return self.layout.chunks

    @property
    def stages(self) -> list[Stage]:
        return [Stage(d.index, d.layers, d.forward_s, d.backward_s, x)
                for d, x in zip(self.layout.devices, self.extra_s)]

    @property
    def exposed_comm_s(self) -> float:
        return sum(self.breakdown.get(k, 0.0) for k in ("tp_comm", "cp_comm", "ep_comm", "p2p", "param_gather",
                                                        "dp_comm", "tied_grad"))


def device_chunks(layers: list[BlockCost], prologue: BlockCost | None, epilogue: BlockCost | None,
                  parallel: Parallel, runtime_split: str = "balanced") -> list[list[int]]:
    """Layer indices of each of the ``pp * interleave`` chunks (chunk ``c`` on device ``c % pp``):
    equal counts (``uniform``), or balanced by forward + backward time with the embedding on the
    first chunk and the head on the last: the largest chunk minimized without interleaving, the
    simulated interleaved schedule otherwise (:func:`.pipeline.balance_devices`)."""
    chunks = parallel.pp * parallel.interleave
    if runtime_split == "uniform" and len(layers) % chunks == 0:
        per = len(layers) // chunks
        return [list(range(c * per, (c + 1) * per)) for c in range(chunks)]
    costs = [c.forward_s + c.backward_s for c in layers]
    if costs and prologue is not None:
        costs[0] += prologue.forward_s + prologue.backward_s
    if costs and epilogue is not None:
        costs[-1] += epilogue.forward_s + epilogue.backward_s
    parts = assign_stages(costs, parallel.pp, parallel.interleave)
    if parallel.interleave == 1:
        return parts
    return balance_devices(*layer_times(layers, prologue, epilogue), parts, parallel.pp, parallel.microbatches)


def layer_times(layers: list[BlockCost], prologue: BlockCost | None,
                epilogue: BlockCost | None) -> tuple[list[float], list[float]]:
    """Per-layer forward and backward seconds, the embedding's on the first layer, the head's on the last."""
    forward = [c.forward_s for c in layers]
    backward = [c.backward_s for c in layers]
    for end, block in ((0, prologue), (-1, epilogue)):
        if block is not None and forward:
            forward[end] += block.forward_s
            backward[end] += block.backward_s
    return forward, backward


class CollectiveTimer:
    """:meth:`Topology.time` memoized: a search asks the same (op, bytes, group, stride) thousands
    of times (every ZeRO variant of a layout reduces the same gradients)."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self._memo: dict[tuple[Op, float, int, int], float] = {}

    def seconds(self, op: Op, size: float, group: int, stride: int = 1) -> float:
        key = (op, size, group, stride)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self.topology.time(op, size, group, stride).seconds
        return hit


@dataclass(frozen=True)
class DeviceLoad:
    """What one pipeline device runs, summed once so that evaluating a strategy is arithmetic:
    per-microbatch times and terms, parameters (shared weights once), saved activations."""

    index: int
    blocks: tuple[BlockCost, ...]
    layers: tuple[int, ...]
    forward_s: float
    backward_s: float
    terms: dict[str, float]
    hidden_s: float
    optimizer_s: float
    params: int
    param_bytes: int
    deferred_bytes: int
    saved_bytes: int
    transient_bytes: int
    param_blocks: int
    largest_param_bytes: int
    #: Of ``params`` / ``param_bytes``, the experts' (reduced and sharded over ``edp``, not ``dp x cp``).
    expert_params: int = 0
    expert_param_bytes: int = 0
    #: FP8 training: the once-per-step weight casts and the resident FP8 weight copies they write.
    weight_cast_s: float = 0.0
    fp8_weight_bytes: int = 0
    #: Per microbatch, the expert all-to-all seconds another microbatch's pass hides (:mod:`.ep_overlap`:
    #: the merged passes' share of the device's passes; already taken out of ``forward_s``/``backward_s``
    #: and the ``ep_comm`` term).
    ep_hidden_s: float = 0.0


@dataclass(frozen=True)
class Layout:
    """Blocks placed on pipeline devices: depends on the block costs, ``pp``, ``interleave`` only."""

    chunks: list[list[int]]
    devices: tuple[DeviceLoad, ...]
    boundary_bytes: int
    #: Weights held by more than one pipeline device (tied embeddings), whose gradients are all-reduced.
    tied: tuple[TiedWeight, ...] = ()
    cache: dict[Any, Any] = field(default_factory=dict, compare=False)

    @property
    def fb(self) -> list[float]:
        """Forward + backward seconds per microbatch of each device."""
        got = self.cache.get("fb")
        if got is None:
            got = self.cache["fb"] = [d.forward_s + d.backward_s for d in self.devices]
        return got

    @property
    def optimizer_s(self) -> float:
        return max(d.optimizer_s for d in self.devices)


def layout(parallel: Parallel, layers: list[BlockCost], prologue: BlockCost | None, epilogue: BlockCost | None,
           runtime: Runtime, chunks: list[list[int]] | None = None) -> Layout:
    """The blocks on the pipeline devices: split by :func:`device_chunks`, or as ``chunks`` say."""
    p = parallel
    chunks = chunks if chunks is not None else device_chunks(layers, prologue, epilogue, p, runtime.stage_split)
    per_device: list[list[BlockCost]] = [[] for _ in range(p.pp)]
    ids: list[list[int]] = [[] for _ in range(p.pp)]
    for c, idx in enumerate(chunks):
        per_device[c % p.pp].extend(layers[i] for i in idx)
        ids[c % p.pp].extend(idx)
    if prologue is not None:
        per_device[0].insert(0, prologue)
    if epilogue is not None:
        per_device[(len(chunks) - 1) % p.pp].append(epilogue)
    loads = []
    overlap = ep_overlap_applies(p, runtime)
    for s, blocks in enumerate(per_device):
        params, pbytes = unique_params(blocks)
        hid_f, hid_b = (sum(x) for x in zip(*(block_hidden(b) for b in blocks))) if overlap and blocks else (0.0, 0.0)
        paired = paired_share(p, s)
        hid_f, hid_b = hid_f * paired, hid_b * paired
        terms = _terms(blocks)
        terms["ep_comm"] -= hid_f + hid_b
        loads.append(DeviceLoad(
            s, tuple(blocks), tuple(ids[s]), sum(b.forward_s for b in blocks) - hid_f,
            sum(b.backward_s for b in blocks) - hid_b,
            terms, sum(b.hidden_s for b in blocks), sum(b.optimizer_s for b in blocks), params, pbytes,
            sum(_extra_grad_bytes(b) for b in blocks), sum(b.saved_bytes for b in blocks),
            max((b.transient_bytes for b in blocks), default=0), sum(1 for b in blocks if b.params),
            max((b.param_bytes for b in blocks), default=0), sum(b.expert_params for b in blocks),
            sum(b.expert_param_bytes for b in blocks), sum(b.weight_cast_s for b in blocks),
            sum(b.fp8_weight_bytes for b in blocks), hid_f + hid_b))
    first = layers[0] if layers else prologue
    return Layout(chunks, tuple(loads), first.boundary_bytes if first is not None else 0, tied_weights(per_device))


def step_time(parallel: Parallel, lay: Layout, topology: CollectiveTimer, runtime: Runtime) -> StepTime:
    """The step time of ``parallel`` with its blocks placed as ``lay``, on ``topology`` under ``runtime``."""
    p = parallel
    m, v = p.microbatches, p.interleave
    p2p = _p2p_seconds(lay.boundary_bytes, p, topology, runtime)
    p2p_t = p2p * 2 * v if p.pp > 1 else 0.0
    gathers = [param_gathers(lay, d, p, topology, runtime) for d in lay.devices] if p.zero >= 3 else None
    extra = [p2p_t + gathers[i][0] for i in range(len(lay.devices))] if gathers else [p2p_t] * len(lay.devices)
    times = [fb + x for fb, x in zip(lay.fb, extra)]
    slowest = max(times)
    crit = times.index(slowest)
    total = m * slowest + (sum(times) - slowest) / v          # pipeline.pipeline_time, inlined for the search
    breakdown = {k: m * x for k, x in lay.devices[crit].terms.items()}
    breakdown["p2p"] = m * p2p_t
    breakdown["param_gather"] = m * (gathers[crit][0] if gathers else 0.0)
    breakdown["bubble"] = total - m * slowest
    dp_total, dp_exposed, reduce_name = grad_reduction(lay, p, topology, runtime)
    breakdown["dp_comm"] = dp_exposed
    breakdown["tied_grad"] = sum(t for *_, t in tied_grad_collectives(lay.tied, p, topology, runtime))
    shard = p.dp * p.cp if p.zero >= 1 else 1
    breakdown["optimizer"] = lay.optimizer_s / shard
    if any(d.weight_cast_s for d in lay.devices):
        # FP8 training: each device casts its (unsharded by ZeRO-1/2) weights once per step, after the
        # update; the slowest device's update plus cast is the term
        breakdown["optimizer"] = max(d.optimizer_s / shard + d.weight_cast_s for d in lay.devices)
    total += dp_exposed + breakdown["tied_grad"] + breakdown["optimizer"]
    hidden = {"dp_comm": max(0.0, dp_total - dp_exposed),
              "cp_comm": m * lay.devices[crit].hidden_s,
              "param_gather": m * (gathers[crit][1] if gathers else 0.0),
              "ep_comm": m * lay.devices[crit].ep_hidden_s}
    notes = []
    if dp_total > 0:
        notes.append(f"data-parallel gradient {reduce_name} {dp_total * 1e3:.1f} ms per step, "
                     f"{dp_exposed * 1e3:.1f} ms exposed ("
                     + ("overlapped with the backward" if runtime.overlap_grad_reduce else "after the backward")
                     + ")")
    return StepTime(total, breakdown, lay, extra, hidden,
                    {"dp_reduction": dp_total, "p2p_each": p2p}, notes,
                    [g[0] for g in gathers] if gathers else [0.0] * len(lay.devices))


def _extra_grad_bytes(block: BlockCost) -> int:
    """Partial weight-gradient bytes the data-parallel reduction carries besides the gradients: a sum
    still owed over ``tp`` (a norm's weight under sequence parallelism). One owed over ``cp`` is the
    gradient itself, which the ``dp x cp`` reduction sums anyway (Megatron-LM reduces gradients over
    the data-and-context-parallel group): counting it again doubled the bytes."""
    return sum(n for axis, n in block.deferred.items() if axis not in ("cp", "dp", "dp_cp"))


def _terms(blocks: list[BlockCost]) -> dict[str, float]:
    """Per-microbatch compute, recomputation and exposed collectives by axis, summed over blocks.
    A collective the recomputed forward runs again (full recomputation's expert all-to-alls and
    tensor-parallel all-reduces) is in its axis's term, so the recomputation term is the recomputed
    forward's kernels without it: counted in both, it came off the compute term twice."""
    out = {"compute": 0.0, "recompute": 0.0, "tp_comm": 0.0, "cp_comm": 0.0, "ep_comm": 0.0}
    for b in blocks:
        comm = {"tp": 0.0, "cp": 0.0, "ep": 0.0}
        rec_comm = 0.0
        for use in b.collectives:
            if use.phase in ("forward", "recompute", "backward"):
                comm[use.axis if use.axis in comm else "tp"] += use.exposed_s
                rec_comm += use.exposed_s if use.phase == "recompute" else 0.0
        rec = b.times.get("recompute", 0.0) - rec_comm
        out["recompute"] += rec
        out["tp_comm"] += comm["tp"]
        out["cp_comm"] += comm["cp"]
        out["ep_comm"] += comm["ep"]
        out["compute"] += b.forward_s + b.backward_s - rec - sum(comm.values())
    return out


def _p2p_seconds(boundary_bytes: int, p: Parallel, topology: CollectiveTimer, runtime: Runtime) -> float:
    """One stage-to-stage transfer of a microbatch's activation (or its gradient). With Megatron's
    scatter/gather optimization the tensor crosses the network split over the tensor-parallel ranks'
    links and is all-gathered over the scale-up link on arrival (sequence parallelism splits it anyway)."""
    if p.pp == 1 or not boundary_bytes:
        return 0.0
    _, stride = p.axis("pp")
    nbytes = float(boundary_bytes)
    split = p.tp > 1 and runtime.pipeline_scatter_gather and not p.sequence_parallel
    t = topology.seconds(Op.SEND, nbytes / p.tp if split else nbytes, 2, stride)
    if split:
        t += topology.seconds(Op.ALL_GATHER, nbytes, p.tp, 1)
    return t


def dtype_bytes(dtype: DType | str) -> int:
    return (dtype if isinstance(dtype, DType) else DType.parse(dtype)).nbytes(1)


def as_dict(step: StepTime) -> dict[str, Any]:
    return {"total_s": step.total_s, "breakdown": dict(step.breakdown), "hidden": dict(step.hidden),
            "collectives": dict(step.collectives), "notes": list(step.notes)}
