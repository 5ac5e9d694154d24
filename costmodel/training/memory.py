"""``training_memory``: what one device holds during a training step, term by term, and which term
does not fit.

The terms (bytes per device):

* **weights**: every parameter in ``param_dtype`` plus buffers, split over ``tp x pp``; ZeRO-3/FSDP
  also splits them over ``dp``.
* **gradients**: one per trainable parameter in ``grad_dtype``, split over ``tp x pp`` (and ``dp``
  from ZeRO-2).
* **optimizer_states**: the fp32 moments (Adam: two) and the fp32 master copy when parameters are
  narrower, split over ``tp x pp`` (and ``dp`` from ZeRO-1). Mixed-precision Adam is 2 + 2 + 12 =
  16 bytes per parameter unsharded (Rajbhandari et al., ZeRO, SC'20, section 3.1).
* **activations**: what the backward reads of one microbatch's forward (:mod:`.liveness`, under the
  ``recompute`` policy), split over ``tp`` (assumption: sequence parallelism, Korthikanti et al. 2022,
  so norms and dropouts are split too). With ``pp`` stages, 1F1B keeps ``pp`` microbatches in flight on
  the first stage, each over ``L/pp`` layers: the model's layers once (Narayanan et al., SC'21); an
  interleaved schedule adds ``(pp - 1) / (pp x interleave)`` of that.
* **temporary**: the step's peak beyond the saved activations (gradients of activations, the loss's
  buffers), split over ``tp``; with ZeRO-3 over ``dp > 1``, plus the gathered weights of two layers
  (assumption: FSDP holds the layer it runs and prefetches the next; a module outside the layers,
  such as the embedding, is a unit of its own).

Activations are counted in the graph's own dtypes (the model builder's default is bf16; retype an
fp32 export with ``costmodel.precision.with_precision`` first).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

from ...errors import NarrowpipeError
from ...ir import DimRole, DType, Graph, ValueKind
from ...ir.dim_spec import by_ir_name
from ..analyze import resolve_bindings
from .backward import param_scope, trainable
from .liveness import step_liveness
from .optimizer import STATES
from .recompute import layer_of_scope
from .step import build_training_graph, is_training_graph

__all__ = ["TrainingMemory", "training_memory", "TERMS"]

TERMS = ("weights", "gradients", "optimizer_states", "activations", "temporary")
#: term -> (the ZeRO stage that shards it, what else shrinks it)
_ZERO_STAGE = {"weights": 3, "gradients": 2, "optimizer_states": 1}


def _lever(term: str, config: dict[str, Any]) -> str:
    """What would shrink ``term``, leaving out what the configuration already does (ZeRO-3 over dp=8
    was told to 'shard the optimizer states: zero>=1')."""
    if term in _ZERO_STAGE:
        stage, zero, dp = _ZERO_STAGE[term], int(config.get("zero") or 0), int(config.get("dp") or 1)
        what = term.replace("_", " ")
        if zero >= stage:
            return f"more devices for the {what} (a larger dp than {dp}, already sharded by zero={zero}), or more tp/pp"
        return f"shard the {what}: zero{'=' if stage == 3 else '>='}{stage} over dp, or more tp/pp"
    recompute = config.get("recompute")
    if term == "activations":
        steps = {"none": "recompute (selective, then full), ", "selective": "full recompute, ",
                 "dots": "full recompute, "}.get(
            str(recompute), "" if recompute == "full" else "recompute (selective, then full), ")
        return f"{steps}a smaller microbatch, or more tp"
    return "a smaller microbatch, or more tp"


def _gb(n: float) -> str:
    return f"{n / 1e9:.3g} GB"


@dataclass(frozen=True)
class TrainingMemory:
    """Bytes per device of each term; ``config`` records the options that produced them."""

    weights: int
    gradients: int
    optimizer_states: int
    activations: int
    temporary: int
    params: int
    activations_by_layer: dict[str, int] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.terms().values())

    def terms(self) -> dict[str, int]:
        return {t: getattr(self, t) for t in TERMS}

    def fits(self, capacity: Any) -> bool:
        return self.total <= _capacity(capacity)

    def overflow(self, capacity: Any) -> list[tuple[str, int]]:
        """The terms beyond ``capacity`` (bytes, or a target whose memory it is), stacking them in the
        order a step needs them (persistent state first): each with the bytes of it that do not fit.
        Empty when everything fits; the amounts add up to ``total - capacity``."""
        cap = _capacity(capacity)
        out, used = [], 0
        for term, size in self.terms().items():
            over = used + size - max(cap, used)
            used += size
            if over > 0 and size:
                out.append((term, int(over)))
        return out

    def explain(self, capacity: Any) -> str:
        """A sentence for people: fits, or which term overflows, by how much, and what would help."""
        cap = _capacity(capacity)
        if self.fits(cap):
            return f"fits: {_gb(self.total)} of {_gb(cap)} per device ({_gb(cap - self.total)} free)"
        over = self.overflow(cap)
        first, amount = over[0]
        parts = [f"does not fit: needs {_gb(self.total)} per device, {_gb(cap)} available "
                 f"({_gb(self.total - cap)} over)"]
        lead = "alone exceed" if first == "weights" else "cross"
        parts.append(f"{first.replace('_', ' ')} {lead} the capacity by {_gb(amount)}")
        parts += [f"{t.replace('_', ' ')} add {_gb(b)}" for t, b in over[1:]]
        return "; ".join(parts) + f". Try: {_lever(first, self.config)}."

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total": self.total}


def _capacity(capacity: Any) -> float:
    if isinstance(capacity, (int, float)):
        return float(capacity)
    from ...backends import get_target
    return float(get_target(capacity).memory_capacity)


def _dtype(d: DType | str | None, default: DType) -> DType:
    if d is None:
        return default
    return d if isinstance(d, DType) else DType.parse(d)


_STEPS: WeakKeyDictionary[Graph, dict[tuple, Graph]] = WeakKeyDictionary()


def _step(graph: Graph, recompute: str, loss: str, frozen: tuple[str, ...]) -> Graph:
    """The training graph whose liveness decides activations (cached: the planner asks many times).
    Built with plain SGD: the optimizer updates states in place, so it changes no activation."""
    cache = _STEPS.setdefault(graph, {})
    key = (graph.version, recompute, loss, frozen)
    if key not in cache:
        cache[key] = build_training_graph(graph, optimizer="sgd", recompute=recompute, loss=loss, frozen=frozen)
    return cache[key]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // max(b, 1))


def training_memory(graph: Graph, *, param_dtype: DType | str | None = None, grad_dtype: DType | str | None = None,
                    master: DType | str = DType.FP32, optimizer: str = "adam", zero: int = 0, dp: int = 1,
                    tp: int = 1, pp: int = 1, recompute: str = "none", microbatch: int | None = None,
                    dims: Mapping[str, int] | None = None, interleave: int = 1, loss: str = "sum",
                    frozen: Iterable[str] = ()) -> TrainingMemory:
    """Bytes per device of one training step of ``graph`` (a forward graph); see the module doc.

    ``param_dtype`` defaults to the parameters' dtype, ``grad_dtype`` to ``param_dtype``;
    ``microbatch`` binds the graph's batch dims (``dims`` binds any other, e.g. ``{"seq": 4096}``).
    """
    if is_training_graph(graph):
        raise NarrowpipeError(f"training_memory takes the forward graph; {graph.name!r} is already a training step")
    if zero not in (0, 1, 2, 3):
        raise NarrowpipeError(f"zero must be 0, 1, 2 or 3, got {zero!r}")
    if optimizer not in STATES:
        raise NarrowpipeError(f"optimizer must be one of {', '.join(STATES)}, got {optimizer!r}")
    for name, n in (("dp", dp), ("tp", tp), ("pp", pp), ("interleave", interleave)):
        if int(n) < 1:
            raise NarrowpipeError(f"{name} must be >= 1, got {n!r}")
    frozen = tuple(frozen)
    bindings = by_ir_name(graph.dims, dict(dims or {}))   # before the microbatch overrides the batch
    if microbatch is not None:
        bindings.update({d: int(microbatch) for d in graph.dims_with_role(DimRole.BATCH)})
    step = _step(graph, recompute, loss, frozen)
    bound = resolve_bindings(step, bindings)
    live = step_liveness(step).bytes(bound)

    params = trainable(graph, frozen)
    defaults = graph.default_bindings()
    n_train = sum(p.type.numel(defaults) for p in params)
    n_frozen = sum(w.type.numel(defaults) for w in graph.weights if w.kind is ValueKind.PARAM) - n_train
    buffers = sum(w.type.nbytes(defaults) for w in graph.weights if w.kind is not ValueKind.PARAM)
    counts: dict[DType, int] = {}
    for p in params:
        counts[p.dtype] = counts.get(p.dtype, 0) + p.type.numel(defaults)
    pdt = _dtype(param_dtype, max(counts, key=lambda d: counts[d]) if counts else DType.BF16)
    gdt, mdt = _dtype(grad_dtype, pdt), _dtype(master, DType.FP32)
    state_bytes = 4 * len(STATES[optimizer]) + (mdt.nbytes(1) if pdt.bits < mdt.bits else 0)

    shard = tp * pp
    weights = _ceil_div(pdt.nbytes(n_train + n_frozen) + buffers, shard * (dp if zero >= 3 else 1))
    grads = _ceil_div(gdt.nbytes(n_train), shard * (dp if zero >= 2 else 1))
    states = _ceil_div(n_train * state_bytes, shard * (dp if zero >= 1 else 1))
    in_flight = 1.0 + ((pp - 1) / (pp * interleave) if interleave > 1 else 0.0)
    activations = _ceil_div(int(live.saved * in_flight), tp)
    temporary = _ceil_div(max(live.peak - live.saved, 0), tp)
    if zero >= 3 and dp > 1:
        per_layer: dict[str, int] = {}
        for p in params:
            key = layer_of_scope(param_scope(p)) or param_scope(p)   # a layer, else its own module
            per_layer[key] = per_layer.get(key, 0) + pdt.nbytes(p.type.numel(defaults))
        temporary += _ceil_div(2 * max(per_layer.values(), default=0), shard)
    config = {"param_dtype": pdt.value, "grad_dtype": gdt.value, "master": mdt.value, "optimizer": optimizer,
              "zero": zero, "dp": dp, "tp": tp, "pp": pp, "interleave": interleave, "recompute": recompute,
              "loss": loss, "dims": bound, "frozen_params": n_frozen}
    return TrainingMemory(weights, grads, states, activations, temporary, n_train,
                          dict(sorted(live.saved_by_layer.items())), config)

