"""An evaluated strategy as a :class:`.Plan`: rates, memory by term, stages, collectives per step.

Why apart from the evaluation: evaluating runs thousands of times in a search, assembling once for
the winner (and briefly for each runner-up's reason). Rates follow the usual conventions: model
FLOPs are three times the graph's forward (PaLM's MFU: no recomputation, not even the scores' matmul
fused attention's backward runs again; :meth:`.Planner.model_flops`), hardware FLOPs what runs: the
forward and backward as executed plus the recomputed forward (the SC'21 paper's rate), both per
device per second of predicted step.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...backends.defaults import runtime_reserve_holders
from ...ir import DType, Graph, Op
from ..execution.common import TimingOptions, conv_options, matrix_rate
from ..training.fp8_gemms import FORWARD_FORMAT
from .domain_notes import domain_notes
from .dp_comm import grad_reduction_rows, zero3_rows
from .ep_overlap import note as ep_overlap_note
from .expert_parallel import active_params_note
from .fp8_plan import fp8_flop_share
from .plan import ARCH_FIELDS, Plan, RunnerUp
from .planner import Evaluation, Planner
from .simulated import chunk_rows, simulated
from .strategy import Parallel
from .tied_grads import tied_grad_collectives
from .vocab_pad import padded_vocab

__all__ = ["assemble", "loss_reason"]

_LABELS = {"compute": "compute", "recompute": "recomputation", "tp_comm": "tensor-parallel communication",
           "cp_comm": "context-parallel communication", "ep_comm": "expert-parallel all-to-all",
           "p2p": "pipeline sends", "param_gather": "parameter gathers (ZeRO)", "bubble": "pipeline bubble",
           "dp_comm": "data-parallel gradient reduction",
           "tied_grad": "tied-embedding gradient all-reduce (first and last stage)", "optimizer": "optimizer step"}
#: Spec fields that are the plan's to say (dtype) or the runtime's (dropout, attention form), or implied.
_RUNTIME_SPEC = ("dtype", "dropout", "attention", "norm_bias", "causal")
_COMM = ("tp_comm", "cp_comm", "ep_comm", "p2p", "param_gather", "dp_comm", "tied_grad")


def assemble(planner: Planner, ev: Evaluation, runners_up: list[RunnerUp] | None = None,
             notes: list[str] | None = None) -> Plan:
    ev = simulated(planner, ev)
    p = ev.parallel
    step = ev.step
    closed = step.closed_form_s if step.closed_form_s is not None else step.total_s
    layers, pro, epi = planner.costs(p)
    model_flops_seq, executed_seq, recompute_seq = planner.model_flops(p.tp)
    model_flops = model_flops_seq * p.global_batch
    if p.recompute == "full":
        hw_flops = (executed_seq + recompute_seq) * p.global_batch
    else:
        rec_local = sum(c.flops.get("recompute", 0) for c in layers)
        hw_flops = executed_seq * p.global_batch + rec_local * p.tp * p.cp * p.microbatches * p.dp
    t = step.total_s
    peak = _mfu_peak(planner)
    tflops = model_flops / t / p.devices / 1e12 if t > 0 else 0.0
    fullest = ev.fullest
    memory = {**fullest.terms(), "total": fullest.total, "capacity": ev.capacity, "device": int(fullest.device)}
    stages = stage_rows(planner, ev)
    exposed = {k: step.breakdown.get(k, 0.0) for k in _COMM if step.breakdown.get(k, 0.0) > 0}
    hidden = {k: v for k, v in step.hidden.items() if v > 0}
    dp_rows = grad_reduction_rows(step.layout, p, planner.timer, planner.runtime)
    if planner.runtime.overlap_param_gather:     # ZeRO 1-2's parameter all-gather runs under the next forward
        gather = sum(r["seconds"] for r in dp_rows if r["op"] == "all_gather")
        if gather > 0:
            hidden["param_gather"] = hidden.get("param_gather", 0.0) + gather
    all_notes = list(step.notes) + list(notes or [])
    active = active_params_note(planner.graph, planner.param_count, planner.expert_params)
    if active:
        all_notes.insert(0, active)
    vocab = planner.vocab
    if vocab is not None and (padded := padded_vocab(vocab, planner.runtime.vocab_multiple, p.tp)) != vocab:
        all_notes.append(f"vocabulary {vocab:,} padded to {padded:,} (a multiple of {planner.runtime.vocab_multiple} x "
                         f"tp={p.tp}, Megatron's --make-vocab-size-divisible-by) and split over tp: the embedding, "
                         "the head and its logits are costed at the padded size")
    if p.pp > 1:
        all_notes.append(f"pipeline bubble {step.breakdown['bubble'] * 1e3:.0f} ms in the simulated {p.schedule} "
                         f"schedule; with equal stages (p-1)/(v*m) = {p.pp - 1}/({p.interleave}*{p.microbatches}) "
                         "of the steady state")
    if abs(t - closed) > 1e-9 * t:
        all_notes.append(f"the step is the simulated schedule's {t * 1e3:.1f} ms; the closed form m*t_max + "
                         f"(sum(t) - t_max)/v gives {closed * 1e3:.1f} ms ({(closed - t) / t:+.2%}): the stages "
                         "or chunks are unequal")
    if not planner.runtime.overlap_tp_comm and step.breakdown.get("tp_comm", 0.0) > 0:
        all_notes.append("tensor-parallel collectives are exposed: the runtime does not overlap them with GEMMs")
    all_notes += list(dict.fromkeys(n for c in layers for n in c.notes if n.startswith("expert parallelism")))
    if step.breakdown.get("ep_comm", 0.0) > 0 or step.hidden.get("ep_comm", 0.0) > 0:
        all_notes.append(ep_overlap_note(p, planner.runtime, step.breakdown.get("ep_comm", 0.0),
                                         step.hidden.get("ep_comm", 0.0)))
    device = float(planner.target.memory_capacity)
    all_notes.append(f"memory is checked against {ev.capacity / 1e9:.1f} GB per device: its {device / 1e9:.1f} GB "
                     f"less {1 - ev.capacity / device:.0%} for what no planned term counts ("
                     f"{runtime_reserve_holders(planner.target.family, planner.target.vendor)})")
    masked = planner.causal_masked_flops * p.global_batch
    if peak and t > 0 and masked >= 0.01 * model_flops:
        all_notes.append(f"MFU counts causal attention in full (PaLM's and Megatron's model FLOPs); without the "
                         f"{masked / model_flops:.1%} of them its mask hides (MaxText's convention since July 2025) "
                         f"it reads {(model_flops - masked) / t / p.devices / peak:.1%}")
    all_notes += domain_notes(planner.topology, p, planner.system_name)
    if not ev.fits:
        all_notes.append(overflow_text(ev))
    return Plan(model=planner.graph.name, target=planner.target.name, system=planner.system_name,
                devices=planner.devices, mode="train", seq=planner.seq, parallel=p, runtime=planner.runtime.to_dict(),
                step_time_s=t, breakdown=dict(step.breakdown), exposed_comm=exposed, hidden_comm=hidden,
                tokens_per_s=p.global_batch * planner.seq / t if t > 0 else 0.0, tflops_per_device=tflops,
                hw_tflops_per_device=hw_flops / t / p.devices / 1e12 if t > 0 else 0.0,
                mfu=tflops * 1e12 / peak if peak else 0.0, memory_per_device=memory, fits=ev.fits, stages=stages,
                collectives=_collectives(planner, ev, dp_rows), runners_up=list(runners_up or []), notes=all_notes,
                closed_form_step_s=closed,
                model_flops_per_step=model_flops, hw_flops_per_step=hw_flops, dtype=_dtype(planner),
                architecture=architecture(planner.graph), item_unit="tokens" if planner.seq_dim else "samples")


def stage_rows(planner: Planner, ev: Evaluation) -> list[dict[str, Any]]:
    """Each pipeline device: its layers, per-microbatch times, memory, and per model chunk (global
    index ``g``, on device ``g % pp``) the forward and backward seconds with the collectives exposed
    in them, which is what a timeline of the schedule places (:mod:`.schedule`)."""
    p = ev.parallel
    chunks = chunk_rows(planner, ev)
    p2p_each = ev.step.collectives.get("p2p_each", 0.0) if p.pp > 1 else 0.0
    gathers = ev.step.gather_s or [0.0] * p.pp
    rows = []
    for s in ev.step.stages:
        rows.append({"device": s.index, "layers": list(s.layers), "forward_s": s.forward_s,
                     "backward_s": s.backward_s, "p2p_s": s.p2p_s, "p2p_each_s": p2p_each,
                     "param_gather_s": gathers[s.index], "chunks": [dict(c) for c in chunks[s.index::p.pp]],
                     "memory": planner_memory(ev, s.index)})
    return rows


def architecture(graph: Graph) -> dict[str, Any]:
    """The transformer's sizes when the graph is one the model builder or the Llama/GPT-2 readers
    recognise (what launch tools ask for: layers, hidden, heads, ...), else empty."""
    from ..serving.recognise import spec_from_graph
    spec = spec_from_graph(graph)
    if spec is None:
        return {}
    out: dict[str, Any] = {k: getattr(spec, k) for k in ARCH_FIELDS}
    # any other feature the spec sets away from its default (a sliding window, a parallel block, fields
    # added later) is listed, so launch settings can say what they do not express instead of dropping it
    out["other"] = {f.name: v if isinstance(v, (bool, int, float, str)) else str(v)
                    for f in dataclasses.fields(spec) if f.name not in ARCH_FIELDS and f.name not in _RUNTIME_SPEC
                    and (v := getattr(spec, f.name)) != f.default}
    eps = _norm_eps(graph)
    if eps is not None and eps != DEFAULT_NORM_EPS:
        out["other"]["norm_eps"] = eps
    return out


#: The norms' epsilon the model builder, PyTorch's LayerNorm and Megatron-LM (``--norm-epsilon``)
#: default to; a model's other epsilon (DeepSeek-V3's and Qwen's 1e-6) is kept in ``other``.
DEFAULT_NORM_EPS = 1e-5


def _norm_eps(graph: Graph) -> float | None:
    """The epsilon of the graph's first RMS/layer norm (a transformer uses one throughout), or None."""
    for node in graph.nodes:
        if node.op in (Op.RMS_NORM, Op.LAYER_NORM) and node.attrs.get("eps") is not None:
            return float(node.attrs["eps"])
    return None


def planner_memory(ev: Evaluation, stage: int) -> dict[str, float]:
    m = ev.memory[stage]
    return {**m.terms(), "total": m.total}


def overflow_text(ev: Evaluation) -> str:
    """Which memory term overflows and by how much, on the fullest device."""
    m = ev.fullest
    over = m.total - ev.capacity
    terms = ", ".join(f"{k} {v / 1e9:.1f} GB" for k, v in sorted(m.terms().items(), key=lambda kv: -kv[1]) if v > 0)
    biggest = max(m.terms().items(), key=lambda kv: kv[1])
    return (f"does not fit: pipeline device {m.device} needs {m.total / 1e9:.1f} GB of {ev.capacity / 1e9:.1f} GB "
            f"({over / 1e9:.1f} GB over); largest term {biggest[0]} {biggest[1] / 1e9:.1f} GB ({terms})")


def loss_reason(best: Evaluation, other: Evaluation) -> str:
    """Why ``other`` lost to ``best``: it does not fit, or the terms where it spends the most extra time."""
    if not other.fits:
        return overflow_text(other)
    diff = {k: other.step.breakdown.get(k, 0.0) - best.step.breakdown.get(k, 0.0) for k in _LABELS}
    worse = sorted(((v, k) for k, v in diff.items() if v > 0), reverse=True)[:2]
    slower = other.step.total_s - best.step.total_s
    parts = [f"+{v * 1e3:.0f} ms {_LABELS[k]}" for v, k in worse]
    return f"{slower * 1e3:+.0f} ms per step" + (f": {', '.join(parts)}" if parts else "")


def _collectives(planner: Planner, ev: Evaluation, dp_rows: list[dict[str, Any]]) -> list[dict[str, object]]:
    """Every kind of collective in a step on the critical device: per-microbatch ones from the blocks
    (times the microbatches), and the once-per-step gradient reduction (``dp_rows``:
    :func:`.dp_comm.grad_reduction_rows` of the step)."""
    p = ev.parallel
    layers, pro, epi = planner.costs(p)
    crit = max(ev.step.stages, key=lambda s: s.time_s)
    blocks = [layers[i] for i in crit.layers]
    if crit.index == 0 and pro is not None:
        blocks.append(pro)
    if crit.index == p.pp - 1 and epi is not None:
        blocks.append(epi)
    rows: dict[tuple[str, str, str, int], dict[str, object]] = {}
    for b in blocks:
        for u in b.collectives:
            key = (u.purpose, u.op, u.axis, u.group_size)
            row = rows.setdefault(key, {"purpose": u.purpose, "op": u.op, "axis": u.axis, "group_size": u.group_size,
                                        "per_step": 0, "comm_bytes": 0, "seconds": 0.0, "exposed_s": 0.0})
            mult = p.microbatches if u.phase != "optimizer" else 1
            row["per_step"] = int(row["per_step"]) + u.count * mult  # type: ignore[call-overload]
            row["comm_bytes"] = int(row["comm_bytes"]) + u.comm_bytes * mult  # type: ignore[call-overload]
            row["seconds"] = float(row["seconds"]) + u.seconds * mult  # type: ignore[arg-type]
            row["exposed_s"] = float(row["exposed_s"]) + u.exposed_s * mult  # type: ignore[arg-type]
    out = list(rows.values())
    ep_hidden = ev.step.hidden.get("ep_comm", 0.0)
    if ep_hidden > 0:      # the all-to-alls another microbatch's pass hides (ep_overlap), shared by the rows
        ep_exposed = ev.step.breakdown.get("ep_comm", 0.0)
        for row in out:
            if row["axis"] == "ep":
                row["exposed_s"] = float(row["exposed_s"]) * ep_exposed / (ep_exposed + ep_hidden)  # type: ignore[arg-type]
    axis = "dp" if p.cp == 1 else "dp+cp"
    exposed_dp = ev.step.breakdown.get("dp_comm", 0.0)
    rt = planner.runtime
    reducing = sum(float(r["seconds"]) for r in dp_rows if r["op"] != "all_gather")
    for r in dp_rows:
        gather = r["op"] == "all_gather"
        # the step waits for the reduction's exposed part (dp_comm), shared by the dense and expert
        # reductions as their durations; the gather only where not overlapped
        exposed = (0.0 if rt.overlap_param_gather else r["seconds"]) if gather else \
            exposed_dp * float(r["seconds"]) / reducing if reducing else 0.0
        purpose = "data-parallel parameter all-gather (ZeRO)" if gather else "data-parallel gradient reduction"
        out.append({"purpose": "expert " + purpose if r.get("expert") else purpose, "op": r["op"],
                    "axis": "edp" if r.get("expert") else axis, "group_size": r["group_size"],
                    "per_step": r["per_step"], "comm_bytes": r["comm_bytes"], "seconds": r["seconds"],
                    "exposed_s": exposed})
    load = max(ev.step.layout.devices, key=lambda d: ev.step.gather_s[d.index] if ev.step.gather_s else 0.0)
    z3 = zero3_rows(load, p, planner.timer, rt)
    gathering = sum(float(r["seconds"]) for r in z3 if r["op"] == "all_gather")
    for r in z3:
        m = p.microbatches
        gather = r["op"] == "all_gather"
        purpose = "ZeRO-3 parameter all-gather" if gather else "ZeRO-3 gradient reduce-scatter"
        out.append({"purpose": "expert " + purpose if r["expert"] else purpose, "op": r["op"],
                    "axis": "edp" if r["expert"] else axis, "group_size": r["group_size"],
                    "per_step": r["per_microbatch"] * m, "comm_bytes": r["comm_bytes"] * m,
                    "seconds": r["seconds"] * m,
                    "exposed_s": ev.step.breakdown.get("param_gather", 0.0) * float(r["seconds"]) / gathering
                    if gather and gathering else 0.0})
    for nbytes, members, _, seconds in tied_grad_collectives(ev.step.layout.tied, p, planner.timer, rt):
        out.append({"purpose": "tied-embedding gradient all-reduce (first and last stage)", "op": "all_reduce",
                    "axis": "pp", "group_size": members, "per_step": 1,
                    "comm_bytes": 2 * (members - 1) * nbytes // members, "seconds": seconds, "exposed_s": seconds})
    if p.pp > 1:
        each = ev.step.collectives.get("p2p_each", 0.0)
        n = 2 * p.interleave * p.microbatches
        sent = ev.step.layout.boundary_bytes     # a device's activation; Megatron's scatter/gather sends 1/tp
        if p.tp > 1 and rt.pipeline_scatter_gather and not p.sequence_parallel:
            sent //= p.tp
        out.append({"purpose": "pipeline activation/gradient sends", "op": "send", "axis": "pp", "group_size": 2,
                    "per_step": n, "comm_bytes": int(sent) * n, "seconds": each * n,
                    "exposed_s": ev.step.breakdown.get("p2p", 0.0)})
    return sorted(out, key=lambda r: -float(r["seconds"]))  # type: ignore[arg-type]


def _mfu_peak(planner: Planner) -> float:
    """The rate the model's contractions run at, as compare's MFU takes it: an fp32 model on a chip
    without an fp32 matrix rate runs on the vector units or as bf16 passes, not at a rate of 0; a
    convnet's at its convolutions' precision (fp32 ones on TF32 tensor cores where the library does
    that by default: a ResNet-50 plan read 'MFU 132%' against the fp32 CUDA-core peak)."""
    options = TimingOptions()
    if any(n.op is Op.CONV for n in planner.graph.nodes):
        from ..interpreter import interpret
        from ..summary import dominant_contraction
        _, conv = dominant_contraction(interpret(planner.graph, planner.dims(1)))
        options = conv_options(options, planner.target) if conv else options
    if planner.runtime.fp8 and fp8_flop_share(planner) > 0.5:
        # the FP8 GEMMs do most of the matmul FLOPs: their peak, as analyze's MFU takes the precision that
        # does most of them (against the bf16 peak an FP8 plan read 'MFU 112.9%')
        return matrix_rate(planner.target, FORWARD_FORMAT, options).flops_per_s
    return matrix_rate(planner.target, DType(_dtype(planner)), options).flops_per_s


def _dtype(planner: Planner) -> str:
    params = [w for w in planner.graph.weights if w.kind.value == "param"]
    return params[0].dtype.value if params else "fp32"


def describe(parallel: Parallel) -> str:
    return parallel.describe()
