"""``narrowpipe.plan``: the question users pay for, "on N chips of type X, how do I shard this model,
will it fit, and how fast is one step?", as one call that returns a :class:`.Plan`."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ...errors import PlanError
from ...ir import DType, Graph
from ..precision import with_precision
from .assemble import assemble
from .fp8_plan import fp8_notes
from .plan import Plan
from .planner import Planner
from .runtime import get_runtime, runtime_notes
from .search import search
from .strategy import RECOMPUTE, Parallel, parse_switch

__all__ = ["plan"]

_FIXABLE = ("tp", "pp", "dp", "cp", "ep", "microbatch", "recompute", "sequence_parallel", "zero", "interleave")
#: What 1 means for each size a user may fix (a size of 0 splits nothing and divides nothing).
_MEANING = {"tp": "1: no tensor parallelism", "pp": "1: no pipeline", "dp": "1: no data parallelism",
            "cp": "1: no context parallelism", "ep": "1: no expert parallelism",
            "microbatch": "sequences per microbatch", "interleave": "1: no interleaving"}


def plan(model: Any, target: Any, devices: int, *, mode: str = "train", global_batch: int,
         seq: int | None = None, parallel: Mapping[str, Any] | Parallel | None = None, dtype: str | None = None,
         system: Any = None, runtime: Any = None, optimizer: str = "adam", top: int = 5,
         expert_balance: Any = None) -> Plan:
    """The fastest training plan of ``model`` on ``devices`` devices of ``target`` that fits.

    ``model`` is a :class:`~narrowpipe.ir.Graph` (a builder result, a loaded file; the top-level
    ``narrowpipe.plan`` also takes a file or a bundled example's name); ``target`` a system
    (``dgx-h100``, ``tpu-v5e-256``) or a chip (its catalog
    system when there is one: ``a100`` runs on ``dgx-a100`` nodes); ``system`` overrides the system.
    ``global_batch`` counts sequences of ``seq`` tokens (default: the graph's sequence length).
    ``parallel`` fixes any of tp, pp, dp, cp, ep, microbatch, recompute (none/selective/dots/full),
    sequence_parallel, zero (0-3), interleave; the rest is searched, and the plan lists the runners-up
    with why each lost. ``expert_balance`` (a mixture of experts: ``balanced``, ``zipf:S``, ``hot:F``)
    spreads the routed rows; under expert parallelism the busiest device sets the pace. ``dtype``
    retypes weights and activations (default: the graph's own): a training precision, 16 or 32 bits;
    ``fp8`` (``fp8_e4m3``, ``fp8_e5m2``) plans FP8 training as Transformer Engine runs it: bf16 weights
    and activations, only the Linear layers' GEMMs in FP8 (:func:`_training_dtype` refuses int8, int4
    and fp4).
    ``runtime`` names the training framework's behaviour (``megatron-core``, the default on GPUs,
    ``megatron-lm-2021`` or ``maxtext``: JAX/XLA as MaxText runs it, the default on Google TPUs; see
    :data:`.runtime.RUNTIMES`).
    Raises :class:`~narrowpipe.PlanError` when nothing fits, naming the memory term that overflows
    and by how much."""
    if mode != "train":
        raise PlanError(f"plan: mode {mode!r} is not planned yet; only 'train' (a training step) is")
    graph = _graph(model)
    fp8 = False
    if dtype is not None:
        dtype, fp8 = _training_dtype(dtype)
        graph = with_precision(graph, weights=dtype, activations=dtype)
    if fp8:
        runtime = replace(get_runtime(runtime), fp8="hybrid")
    planner = Planner(graph, target, devices, global_batch=global_batch, seq=seq, system=system, runtime=runtime,
                      optimizer=optimizer, expert_balance=expert_balance)
    fixed = _fixed(parallel)
    if isinstance(parallel, Parallel):
        _check_whole(parallel, devices)
    try:
        result = search(planner, fixed, top=top)
    except PlanError as e:
        if isinstance(parallel, Parallel) and str(e).startswith("no strategy"):
            raise PlanError(f"{e}; {_WHOLE} {_dict_form(parallel)}") from None
        raise
    stats = result.stats()
    notes = [*runtime_notes(planner.runtime, planner.target), *fp8_notes(planner),
             f"search: {stats['considered']} strategies, {stats['pruned_memory']} pruned by parameter memory, "
             f"{stats['evaluated']} evaluated ({planner.cached_costs} block costs)", *result.notes]
    return assemble(planner, result.best, result.runners_up, notes)


def _training_dtype(name: str) -> tuple[str, bool]:
    """``(dtype the model trains in, FP8 GEMMs)``: ``name`` itself for a format a model trains in end
    to end (fp32, tf32, bf16, fp16); ``("bf16", True)`` for an FP8 name (``fp8``, ``fp8_e4m3``,
    ``fp8_e5m2``), which means FP8 training as Transformer Engine runs it (its HYBRID recipe: E4M3
    forward, E5M2 gradients; :mod:`..training.fp8_gemms`), whichever of the two formats is named: the
    weights and activations stay bf16 and only the Linear layers' GEMMs read FP8. Narrower formats
    (int8, int4, fp4) are no training precision: a PlanError says why."""
    try:
        dt = DType.parse(name)
    except ValueError as e:
        raise PlanError(f"plan --dtype: {e}") from None
    if dt.is_float and dt.nbytes(1) >= 2:
        return name, False
    if dt in (DType.FP8_E4M3, DType.FP8_E5M2):
        return "bf16", True
    raise PlanError(f"plan --dtype {name}: a model does not train in {dt.value}: a training plan keeps bf16 "
                    "weights (fp32 master weights and gradients) and bf16 activations; --dtype fp8 plans FP8 "
                    "training as Transformer Engine runs it (only the Linear layers' GEMMs in FP8), and "
                    f"{dt.value} training (integer or 4-bit GEMMs) is not modelled: plan in --dtype fp8 or bf16")


def _graph(model: Any) -> Graph:
    if isinstance(model, Graph):
        return model
    raise PlanError(f"plan: model must be a Graph (narrowpipe.plan also takes a file or an example name), "
                    f"got {type(model).__name__}")


_WHOLE = "a Parallel object fixes every field, its defaults included;"


def _own(parallel: Parallel) -> dict[str, Any]:
    """The fields ``parallel`` sets away from their defaults."""
    base = Parallel()
    return {k: getattr(parallel, k) for k in _FIXABLE if getattr(parallel, k) != getattr(base, k)}


def _dict_form(parallel: Parallel) -> str:
    own = _own(parallel)
    return f"to fix only {', '.join(own) or 'some fields'} and search the rest, pass parallel={own!r}"


def _check_whole(parallel: Parallel, devices: int) -> None:
    """A Parallel object is a whole strategy: its mesh must use exactly ``devices`` devices. Said up
    front, since ``Parallel(tp=2)`` means tp=2 and pp = dp = cp = 1, which users who meant "tp=2, search
    the rest" read as a search failure."""
    if parallel.devices != devices:
        shown = ", ".join(f"{k}={v!r}" for k, v in _own(parallel).items())
        raise PlanError(f"plan: parallel=Parallel({shown}) uses tp x pp x dp x cp = {parallel.tp} x "
                        f"{parallel.pp} x {parallel.dp} x {parallel.cp} = {parallel.devices} devices, not the "
                        f"{devices} planned for: {_WHOLE} {_dict_form(parallel)}")


def _fixed(parallel: Mapping[str, Any] | Parallel | None) -> dict[str, Any]:
    if parallel is None:
        return {}
    if isinstance(parallel, Parallel):
        return {k: getattr(parallel, k) for k in _FIXABLE}
    unknown = sorted(set(parallel) - set(_FIXABLE))
    if unknown:
        raise PlanError(f"plan: unknown parallel field(s) {', '.join(unknown)}; fixable: {', '.join(_FIXABLE)}")
    out = dict(parallel)
    for k in ("tp", "pp", "dp", "cp", "ep", "microbatch", "zero", "interleave"):
        if k in out:
            try:      # an integer, as Parallel takes: a string or a float is refused, not rounded
                if isinstance(out[k], bool):
                    raise TypeError
                out[k] = operator.index(out[k])
            except TypeError:
                raise PlanError(f"plan: {k} must be an integer, got {out[k]!r}") from None
            if k != "zero" and out[k] < 1:
                raise PlanError(f"plan: {k}={out[k]}: {k} must be >= 1 ({_MEANING[k]})")
    if "sequence_parallel" in out:
        out["sequence_parallel"] = parse_switch("plan: sequence_parallel", out["sequence_parallel"])
    if out.get("sequence_parallel") and out.get("tp") == 1:
        raise PlanError("plan: sequence_parallel=on needs tensor parallelism (tp > 1): it splits the tokens of the "
                        "tensor-parallel group's norms and dropouts, and tp=1 has no group to split over")
    if "recompute" in out and out["recompute"] not in RECOMPUTE:
        raise PlanError(f"plan: recompute must be one of {', '.join(RECOMPUTE)}, got {out['recompute']!r}")
    if "zero" in out and out["zero"] not in (0, 1, 2, 3):
        raise PlanError(f"plan: zero must be 0, 1, 2 or 3, got {out['zero']!r}")
    return out
