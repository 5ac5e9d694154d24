"""Data-parallel communication of a training step: the gradient reduction over the data- (and
context-) parallel ranks, and ZeRO-3/FSDP's per-microbatch parameter gathers.

Why the number of gradient reductions depends on the ZeRO stage: with gradient accumulation over
``m`` microbatches, a runtime that keeps a full gradient buffer (ZeRO 0-1) accumulates into it and
reduces once, after the last microbatch's backward; one that keeps only its shard of the gradients
(ZeRO-2, and ZeRO-3) has nowhere to accumulate the other shards, so it reduce-scatters each
microbatch's gradients as that backward produces them, ``m`` times a step:

* Megatron-Core (core 0.20.0, ``megatron/core/distributed/param_and_grad_buffer.py``,
  ``register_grad_ready``): the DDP / distributed-optimizer (ZeRO-1) bucket group starts its
  reduction only when ``is_last_microbatch`` (``no_sync`` clears it for the other microbatches);
  Megatron FSDP (``megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py``,
  ``grad_reduce_every_bprop``) reduces after every backward under ``optim_grads`` (ZeRO-2) and
  ``optim_grads_params`` (ZeRO-3), the shardings the Megatron emitter asks for.
* DeepSpeed 0.16.5 (``deepspeed/runtime/zero/stage_1_and_2.py``,
  ``reduce_ready_partitions_and_remove_grads``): the backward hooks reduce every micro-step when the
  gradients are partitioned (stage 2), only at the accumulation boundary under stage 1; and
  ``DeepSpeedEngine.no_sync`` asserts it is not used with stage 2 or 3 (``deepspeed/runtime/engine.py``).
* PyTorch FSDP2 (``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``, ``post_backward``,
  read at pytorch 0257dd1c): every backward reduce-scatters unless ``set_requires_gradient_sync(False)``,
  which skips it by keeping the unsharded gradient, i.e. without sharding the gradients meanwhile.

Each microbatch's reduce-scatter runs under the compute that follows it (with the runtime's
``overlap_grad_reduce``); the last one's exposure is modelled as for a once-per-step reduction, and
whatever the device's compute cannot cover of the earlier ones is exposed as well.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...ir import Op
from .runtime import Runtime
from .strategy import Parallel

if TYPE_CHECKING:
    from .step import CollectiveTimer, DeviceLoad, Layout

__all__ = ["grad_reduction", "grad_reduction_rows", "dp_collectives", "reductions_per_step", "zero3_rows",
           "param_gathers"]


def reductions_per_step(p: Parallel) -> int:
    """How many times a step reduces the gradients over the data-parallel ranks: every microbatch
    when they are sharded between reductions (ZeRO-2; ZeRO-3's are in :func:`param_gathers`),
    once otherwise (see the module doc)."""
    return p.microbatches if p.zero == 2 else 1


def _per_step(op: Op, p: Parallel) -> int:
    return 1 if op is Op.ALL_GATHER else reductions_per_step(p)


def grad_reduction(lay: Layout, p: Parallel, topology: CollectiveTimer,
                   runtime: Runtime) -> tuple[float, float, str]:
    """``(seconds, exposed seconds, what)`` of the slowest stage's gradient reduction per step over
    its data- (and context-) parallel group. Stage ``s`` finishes its last backward earlier than
    stage 0 by the drain through stages ``0..s-1``, which its last reduction may use. Expert weights
    are reduced over their own replicas (the ``edp`` group, ``dp x cp / ep``), the rest over ``dp x cp``.

    Overlapped, the last reduction hides behind all but the last parameter block's backward (its
    last bucket waits for it); under ZeRO-2 the ``m - 1`` earlier reduce-scatters run under the
    device's compute of the microbatches after them, and what that compute (``m - 1`` forward and
    backward passes plus the last backward's window) cannot cover is exposed too."""
    group, stride = p.axis("dp_cp")
    egroup, estride = p.axis("edp")
    if group == 1 or p.zero >= 3:
        return 0.0, 0.0, "all-reduce"
    m = reductions_per_step(p)
    name = "all-reduce" if p.zero == 0 else "reduce-scatter + all-gather" if m == 1 else (
        f"reduce-scatter every microbatch ({m} per step: ZeRO-2 keeps only its shard of the gradients) "
        "+ all-gather")
    key = ("dp", group, stride, egroup, estride, p.zero, m)
    hit = lay.cache.get(key)
    if hit is not None:
        return hit[0], hit[1], name
    slowest, exposed = 0.0, 0.0
    drain = 0.0
    for d in lay.devices:
        each = once = 0.0                       # per microbatch (ZeRO-2's reduce-scatter), once per step
        for op, nbytes, members, apart in dp_collectives(d, p, runtime):
            if op is Op.ALL_GATHER and runtime.overlap_param_gather:
                continue
            t = topology.seconds(op, nbytes, members, apart)
            if _per_step(op, p) > 1:
                each += t
            else:
                once += t
        total = (m - 1) * each + each + once
        last = each + once                      # what follows the last microbatch's backward
        slowest = max(slowest, total)
        if runtime.overlap_grad_reduce:
            n = max(1, d.param_blocks)
            window = d.backward_s * (n - 1) / n
            backlog = total - (m - 1) * (d.forward_s + d.backward_s) - window
            inline, tail = 0.0, max(last - window, last / n, backlog)
        else:                                   # each reduction waits for its backward and blocks the next
            inline, tail = (m - 1) * each, last
        exposed = max(exposed, inline + tail - drain, inline)
        drain += d.backward_s / p.interleave
    lay.cache[key] = (slowest, max(0.0, exposed))
    return slowest, max(0.0, exposed), name


def grad_reduction_rows(lay: Layout, p: Parallel, topology: CollectiveTimer,
                        runtime: Runtime) -> list[dict[str, Any]]:
    """The data-parallel gradient-reduction collectives of the device whose reduction takes longest,
    one row per kind: ``op``, ``group_size``, ``per_step`` (how many a step runs: ZeRO-2's
    reduce-scatter once per microbatch), ``comm_bytes`` per step (what one device sends, ring
    algorithms: all-reduce 2(n-1)/n x size, reduce-scatter and all-gather (n-1)/n x size) and
    ``seconds`` per step. Under ZeRO 1-2 the gradients are reduce-scattered (in the runtime's
    reduction dtype) and the updated parameters all-gathered once (in their own dtype): two rows, so
    neither hides in the other; with ``overlap_param_gather`` the gather runs under the next step's
    forward (hidden). The experts' reduction (over ``edp``, ``dp / ep`` replicas) is a row of its
    own, ``expert`` true: in one row it was labelled with the dense group while its bytes were the
    experts' group's."""
    group, _ = p.axis("dp_cp")
    if group == 1 or p.zero >= 3:
        return []
    best: list[dict[str, Any]] = []
    for d in lay.devices:
        rows: dict[tuple[str, bool], dict[str, Any]] = {}
        for expert, (op, n, members, apart) in _dp_parts(d, p, runtime):
            expert = expert and p.ep > 1          # without ep the experts reduce over dp like the rest
            times = _per_step(op, p)
            share = (2 if op is Op.ALL_REDUCE else 1) * (members - 1) * n // members
            row = rows.setdefault((op.value, expert), {"op": op.value, "group_size": members, "per_step": times,
                                                       "comm_bytes": 0, "seconds": 0.0, "expert": expert})
            row["comm_bytes"] += times * int(share)
            row["seconds"] += times * topology.seconds(op, float(n), members, apart)
        if sum(r["seconds"] for r in rows.values()) > sum(r["seconds"] for r in best):
            best = list(rows.values())
    return best


def dp_collectives(d: DeviceLoad, p: Parallel, runtime: Runtime) -> list[tuple[Op, int, int, int]]:
    """``(op, bytes, members, stride)`` of each data-parallel gradient collective of device ``d``
    (once each; :func:`reductions_per_step` says how often the reduction runs): its dense parameters
    over ``dp x cp``, its experts' over ``edp``; the gradients (in the runtime's reduction dtype, plus
    partial sums deferred to this reduction) all-reduced, or under ZeRO 1-2 reduce-scattered with the
    parameters (their own dtype) all-gathered back after the optimizer."""
    return [c for _, c in _dp_parts(d, p, runtime)]


def _dp_parts(d: DeviceLoad, p: Parallel, runtime: Runtime) -> list[tuple[bool, tuple[Op, int, int, int]]]:
    """:func:`dp_collectives`, each marked whether it reduces the experts (over ``edp``)."""
    group, stride = p.axis("dp_cp")
    egroup, estride = p.axis("edp")
    size = runtime.grad_reduce_dtype.nbytes(1)
    out: list[tuple[bool, tuple[Op, int, int, int]]] = []
    for expert, params, pbytes, extra, members, apart in (
            (False, d.params - d.expert_params, d.param_bytes - d.expert_param_bytes, d.deferred_bytes, group,
             stride),
            (True, d.expert_params, d.expert_param_bytes, 0, egroup, estride)):
        if members == 1 or not params:
            continue
        grads = params * size + extra
        if p.zero >= 1:
            out += [(expert, (Op.REDUCE_SCATTER, grads, members, apart)),
                    (expert, (Op.ALL_GATHER, pbytes, members, apart))]
        else:
            out.append((expert, (Op.ALL_REDUCE, grads, members, apart)))
    return out


def zero3_rows(load: DeviceLoad, p: Parallel, topology: CollectiveTimer, runtime: Runtime) -> list[dict[str, Any]]:
    """ZeRO-3/FSDP's per-microbatch collectives on ``load``'s device, one row per kind (as
    :func:`grad_reduction_rows`): every block's parameters all-gathered before its forward and again
    before its backward, its gradients reduce-scattered after (:func:`param_gathers` times them); the
    experts' (over ``edp``) in rows of their own, ``expert`` true."""
    if p.zero < 3:
        return []
    group, stride = p.axis("dp_cp")
    egroup, estride = p.axis("edp")
    grad = runtime.grad_reduce_dtype.nbytes(1)
    rows = {(op, expert): {"op": op.value, "group_size": egroup if expert else group, "per_microbatch": 0,
                           "comm_bytes": 0, "seconds": 0.0, "expert": expert}
            for expert in (False, True) for op in (Op.ALL_GATHER, Op.REDUCE_SCATTER)}
    for b in load.blocks:
        for expert, pbytes, params, members, apart in (
                (False, b.param_bytes - b.expert_param_bytes, b.params - b.expert_params, group, stride),
                (True, b.expert_param_bytes, b.expert_params, egroup, estride)):
            if not params or members == 1:
                continue
            for op, n, times in ((Op.ALL_GATHER, pbytes, 2), (Op.REDUCE_SCATTER, params * grad, 1)):
                r = rows[op, expert and p.ep > 1]
                r["per_microbatch"] += times
                r["comm_bytes"] += times * (members - 1) * int(n) // members
                r["seconds"] += times * topology.seconds(op, float(n), members, apart)
    return [r for r in rows.values() if r["per_microbatch"]]


def param_gathers(lay: Layout, load: DeviceLoad, p: Parallel, topology: CollectiveTimer,
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
