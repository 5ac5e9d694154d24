"""One training step's time from per-block costs: stages, pipeline schedule, and the communication
between blocks (pipeline sends, data-parallel gradient reduction, ZeRO/FSDP parameter gathers).

Why analytic: block costs are computed once per distinct block and sharding; a strategy only changes
how they add up. The step is the pipeline's makespan (:func:`.pipeline.pipeline_time`) plus what
cannot hide behind it: the gradient reduction after the last backward (all of it when the runtime
reduces after the backward, only what outlasts the backward when it overlaps), the optimizer, and
exposed parameter gathers. Tensor-parallel collectives are ops inside the block times, exposed unless
the runtime overlaps them. The breakdown adds up to the total: the slowest stage's per-microbatch
terms times the microbatch count, the bubble, then the once-per-step terms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...ir import DType, Op
from ..execution.collectives import Topology
from .block_cost import BlockCost, unique_params
from .pipeline import Stage, assign_stages
from .runtime import Runtime
from .strategy import Parallel

__all__ = ["StepTime", "step_time", "device_chunks", "Layout", "DeviceLoad", "layout"]

#: Breakdown keys, in the order a report prints them.
TERMS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "p2p", "param_gather", "bubble", "dp_comm",
         "optimizer")


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
                                                        "dp_comm"))


def device_chunks(layers: list[BlockCost], prologue: BlockCost | None, epilogue: BlockCost | None,
                  parallel: Parallel, runtime_split: str = "balanced") -> list[list[int]]:
    """Layer indices of each of the ``pp * interleave`` chunks (chunk ``c`` on device ``c % pp``):
    equal counts (``uniform``), or balanced by forward + backward time with the embedding on the
    first chunk and the head on the last."""
    chunks = parallel.pp * parallel.interleave
    if runtime_split == "uniform" and len(layers) % chunks == 0:
        per = len(layers) // chunks
        return [list(range(c * per, (c + 1) * per)) for c in range(chunks)]
    costs = [c.forward_s + c.backward_s for c in layers]
    if costs and prologue is not None:
        costs[0] += prologue.forward_s + prologue.backward_s
    if costs and epilogue is not None:
        costs[-1] += epilogue.forward_s + epilogue.backward_s
    return assign_stages(costs, parallel.pp, parallel.interleave)


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


@dataclass(frozen=True)
class Layout:
    """Blocks placed on pipeline devices: depends on the block costs, ``pp``, ``interleave`` only."""

    chunks: list[list[int]]
    devices: tuple[DeviceLoad, ...]
    boundary_bytes: int
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
           runtime: Runtime) -> Layout:
    p = parallel
    chunks = device_chunks(layers, prologue, epilogue, p, runtime.stage_split)
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
    for s, blocks in enumerate(per_device):
        params, pbytes = unique_params(blocks)
        loads.append(DeviceLoad(
            s, tuple(blocks), tuple(ids[s]), sum(b.forward_s for b in blocks), sum(b.backward_s for b in blocks),
            _terms(blocks), sum(b.hidden_s for b in blocks), sum(b.optimizer_s for b in blocks), params, pbytes,
            sum(sum(b.deferred.values()) for b in blocks), sum(b.saved_bytes for b in blocks),
            max((b.transient_bytes for b in blocks), default=0), sum(1 for b in blocks if b.params),
            max((b.param_bytes for b in blocks), default=0), sum(b.expert_params for b in blocks),
            sum(b.expert_param_bytes for b in blocks)))
    first = layers[0] if layers else prologue
    return Layout(chunks, tuple(loads), first.boundary_bytes if first is not None else 0)


def step_time(parallel: Parallel, lay: Layout, topology: CollectiveTimer, runtime: Runtime) -> StepTime:
    """The step time of ``parallel`` with its blocks placed as ``lay``, on ``topology`` under ``runtime``."""
    p = parallel
    m, v = p.microbatches, p.interleave
    p2p = _p2p_seconds(lay.boundary_bytes, p, topology, runtime)
    p2p_t = p2p * 2 * v if p.pp > 1 else 0.0
    gathers = [_param_gathers(lay, d, p, topology, runtime) for d in lay.devices] if p.zero >= 3 else None
    extra = [p2p_t + gathers[i][0] for i in range(len(lay.devices))] if gathers else [p2p_t] * len(lay.devices)
    times = [fb + x for fb, x in zip(lay.fb, extra)]
    slowest = max(times)
    crit = times.index(slowest)
    total = m * slowest + (sum(times) - slowest) / v          # pipeline.pipeline_time, inlined for the search
    breakdown = {k: m * x for k, x in lay.devices[crit].terms.items()}
    breakdown["p2p"] = m * p2p_t
    breakdown["param_gather"] = m * (gathers[crit][0] if gathers else 0.0)
    breakdown["bubble"] = total - m * slowest
    dp_total, dp_exposed, reduce_name = _grad_reduction(lay, p, topology, runtime)
    breakdown["dp_comm"] = dp_exposed
    shard = p.dp * p.cp if p.zero >= 1 else 1
    breakdown["optimizer"] = lay.optimizer_s / shard
    total += dp_exposed + breakdown["optimizer"]
    hidden = {"dp_comm": max(0.0, dp_total - dp_exposed),
              "cp_comm": m * lay.devices[crit].hidden_s,
              "param_gather": m * (gathers[crit][1] if gathers else 0.0)}
    notes = []
    if dp_total > 0:
        notes.append(f"data-parallel gradient {reduce_name} {dp_total * 1e3:.1f} ms per step, "
                     f"{dp_exposed * 1e3:.1f} ms exposed ("
                     + ("overlapped with the backward" if runtime.overlap_grad_reduce else "after the backward")
                     + ")")
    return StepTime(total, breakdown, lay, extra, hidden, {"dp_reduction": dp_total, "p2p_each": p2p}, notes,
                    [g[0] for g in gathers] if gathers else [0.0] * len(lay.devices))


def _terms(blocks: list[BlockCost]) -> dict[str, float]:
    """Per-microbatch compute, recomputation and exposed collectives by axis, summed over blocks."""
    out = {"compute": 0.0, "recompute": 0.0, "tp_comm": 0.0, "cp_comm": 0.0, "ep_comm": 0.0}
    for b in blocks:
        comm = {"tp": 0.0, "cp": 0.0, "ep": 0.0}
        for use in b.collectives:
            if use.phase in ("forward", "recompute", "backward"):
                comm[use.axis if use.axis in comm else "tp"] += use.exposed_s
        rec = b.times.get("recompute", 0.0)
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


def _grad_reduction(lay: Layout, p: Parallel, topology: CollectiveTimer,
                    runtime: Runtime) -> tuple[float, float, str]:
    """The slowest stage's gradient reduction over its data- (and context-) parallel group, and the
    part of it the step waits for. Stage ``s`` finishes its last backward earlier than stage 0 by
    the drain through stages ``0..s-1``, which its reduction may use. Expert weights are reduced
    over their own replicas (the ``edp`` group, ``dp x cp / ep``), the rest over ``dp x cp``."""
    group, stride = p.axis("dp_cp")
    egroup, estride = p.axis("edp")
    if group == 1 or p.zero >= 3:
        return 0.0, 0.0, "all-reduce"
    name = "reduce-scatter + all-gather" if p.zero >= 1 else "all-reduce"
    key = ("dp", group, stride, egroup, estride, p.zero >= 1)
    hit = lay.cache.get(key)
    if hit is not None:
        return hit[0], hit[1], name
    slowest, exposed = 0.0, 0.0
    drain = 0.0
    for d in lay.devices:
        t = sum(topology.seconds(op, nbytes, members, apart)
                for op, nbytes, members, apart in _dp_collectives(d, p, runtime)
                if not (op is Op.ALL_GATHER and runtime.overlap_param_gather))
        slowest = max(slowest, t)
        if runtime.overlap_grad_reduce:
            n = max(1, d.param_blocks)
            window = d.backward_s * (n - 1) / n
            e = max(t - window, t / n)
        else:
            e = t
        exposed = max(exposed, e - drain)
        drain += d.backward_s / p.interleave
    lay.cache[key] = (slowest, max(0.0, exposed))
    return slowest, max(0.0, exposed), name


def grad_reduction_rows(lay: Layout, p: Parallel, topology: CollectiveTimer,
                        runtime: Runtime) -> list[dict[str, Any]]:
    """The once-per-step data-parallel collectives of the device whose reduction takes longest, one
    row per kind: ``op``, ``purpose``, ``group_size``, ``comm_bytes`` (what one device sends, ring
    algorithms: all-reduce 2(n-1)/n x size, reduce-scatter and all-gather (n-1)/n x size) and
    ``seconds``. Under ZeRO 1-2 the gradients are reduce-scattered (in the runtime's reduction dtype)
    and the updated parameters all-gathered (in their own dtype): two rows, so neither hides in the
    other; with ``overlap_param_gather`` the gather runs under the next step's forward (hidden)."""
    group, _ = p.axis("dp_cp")
    if group == 1 or p.zero >= 3:
        return []
    best: list[dict[str, Any]] = []
    for d in lay.devices:
        rows: dict[str, dict[str, Any]] = {}
        for op, n, members, apart in _dp_collectives(d, p, runtime):
            share = (2 if op is Op.ALL_REDUCE else 1) * (members - 1) * n // members
            row = rows.setdefault(op.value, {"op": op.value, "group_size": group, "comm_bytes": 0, "seconds": 0.0})
            row["comm_bytes"] += int(share)
            row["seconds"] += topology.seconds(op, float(n), members, apart)
        if sum(r["seconds"] for r in rows.values()) > sum(r["seconds"] for r in best):
            best = list(rows.values())
    return best


def _dp_collectives(d: DeviceLoad, p: Parallel, runtime: Runtime) -> list[tuple[Op, int, int, int]]:
    """``(op, bytes, members, stride)`` of each once-per-step data-parallel collective of device
    ``d``: its dense parameters over ``dp x cp``, its experts' over ``edp``; the gradients (in the
    runtime's reduction dtype, plus partial sums deferred to this reduction) all-reduced, or under
    ZeRO 1-2 reduce-scattered with the parameters (their own dtype) all-gathered back."""
    group, stride = p.axis("dp_cp")
    egroup, estride = p.axis("edp")
    size = runtime.grad_reduce_dtype.nbytes(1)
    out: list[tuple[Op, int, int, int]] = []
    for params, pbytes, extra, members, apart in (
            (d.params - d.expert_params, d.param_bytes - d.expert_param_bytes, d.deferred_bytes, group, stride),
            (d.expert_params, d.expert_param_bytes, 0, egroup, estride)):
        if members == 1 or not params:
            continue
        grads = params * size + extra
        if p.zero >= 1:
            out += [(Op.REDUCE_SCATTER, grads, members, apart), (Op.ALL_GATHER, pbytes, members, apart)]
        else:
            out.append((Op.ALL_REDUCE, grads, members, apart))
    return out


def zero3_rows(load: DeviceLoad, p: Parallel, topology: CollectiveTimer, runtime: Runtime) -> list[dict[str, Any]]:
    """ZeRO-3/FSDP's per-microbatch collectives on ``load``'s device, one row per kind (as
    :func:`grad_reduction_rows`): every block's parameters all-gathered before its forward and again
    before its backward, its gradients reduce-scattered after (:func:`_param_gathers` times them)."""
    if p.zero < 3:
        return []
    group, stride = p.axis("dp_cp")
    egroup, estride = p.axis("edp")
    grad = runtime.grad_reduce_dtype.nbytes(1)
    rows = {op: {"op": op.value, "group_size": group, "per_microbatch": 0, "comm_bytes": 0, "seconds": 0.0}
            for op in (Op.ALL_GATHER, Op.REDUCE_SCATTER)}
    for b in load.blocks:
        for pbytes, params, members, apart in (
                (b.param_bytes - b.expert_param_bytes, b.params - b.expert_params, group, stride),
                (b.expert_param_bytes, b.expert_params, egroup, estride)):
            if not params or members == 1:
                continue
            for op, n, times in ((Op.ALL_GATHER, pbytes, 2), (Op.REDUCE_SCATTER, params * grad, 1)):
                r = rows[op]
                r["per_microbatch"] += times
                r["comm_bytes"] += times * (members - 1) * int(n) // members
                r["seconds"] += times * topology.seconds(op, float(n), members, apart)
    return [r for r in rows.values() if r["per_microbatch"]]


def _param_gathers(lay: Layout, load: DeviceLoad, p: Parallel, topology: CollectiveTimer,
                   runtime: Runtime) -> tuple[float, float]:
    """ZeRO-3/FSDP per microbatch: each block's parameters all-gathered before its forward and again
    before its backward, its gradients reduce-scattered after; ``(exposed, hidden)`` seconds. With
    prefetch a block's gather runs during the previous block's compute."""
    if p.zero < 3:
        return 0.0, 0.0
    group, stride = p.axis("dp_cp")
    egroup, estride = p.axis("edp")
    key = ("zero3", load.index, group, stride, egroup, estride)
    hit = lay.cache.get(key)
    if hit is not None:
        return hit
    exposed = hidden = 0.0
    prev_f = prev_b = 0.0
    grad = runtime.grad_reduce_dtype.nbytes(1)
    for i, b in enumerate(load.blocks):
        ag = rs = 0.0
        for pbytes, params, members, apart in (
                (b.param_bytes - b.expert_param_bytes, b.params - b.expert_params, group, stride),
                (b.expert_param_bytes, b.expert_params, egroup, estride)):
            if params and members > 1:
                ag += topology.seconds(Op.ALL_GATHER, float(pbytes), members, apart)
                rs += topology.seconds(Op.REDUCE_SCATTER, float(params * grad), members, apart)
        for t, window in ((ag, prev_f), (ag + rs, prev_b)):
            e = t if i == 0 or not runtime.overlap_param_gather else max(0.0, t - window)
            exposed += e
            hidden += t - e
        prev_f, prev_b = b.forward_s, b.backward_s
    lay.cache[key] = (exposed, hidden)
    return exposed, hidden


def dtype_bytes(dtype: DType | str) -> int:
    return (dtype if isinstance(dtype, DType) else DType.parse(dtype)).nbytes(1)


def as_dict(step: StepTime) -> dict[str, Any]:
    return {"total_s": step.total_s, "breakdown": dict(step.breakdown), "hidden": dict(step.hidden),
            "collectives": dict(step.collectives), "notes": list(step.notes)}
