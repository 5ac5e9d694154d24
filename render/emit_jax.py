"""A training plan as a JAX mesh and the ``PartitionSpec`` of the main weights, written as a snippet.

How the plan maps, and why:

* mesh ``jax.make_mesh((data, fsdp, tensor), ("data", "fsdp", "tensor"))`` (``context`` and
  ``expert`` axes when used): ZeRO-3 data parallelism is the ``fsdp`` axis (parameters sharded over
  it and gathered per layer by the compiler), ZeRO 0-2 the ``data`` axis (parameters replicated;
  ZeRO 1-2 shard the optimizer states over ``data`` with a spec of their own). Expert parallelism is
  carved out of the data-parallel ranks, as in the plan.
* tensor parallelism is Megatron's split: q/k/v and the MLP's input projections column-wise
  (output features over ``tensor``), the attention output and the MLP's down projection row-wise,
  the vocabulary of the embedding and the head over ``tensor``; sequence parallelism shards the
  activations between layers over ``tensor`` along the sequence.
* recomputation: ``full`` is ``jax.checkpoint`` with ``nothing_saveable``; ``selective`` is
  ``dots_with_no_batch_dims_saveable`` (the weight matmuls' outputs are kept, attention's batched
  score products are recomputed: the plan's selective region).
* pipeline parallelism has no JAX primitive: a plan with ``pp > 1`` is refused, naming the way out.
"""

from __future__ import annotations

from typing import Any

from ..backends import get_target
from ..costmodel.planner.plan import Plan
from ..errors import NarrowpipeError
from .emit import Launch, plan_source, py_tuple, training_dtype

__all__ = ["jax_launch", "jax_mesh", "JAX_REFERENCE"]

JAX_REFERENCE = "jax.make_mesh, jax.sharding.PartitionSpec, jax.checkpoint_policies (JAX 0.4.35 and later)"
_REMAT = {"full": "jax.checkpoint_policies.nothing_saveable",
          "selective": "jax.checkpoint_policies.dots_with_no_batch_dims_saveable"}


def jax_mesh(plan: Plan) -> list[tuple[str, int]]:
    """``(axis name, size)`` of the mesh, outermost first."""
    p = plan.parallel
    replicas = p.dp // p.ep
    axes = [("data", 1 if p.zero >= 3 else replicas), ("fsdp", replicas if p.zero >= 3 else 1)]
    axes += [("expert", p.ep)] if p.ep > 1 else []
    axes += [("context", p.cp)] if p.cp > 1 else []
    axes.append(("tensor", p.tp))
    return axes


def jax_launch(plan: Plan) -> Launch:
    """The JAX mesh and weight shardings for ``plan`` (see the module doc)."""
    p = plan.parallel
    family = get_target(plan.target).family
    if family not in ("tpu", "gpu"):
        raise NarrowpipeError(f"JAX runs on TPUs and GPUs; this plan is for {plan.target} (a {family} target)")
    if p.pp > 1:
        raise NarrowpipeError(f"JAX has no pipeline-parallel schedule to map pp={p.pp} ({p.schedule}) onto: re-plan "
                              "with --pp 1 for --emit jax, or use a framework with pipelining (MaxText, Megatron-LM)")
    axes = jax_mesh(plan)
    f = "fsdp" if p.zero >= 3 else None
    batch = tuple(a for a in ("data", "fsdp", "expert") if dict(axes).get(a, 1) > 1) or None
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
    if p.sequence_parallel:
        specs["activations between layers (sequence parallel) [batch, seq, hidden]"] = [
            list(batch) if batch else None, "tensor" if seq is None else [seq, "tensor"], None]
    notes = []
    if p.zero in (1, 2):
        notes.append(f"ZeRO-{p.zero}: give the optimizer states (and with ZeRO-2 the gradient accumulators) the "
                     "weights' specs with their first unsharded dim over 'data'")
    if p.microbatches > 1:
        notes.append(f"accumulate gradients over {p.microbatches} microbatches of {p.microbatch} sequences per data "
                     "replica (e.g. optax.MultiSteps or a scan over microbatches)")
    if p.ep > 1:
        notes.append(f"experts sharded over the 'expert' axis ({p.ep} ways), with the tokens' all-to-all")
    if p.cp > 1:
        notes.append("context parallelism: attention over a 'context'-sharded sequence needs ring attention "
                     "(or the compiler all-gathers keys and values)")
    settings = {"mesh": {"shape": [n for _, n in axes], "axis_names": [a for a, _ in axes]},
                "partition_specs": specs, "remat_policy": _REMAT.get(p.recompute), "param_dtype": training_dtype(plan),
                "microbatch": p.microbatch, "global_batch": p.global_batch}
    return Launch("jax", plan_source(plan), settings, code=_snippet(settings, p.recompute), notes=notes,
                  reference=JAX_REFERENCE)


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
    if recompute in _REMAT:
        lines.append(f"layer_fn = jax.checkpoint(layer_fn, policy={_REMAT[recompute]})   # recompute={recompute}")
    return "\n".join(lines) + "\n"
