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
from .pipeline import Stage, assign_stages, pipeline_time
from .runtime import Runtime
from .strategy import Parallel

__all__ = ["StepTime", "step_time", "device_chunks"]

#: Breakdown keys, in the order a report prints them.
TERMS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "p2p", "param_gather", "bubble", "dp_comm",
         "optimizer")


@dataclass(frozen=True)
class StepTime:
    total_s: float
    breakdown: dict[str, float]
    stages: list[Stage]
    chunks: list[list[int]]
    #: Communication time that compute hides (not in ``total_s``), by kind.
    hidden: dict[str, float] = field(default_factory=dict)
    #: Full durations of the once-per-step collectives (before overlap).
    collectives: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def exposed_comm_s(self) -> float:
        return sum(self.breakdown.get(k, 0.0) for k in ("tp_comm", "cp_comm", "ep_comm", "p2p", "param_gather",
                                                        "dp_comm"))


def device_chunks(layers: list[BlockCost], prologue: BlockCost | None, epilogue: BlockCost | None,
                  parallel: Parallel, runtime_split: str = "balanced") -> list[list[int]]:
    """Layer indices of each of the ``pp * interleave`` chunks (chunk ``c`` on device ``c % pp``),
    balanced by forward + backward time with the embedding on the first and the head on the last."""
    if runtime_split == "uniform" and len(layers) % (parallel.pp * parallel.interleave) == 0:
        per = len(layers) // (parallel.pp * parallel.interleave)
        return [list(range(c * per, (c + 1) * per)) for c in range(parallel.pp * parallel.interleave)]
    costs = [c.forward_s + c.backward_s for c in layers]
    if costs and prologue is not None:
        costs[0] += prologue.forward_s + prologue.backward_s
    if costs and epilogue is not None:
        costs[-1] += epilogue.forward_s + epilogue.backward_s
    return assign_stages(costs, parallel.pp, parallel.interleave)


def step_time(parallel: Parallel, layers: list[BlockCost], prologue: BlockCost | None, epilogue: BlockCost | None,
              topology: Topology, runtime: Runtime) -> StepTime:
    """The step time of ``parallel`` given each layer's cost (in model order) and the embedding and
    head blocks' costs, on ``topology`` under ``runtime``."""
    p = parallel
    chunks = device_chunks(layers, prologue, epilogue, p, runtime.stage_split)
    per_device: list[list[BlockCost]] = [[] for _ in range(p.pp)]
    for c, idx in enumerate(chunks):
        per_device[c % p.pp].extend(layers[i] for i in idx)
    if prologue is not None:
        per_device[0].insert(0, prologue)
    if epilogue is not None:
        per_device[(len(chunks) - 1) % p.pp].append(epilogue)
    p2p = _p2p_seconds(layers[0] if layers else prologue, p, topology, runtime)
    fsdp = [_param_gathers(blocks, p, topology, runtime) for blocks in per_device]
    stages = []
    terms: list[dict[str, float]] = []
    for s, blocks in enumerate(per_device):
        t = _terms(blocks)
        t["p2p"] = p2p * 2 * p.interleave if p.pp > 1 else 0.0
        t["param_gather"] = fsdp[s][0]
        terms.append(t)
        fwd = sum(b.forward_s for b in blocks)
        bwd = sum(b.backward_s for b in blocks)
        layer_ids = tuple(i for c, idx in enumerate(chunks) if c % p.pp == s for i in idx)
        stages.append(Stage(s, layer_ids, fwd, bwd, t["p2p"] + t["param_gather"]))
    total, bubble = pipeline_time(stages, p.microbatches, p.interleave)
    crit = max(range(len(stages)), key=lambda s: stages[s].time_s)
    breakdown = {k: p.microbatches * terms[crit].get(k, 0.0) for k in TERMS if k not in ("bubble", "dp_comm",
                                                                                      "optimizer")}
    breakdown["bubble"] = bubble
    dp_total, dp_exposed, reduce_name = _grad_reduction(per_device, stages, p, topology, runtime)
    breakdown["dp_comm"] = dp_exposed
    shard = p.dp * p.cp if p.zero >= 1 else 1
    breakdown["optimizer"] = max(sum(b.optimizer_s for b in blocks) for blocks in per_device) / shard
    total += dp_exposed + breakdown["optimizer"]
    hidden = {"dp_comm": max(0.0, max(dp_total) - dp_exposed) if dp_total else 0.0,
              "cp_comm": p.microbatches * sum(b.hidden_s for b in per_device[crit]),
              "param_gather": p.microbatches * fsdp[crit][1]}
    notes = []
    if dp_total and max(dp_total) > 0:
        notes.append(f"data-parallel gradient {reduce_name} {max(dp_total) * 1e3:.1f} ms per step, "
                     f"{dp_exposed * 1e3:.1f} ms exposed ("
                     + ("overlapped with the backward" if runtime.overlap_grad_reduce else "after the backward")
                     + ")")
    return StepTime(total, breakdown, stages, chunks, hidden,
                    {"dp_reduction": max(dp_total) if dp_total else 0.0, "p2p_each": p2p}, notes)


def _terms(blocks: list[BlockCost]) -> dict[str, float]:
    """Per-microbatch compute, recomputation and exposed collectives by axis, summed over blocks."""
    out = {"compute": 0.0, "recompute": 0.0, "tp_comm": 0.0, "cp_comm": 0.0, "ep_comm": 0.0}
    for b in blocks:
        comm = {"tp": 0.0, "cp": 0.0, "ep": 0.0}
        for use in b.collectives:
            if use.phase in ("forward", "recompute", "backward"):
                key = use.axis if use.axis in comm else "tp"
                comm[key] += use.exposed_s
        rec = b.times.get("recompute", 0.0)
        out["recompute"] += rec
        out["tp_comm"] += comm["tp"]
        out["cp_comm"] += comm["cp"]
        out["ep_comm"] += comm["ep"]
        out["compute"] += b.forward_s + b.backward_s - rec - sum(comm.values())
    return out


def _p2p_seconds(block: BlockCost | None, p: Parallel, topology: Topology, runtime: Runtime) -> float:
    """One stage-to-stage transfer of a microbatch's activation (or its gradient). With Megatron's
    scatter/gather optimization the tensor crosses the network split over the tensor-parallel ranks'
    links and is all-gathered over the scale-up link on arrival (sequence parallelism splits it anyway)."""
    if p.pp == 1 or block is None or not block.boundary_bytes:
        return 0.0
    _, stride = p.axis("pp")
    nbytes = float(block.boundary_bytes)
    split = p.tp > 1 and runtime.pipeline_scatter_gather and not p.sequence_parallel
    t = topology.time(Op.SEND, nbytes / p.tp if split else nbytes, 2, stride).seconds
    if split:
        t += topology.time(Op.ALL_GATHER, nbytes, p.tp, 1).seconds
    return t


def _grad_bytes(blocks: list[BlockCost], runtime: Runtime) -> float:
    size = runtime.grad_reduce_dtype.nbytes(1)
    return unique_params(blocks)[0] * size + sum(sum(b.deferred.values()) for b in blocks)


def _grad_reduction(per_device: list[list[BlockCost]], stages: list[Stage], p: Parallel, topology: Topology,
                    runtime: Runtime) -> tuple[list[float], float, str]:
    """Each stage's gradient reduction over its data- (and context-) parallel group, and the part of
    the slowest that the step waits for. Stage ``s`` finishes its last backward earlier than stage 0
    by the drain through stages ``0..s-1``, which its reduction may use."""
    group, stride = p.axis("dp_cp")
    if group == 1 or p.zero >= 3:
        return [0.0] * len(per_device), 0.0, "all-reduce"
    name = "reduce-scatter + all-gather" if p.zero >= 1 else "all-reduce"
    totals, exposed = [], 0.0
    drain = 0.0
    for s, blocks in enumerate(per_device):
        nbytes = _grad_bytes(blocks, runtime)
        if p.zero >= 1:
            t = topology.time(Op.REDUCE_SCATTER, nbytes, group, stride).seconds
            pbytes = unique_params(blocks)[1]
            gather = topology.time(Op.ALL_GATHER, pbytes, group, stride).seconds
            t += 0.0 if runtime.overlap_param_gather else gather
        else:
            t = topology.time(Op.ALL_REDUCE, nbytes, group, stride).seconds
        totals.append(t)
        if runtime.overlap_grad_reduce:
            n = max(1, sum(1 for b in blocks if b.params))
            window = stages[s].backward_s * (n - 1) / n
            e = max(t - window, t / n)
        else:
            e = t
        exposed = max(exposed, e - drain)
        drain += stages[s].backward_s / p.interleave
    return totals, max(0.0, exposed), name


def _param_gathers(blocks: list[BlockCost], p: Parallel, topology: Topology, runtime: Runtime) -> tuple[float, float]:
    """ZeRO-3/FSDP per microbatch: each block's parameters all-gathered before its forward and again
    before its backward, its gradients reduce-scattered after; ``(exposed, hidden)`` seconds. With
    prefetch a block's gather runs during the previous block's compute."""
    if p.zero < 3:
        return 0.0, 0.0
    group, stride = p.axis("dp_cp")
    exposed = hidden = 0.0
    prev_f = prev_b = 0.0
    for i, b in enumerate(blocks):
        ag = topology.time(Op.ALL_GATHER, float(b.param_bytes), group, stride).seconds
        rs = topology.time(Op.REDUCE_SCATTER, float(b.params * runtime.grad_reduce_dtype.nbytes(1)),
                           group, stride).seconds
        for t, window in ((ag, prev_f), (ag + rs, prev_b)):
            e = t if i == 0 or not runtime.overlap_param_gather else max(0.0, t - window)
            exposed += e
            hidden += t - e
        prev_f, prev_b = b.forward_s, b.backward_s
    return exposed, hidden


def dtype_bytes(dtype: DType | str) -> int:
    return (dtype if isinstance(dtype, DType) else DType.parse(dtype)).nbytes(1)


def as_dict(step: StepTime) -> dict[str, Any]:
    return {"total_s": step.total_s, "breakdown": dict(step.breakdown), "hidden": dict(step.hidden),
            "collectives": dict(step.collectives), "notes": list(step.notes)}
