"""A training plan as a JAX mesh and the ``PartitionSpec`` of the main weights, written as a snippet.

How the plan maps, and why:

* mesh ``jax.make_mesh((data, fsdp, tensor), ("data", "fsdp", "tensor"))`` (``context`` and
  ``expert`` axes when used): ZeRO-3 data parallelism is the ``fsdp`` axis, ZeRO 0-2 the ``data``
  axis. Expert parallelism is carved out of the data-parallel ranks, as in the plan.
* what ZeRO shards is what the plan's memory assumes: dense weights (ZeRO-3; the optimizer states
  with ZeRO 1-2) over every data-like axis, ``dp x cp`` ways (``fsdp``/``data``, ``expert``,
  ``context``); expert weights over ``expert`` on their expert dim and over the rest
  (``dp x cp / ep`` ways) on another.
* tensor parallelism is Megatron's split: q/k/v and the MLP's input projections column-wise
  (output features over ``tensor``), the attention output and the MLP's down projection row-wise,
  the vocabulary of the embedding and the head over ``tensor``; sequence parallelism shards the
  activations between layers over ``tensor`` along the sequence.
* recomputation, as the plan's memory and time assume it: ``dots`` is ``jax.checkpoint`` with
  ``dots_with_no_batch_dims_saveable`` (the weights' matmul outputs kept, everything else of the layer
  recomputed: MaxText's ``remat_policy=minimal``); ``full`` is ``nothing_saveable`` (the layer's input
  only: MaxText's ``full``); ``none`` is ``everything_saveable``. Megatron's ``selective`` has no JAX
  policy: it recomputes an eager attention's softmax region and keeps everything else. Under fused
  attention that region is inside the kernel (its backward recomputes the scores anyway), so the plan
  recomputes nothing and ``everything_saveable`` recomputes nothing either (what JAX saves still differs
  where Megatron's fused kernels save less, e.g. its SwiGLU's activation); with an eager attention (the plan has a
  recomputation term, or the runtime unfuses attention) it is refused, since no built-in policy keeps
  the projections, norms and activations while dropping only the scores.
* pipeline parallelism has no JAX primitive: a plan with ``pp > 1`` is refused, naming the way out.
"""

from __future__ import annotations

from typing import Any

from ..backends import Target, get_target
from ..costmodel.planner.plan import Plan
from ..errors import NarrowpipeError
from .emit import STACKS, Launch, plan_source, py_tuple, software_stack, training_dtype

__all__ = ["jax_launch", "jax_mesh", "remat_policy", "JAX_REFERENCE"]

JAX_REFERENCE = "jax.make_mesh, jax.sharding.PartitionSpec, jax.checkpoint_policies (JAX 0.4.35 and later)"
_REMAT = {"none": "jax.checkpoint_policies.everything_saveable",
          "dots": "jax.checkpoint_policies.dots_with_no_batch_dims_saveable",
          "full": "jax.checkpoint_policies.nothing_saveable"}
#: MaxText's ``remat_policy`` that runs each (its base.yml; ``minimal`` is the dots policy, see
#: costmodel/training/recompute.py)
_MAXTEXT_REMAT = {"none": "none", "dots": "minimal", "full": "full"}


def jax_mesh(plan: Plan) -> list[tuple[str, int]]:
    """``(axis name, size)`` of the mesh, outermost first."""
    p = plan.parallel
    replicas = p.dp // p.ep
    axes = [("data", 1 if p.zero >= 3 else replicas), ("fsdp", replicas if p.zero >= 3 else 1)]
    axes += [("expert", p.ep)] if p.ep > 1 else []
    axes += [("context", p.cp)] if p.cp > 1 else []
    axes.append(("tensor", p.tp))
    return axes


def jax_launch(plan: Plan, chip: Target | None = None) -> Launch:
    """The JAX mesh and weight shardings for ``plan`` (see the module doc)."""
    p = plan.parallel
    target = chip or get_target(plan.target)   # a file's chip has no catalog name to look up
    stack = software_stack(target)
    notes = []
    if stack == "gaudi":
        raise NarrowpipeError(f"JAX runs on TPUs and GPUs; {target.name} runs {STACKS[stack]}: use --emit torch "
                              "(device 'hpu') or --emit megatron (Intel's Megatron-LM port)")
    if stack == "neuron":
        notes.append(f"{target.name}: JAX runs through AWS's jax-neuronx plugin of the Neuron SDK (not the TPU "
                     "runtime); the mesh and PartitionSpecs are the same")
    elif stack not in ("tpu", "cuda", "rocm"):
        raise NarrowpipeError(f"JAX runs on TPUs and GPUs; this plan is for {plan.target} (a {target.family} target)")
    if p.pp > 1:
        raise NarrowpipeError(f"JAX has no pipeline-parallel schedule to map pp={p.pp} ({p.schedule}) onto: re-plan "
                              "with --pp 1 for --emit jax, or use a framework with pipelining (MaxText, Megatron-LM)")
    policy, remat_note = remat_policy(plan)
    notes.append(remat_note)
    axes = jax_mesh(plan)
    sizes = dict(axes)
    # the axes ZeRO shards over, as the planner's memory does: dense over dp x cp, experts' rest over dp x cp / ep
    data_axes = [a for a in ("data", "fsdp", "expert", "context") if sizes.get(a, 1) > 1]
    expert_rest = [a for a in data_axes if a != "expert"]
    f = _axes(data_axes) if p.zero >= 3 else None
    fe = _axes(expert_rest) if p.zero >= 3 else None
    batch = tuple(a for a in ("data", "fsdp", "expert") if sizes.get(a, 1) > 1) or None
    seq = "context" if p.cp > 1 else None
    specs: dict[str, list[Any]] = {
        "embedding [vocab, hidden]": ["tensor", f],
        "attention q [hidden, heads, head_dim]": [f, "tensor", None],
        "attention k, v [hidden, kv_heads, head_dim]": [f, "tensor" if _kv_splits(plan) else None, None],
        "attention out [heads, head_dim, hidden]": ["tensor", None, f],
        "mlp in (gate, up) [hidden, ffn]": [f, "tensor"],
        "mlp out [ffn, hidden]": ["tensor", f],
        "norm scales [hidden]": [None],
        "head [hidden, vocab]": [f, "tensor"],
        "activations [batch, seq, hidden]": [list(batch) if batch else None, seq, None],
    }
    if plan.architecture.get("experts"):
        ep = "expert" if p.ep > 1 else None
        specs.update({"router [hidden, experts]": [f, None],
                      "experts in (gate, up) [experts, hidden, expert_ffn]": [ep, fe if ep else f, "tensor"],
                      "experts out [experts, expert_ffn, hidden]": [ep, "tensor", fe if ep else f]})
    if p.sequence_parallel:
        specs["activations between layers (sequence parallel) [batch, seq, hidden]"] = [
            list(batch) if batch else None, "tensor" if seq is None else [seq, "tensor"], None]
    if p.zero in (1, 2) and data_axes:
        notes.append(f"ZeRO-{p.zero}: give the optimizer states (and with ZeRO-2 the gradient accumulators) the "
                     f"weights' specs with their first unsharded dim over {_spec([_axes(data_axes)])[2:-1]} (an "
                     f"expert weight's over {_spec([_axes(expert_rest)])[2:-1] if expert_rest else 'nothing more'}), "
                     f"{p.dp * p.cp} ways as the plan's memory assumes")
    if p.microbatches > 1:
        notes.append(f"accumulate gradients over {p.microbatches} microbatches of {p.microbatch} sequences per data "
                     "replica (e.g. optax.MultiSteps or a scan over microbatches)")
    if p.ep > 1:
        notes.append(f"experts sharded over the 'expert' axis ({p.ep} ways), with the tokens' all-to-all")
    if p.cp > 1:
        notes.append("context parallelism: attention over a 'context'-sharded sequence needs ring attention "
                     "(or the compiler all-gathers keys and values)")
    settings = {"mesh": {"shape": [n for _, n in axes], "axis_names": [a for a, _ in axes]},
                "partition_specs": specs, "remat_policy": policy, "param_dtype": training_dtype(plan),
                "microbatch": p.microbatch, "global_batch": p.global_batch}
    return Launch("jax", plan_source(plan), settings, code=_snippet(settings, p.recompute), notes=notes,
                  reference=JAX_REFERENCE)


def remat_policy(plan: Plan) -> tuple[str, str]:
    """The ``jax.checkpoint`` policy that saves what the plan's recomputation saves, and a note saying
    why (see the module doc); raises where no JAX policy does."""
    rec = plan.parallel.recompute
    if rec == "selective":
        eager = plan.runtime.get("attention") == "unfused" or plan.breakdown.get("recompute", 0.0) > 0
        if eager:
            raise NarrowpipeError(
                "recompute=selective with eager attention (the plan recomputes its softmax region) has no "
                "jax.checkpoint policy: dots_with_no_batch_dims_saveable also recomputes the norms, activations "
                "and residuals, nothing_saveable the whole layer. Re-plan with --runtime maxtext --recompute "
                "dots (or full), or name the scores with jax.ad_checkpoint.checkpoint_name and save everything "
                "except those names yourself")
        return _REMAT["none"], ("recompute=selective under fused attention recomputes nothing (the kernel's "
                                "backward recomputes the scores itself): jax.checkpoint_policies.everything_saveable")
    if rec not in _REMAT:
        raise NarrowpipeError(f"recompute={rec!r} has no jax.checkpoint policy here (known: {', '.join(_REMAT)})")
    return _REMAT[rec], f"recompute={rec} is {_REMAT[rec]} (MaxText remat_policy={_MAXTEXT_REMAT[rec]})"


def _axes(names: list[str]) -> Any:
    """One mesh axis by name, several as a list (one dim sharded over their product), none as None."""
    return None if not names else names[0] if len(names) == 1 else list(names)


def _kv_splits(plan: Plan) -> bool:
    kv = int(plan.architecture.get("kv_heads", 0) or 0)
    return not kv or kv % plan.parallel.tp == 0


def _spec(entries: list[Any]) -> str:
    def one(e: Any) -> str:
        if e is None:
            return "None"
        if isinstance(e, list):
            return py_tuple(f'"{x}"' for x in e)
        return f'"{e}"'
    return "P(" + ", ".join(one(e) for e in entries) + ")"


def _snippet(s: dict[str, Any], recompute: str) -> str:
    mesh = s["mesh"]
    shape = py_tuple(str(n) for n in mesh["shape"])
    names = py_tuple(f'"{a}"' for a in mesh["axis_names"])
    lines = ["import jax", "from jax.sharding import NamedSharding, PartitionSpec as P", "",
             f"mesh = jax.make_mesh({shape}, {names})", "specs = {"]
    lines += [f'    "{k}": {_spec(v)},' for k, v in s["partition_specs"].items()]
    lines += ["}", "shardings = {k: NamedSharding(mesh, spec) for k, spec in specs.items()}"]
    lines.append(f"layer_fn = jax.checkpoint(layer_fn, policy={s['remat_policy']})   # recompute={recompute}")
    return "\n".join(lines) + "\n"
