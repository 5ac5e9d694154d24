"""Search over the strategies for a device count: enumerate, prune what cannot fit, evaluate the rest
from cached block costs, keep the fastest that fits and say why the others lost.

Why enumeration: the space is a product of small divisor sets (tensor parallelism up to the scale-up
domain, pipeline depths dividing the layers, microbatches dividing the per-replica batch), a few
thousand to a few hundred thousand points, and each evaluation is arithmetic over block costs
(:mod:`.step`, :mod:`.memory`), so exhaustive enumeration is exact and fast. The only expensive step,
costing a block under a sharding, happens once per (tensor/context parallelism, sequence parallelism,
recomputation, microbatch), of which there are a few dozen. Pruning before any costing: a strategy
whose parameters, gradients and optimizer states alone overflow a device is dropped.

Choices the search does not explore, stated: what the runtime does not offer (sequence parallelism,
ZeRO stages, recomputation modes, context or expert parallelism: :class:`.Runtime`, e.g. Megatron-LM
of 2021 had none of the first, only full recomputation, and none of the last two); sequence
parallelism is always on with tensor parallelism where offered (it halves activation memory at the
same communication volume, Korthikanti et al. 2022);
context parallelism is tried from 8k-token sequences up. Expert parallelism is tried on mixtures of
experts only (never on a dense model): every ``ep`` that divides both the data-parallel degree and
the expert count, without context parallelism (not modelled together).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ...errors import PlanError
from .assemble import loss_reason, overflow_text
from .memory import OPTIMIZER_STATES
from .plan import RunnerUp
from .planner import Evaluation, Planner
from .simulated import best_by_schedule, refined
from .strategy import RECOMPUTE, Parallel

__all__ = ["search", "SearchResult", "candidates"]

_TP_MAX = 8
_MICROBATCHES = (1, 2, 4, 8, 16)
#: Virtual pipeline stages tried per device. Chunks need not hold equal layer counts where the
#: runtime balances them by time (Megatron-Core's ``--pipeline-model-parallel-layout``, as ``--fix
#: interleave`` accepts); a uniform runtime (Megatron-LM v2) needs ``layers % (pp x v) == 0``.
_INTERLEAVE = (2, 3, 4, 5, 6, 7, 8)


@dataclass
class SearchResult:
    best: Evaluation
    runners_up: list[RunnerUp]
    considered: int = 0
    pruned_memory: int = 0
    evaluated: int = 0
    costing_s: float = 0.0
    evaluating_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    simulated: int = 0
    ranking_s: float = 0.0

    @property
    def candidates_per_s(self) -> float:
        return self.evaluated / self.evaluating_s if self.evaluating_s > 0 else float("inf")

    def stats(self) -> dict[str, Any]:
        return {"considered": self.considered, "pruned_memory": self.pruned_memory, "evaluated": self.evaluated,
                "costing_s": self.costing_s, "evaluating_s": self.evaluating_s,
                "candidates_per_s": self.candidates_per_s, "simulated": self.simulated, "ranking_s": self.ranking_s}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidates(planner: Planner, fixed: dict[str, Any]) -> Iterator[Parallel]:
    """Every strategy for ``planner.devices`` that respects ``fixed`` (any ``Parallel`` field)."""
    n, batch, layers = planner.devices, planner.global_batch, len(planner.blocks.layers)
    domain = planner.topology.scale_up_domain
    rt = planner.runtime
    uneven = rt.stage_split != "uniform"      # chunks of unequal layer counts, balanced by time

    def allowed(name: str, values: list[Any]) -> list[Any]:
        return [fixed[name]] if name in fixed else values

    # tensor parallelism splits whole heads and whole KV heads (query groups): Megatron asserts both
    for tp in allowed("tp", [d for d in _divisors(n) if d <= min(_TP_MAX, domain) and planner.heads_split(d) is None]):
        if tp == 1 and fixed.get("sequence_parallel"):
            continue                                  # sequence parallelism asked for: tp=1 has none
        cps = [1] + ([c for c in (2, 4, 8) if planner.seq >= 8192 * c // 2]
                     if planner.seq >= 8192 and rt.context_parallel else [])
        for cp in allowed("cp", cps):
            if n % (tp * cp) or planner.seq % (2 * cp if cp > 1 else 1):
                continue
            for pp in allowed("pp", [d for d in _divisors(n // (tp * cp)) if d <= layers]):
                if n % (tp * cp * pp):
                    continue
                dp = n // (tp * cp * pp)
                if "dp" in fixed and fixed["dp"] != dp or batch % dp:
                    continue
                eps = [e for e in _divisors(dp) if planner.experts % e == 0 and (e == 1 or cp == 1)] \
                    if planner.experts and rt.expert_parallel else [1]
                for mb in allowed("microbatch", [m for m in _MICROBATCHES if (batch // dp) % m == 0]):
                    if (batch // dp) % mb:
                        continue
                    m = batch // (dp * mb)
                    vs = [1] + ([v for v in _INTERLEAVE if pp * v <= layers and (uneven or layers % (pp * v) == 0)]
                                if pp > 1 and m % pp == 0 else [])
                    for v in allowed("interleave", vs):
                        sps = [tp > 1 and rt.sequence_parallel]
                        for sp in allowed("sequence_parallel", sps):
                            if planner.experts and rt.moe_tp_refusal(tp, sp):
                                continue
                            for rec in allowed("recompute", [r for r in RECOMPUTE if r in rt.recompute_modes]):
                                zeros = [z for z in (0, 1, 2, 3) if z in rt.zero_stages] if dp * cp > 1 else [0]
                                for zero in allowed("zero", zeros):
                                    for ep in allowed("ep", eps):
                                        try:
                                            yield Parallel(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, interleave=v,
                                                           microbatch=mb, global_batch=batch,
                                                           sequence_parallel=sp, recompute=rec, zero=zero)
                                        except PlanError:
                                            continue


def _fixed_reason(planner: Planner, fixed: dict[str, Any]) -> str:
    """Why the fixed values leave no strategy, when one of them alone is the cause: a size that does
    not divide the devices, more stages than layers, a microbatch no replica's batch divides."""
    n, batch, layers = planner.devices, planner.global_batch, len(planner.blocks.layers)
    size = {k: int(fixed[k]) for k in ("tp", "cp", "pp", "dp", "microbatch", "interleave") if k in fixed}
    pp, v = size.get("pp", 1), size.get("interleave", 1)
    if pp * v > layers:
        what = f"pp={pp} x interleave={v} = {pp * v} pipeline chunks" if v > 1 else f"pp={pp} pipeline stages"
        return f": {what} are more than the model's {layers} layers (each holds at least one)"
    for k in ("tp", "cp", "pp", "dp"):
        if k in size and n % size[k]:
            return f": {k}={size[k]} does not divide the {n} devices (tp x pp x dp x cp = devices)"
    mesh = [k for k in ("tp", "cp", "pp", "dp") if k in size]
    total = 1
    for k in mesh:
        total *= size[k]
    if len(mesh) > 1 and n % total:
        return f": {' x '.join(f'{k}={size[k]}' for k in mesh)} = {total} does not divide the {n} devices"
    if "dp" in size and batch % size["dp"]:
        return f": dp={size['dp']} does not divide the global batch of {batch} sequences"
    if "cp" in size and size["cp"] > 1 and planner.seq % (2 * size["cp"]):
        return (f": seq {planner.seq} does not split into 2 x cp = {2 * size['cp']} chunks (load-balanced causal "
                "context parallelism)")
    if "microbatch" in size:
        mb = size["microbatch"]
        dps = sorted({p.dp for p in candidates(planner, {k: x for k, x in fixed.items() if k != "microbatch"})})
        if dps and all((batch // dp) % mb for dp in dps):
            shares = ", ".join(str(batch // dp) for dp in dps)
            return (f": microbatch={mb} divides no data-parallel replica's batch (global batch {batch} / dp = "
                    f"{shares} sequences for dp {', '.join(map(str, dps))})")
    return _ep_reason(planner, fixed)


def _ep_reason(planner: Planner, fixed: dict[str, Any]) -> str:
    """Why a fixed ``ep`` left no strategy, when it is the cause: experts are split over data-parallel
    ranks, so ``ep`` must divide ``dp = devices / (tp * pp * cp)`` of some layout the other constraints allow."""
    if "ep" not in fixed:
        return ""
    ep = int(fixed["ep"])
    others = {k: v for k, v in fixed.items() if k != "ep"}
    dps = sorted({p.dp for p in candidates(planner, others)})
    if not dps or any(dp % ep == 0 for dp in dps):
        return ""
    n = planner.devices
    if len(dps) == 1 and all(k in fixed for k in ("tp", "pp")):
        tp, pp = int(fixed["tp"]), int(fixed["pp"])
        cp = n // (tp * pp * dps[0])
        return (f": ep={ep} must divide the data-parallel size dp = devices/(tp*pp*cp) = {n}/({tp}*{pp}*{cp}) = "
                f"{dps[0]} (experts are split over data-parallel ranks)")
    return (f": ep={ep} must divide the data-parallel size dp = devices/(tp*pp*cp), and no layout the other "
            f"constraints allow has such a dp (they allow dp {', '.join(map(str, dps))})")


def static_memory(planner: Planner, p: Parallel) -> float:
    """A lower bound on a device's bytes before any costing: its share of the parameters with their
    gradients and optimizer states under ``p.zero`` (activations only add). Experts split over
    ``ep`` as well, and shard their states over their ``dp x cp / ep`` replicas."""
    experts = planner.expert_params
    pbytes = planner.narrowest_param_bytes
    grad = planner.runtime.grad_reduce_dtype.nbytes(1)
    fp32_only = planner.runtime.fp32_weights and pbytes < 4      # fp32 weights, no second master copy
    master = 4 if planner.runtime.master_weights and pbytes < 4 and not fp32_only else 0
    states = master + 4 * OPTIMIZER_STATES.get(planner.optimizer, 2)
    pbytes = 4 if fp32_only else pbytes
    total = 0.0
    for params, shard in (((planner.param_count - experts) / (p.tp * p.pp), p.dp * p.cp),
                          (experts / (p.tp * p.pp * p.ep), p.dp * p.cp // p.ep)):
        w = pbytes / (shard if p.zero >= 3 else 1)
        g = grad / (shard if p.zero >= 2 else 1)
        s = states / (shard if p.zero >= 1 else 1)
        total += params * (w + g + s)
    return total


def search(planner: Planner, fixed: dict[str, Any] | None = None, *, top: int = 5) -> SearchResult:
    """The fastest strategy that fits, and up to ``top`` runners-up (the best of each other mesh
    shape, plus the fastest that did not fit) with why each lost."""
    fixed = dict(fixed or {})
    planner.require_layers()
    refused = planner.runtime.unsupported(fixed)
    if refused:
        raise PlanError(f"{refused}: fix another value, or plan with another runtime (--runtime)")
    if "ep" in fixed:
        planner.check_experts(int(fixed["ep"]), int(fixed.get("cp", 1)))
    if planner.experts and "tp" in fixed and fixed.get("sequence_parallel") is False:
        refused = planner.runtime.moe_tp_refusal(int(fixed["tp"]), False)
        if refused:
            raise PlanError(f"{refused}: turn sequence parallelism on, or fix tp=1")
    capacity = planner.capacity
    cands = list(candidates(planner, fixed))
    if not cands:
        raise PlanError(f"no strategy for {planner.devices} devices satisfies {fixed or 'the constraints'} "
                        f"(global batch {planner.global_batch}, {len(planner.blocks.layers)} layers, "
                        f"seq {planner.seq}){_fixed_reason(planner, fixed)}")
    heads = planner.heads_split(int(fixed["tp"])) if "tp" in fixed else None
    if heads is not None:                            # a fixed tp skips the candidates' filter: say why not
        raise PlanError(f"tp={fixed['tp']}: {heads}")
    kept = [p for p in cands if static_memory(planner, p) <= capacity]
    result_pruned = len(cands) - len(kept)
    if not kept:
        p = min(cands, key=lambda c: static_memory(planner, c))
        raise PlanError(f"no strategy fits: even {p.describe()} needs {static_memory(planner, p) / 1e9:.1f} GB of "
                        f"parameters, gradients and optimizer states per device ({capacity / 1e9:.1f} GB)")
    t0 = time.perf_counter()
    for p in kept:                                   # cost each distinct block sharding once
        planner.costs(p)
    costing = time.perf_counter() - t0
    t0 = time.perf_counter()
    evals = [planner.evaluate(p) for p in kept]
    evaluating = time.perf_counter() - t0
    fitting = [e for e in evals if e.fits]
    if not fitting:
        closest = min(evals, key=lambda e: e.fullest.total)
        raise PlanError("no strategy fits in memory; the closest: " + closest.parallel.describe() + ": "
                        + overflow_text(closest))
    fitting.sort(key=lambda e: e.step.total_s)
    t0 = time.perf_counter()
    best, simulated_n, capped = best_by_schedule(planner, fitting)
    best = refined(planner, best)                    # its interleaved split refined on the schedule
    # the best of each other mesh shape by the closed form, each refined as the pick is, so that a
    # runner-up's step and memory are what planning it with its values fixed gives; one that its
    # refinement makes faster than the pick takes the pick's place
    shown: list[Evaluation] = []
    seen = {_shape(best.parallel)}
    for e in fitting:
        if len(shown) >= top:
            break
        if _shape(e.parallel) not in seen:
            seen.add(_shape(e.parallel))
            shown.append(refined(planner, e))
    i = min(range(len(shown)), key=lambda j: shown[j].step.total_s, default=None)
    if i is not None and shown[i].step.total_s < best.step.total_s:
        shown[i], best = best, shown[i]
    runners = [RunnerUp(e.parallel, e.step.total_s, loss_reason(best, e), e.fullest.total)
               for e in sorted(shown, key=lambda e: e.step.total_s)]   # by the simulated step the table prints
    faster = [e for e in evals if not e.fits and e.step.total_s < best.step.total_s]
    if faster:
        e = refined(planner, min(faster, key=lambda x: x.step.total_s))
        runners.append(RunnerUp(e.parallel, e.step.total_s, loss_reason(best, e), e.fullest.total))
    ranking = time.perf_counter() - t0
    notes = [_ranking_note(len(fitting), simulated_n, capped)]
    return SearchResult(best, runners, len(cands), result_pruned, len(evals), costing, evaluating, notes, simulated_n,
                        ranking)


def _ranking_note(fitting: int, simulated_n: int, capped: bool) -> str:
    if fitting == 1:
        return "one strategy satisfies the constraints and fits: nothing to rank"
    if capped:
        return (f"ranked by the simulated schedule: stopped after {simulated_n} strategies simulated (the cap); the "
                "best may be up to the closed form's error from the true best")
    if simulated_n == 0:
        return (f"ranked by the simulated schedule: for the {fitting} strategies that fit the closed form is the "
                "schedule's step (one stage, or 1F1B with the slowest stage last) or a bound that rules them out")
    return f"ranked by the simulated schedule: {simulated_n} strategies simulated, the rest bounded out"


def _shape(p: Parallel) -> tuple[int, ...]:
    return (p.tp, p.pp, p.dp, p.cp, p.ep)
