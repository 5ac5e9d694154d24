"""One forward step of a serving graph on a target: prefill or decode, timed by the family's model.

A step is ``batch`` sequences each adding ``tokens`` to a KV cache holding ``past`` (prefill:
``tokens`` = the prompt, ``past`` = 0; decode: ``tokens`` = 1, ``past`` = the context). It is the
same interpreter, fusion and execution model as ``analyze``; this module keeps the split serving
needs: the time in attention kernels (which grows with the context) apart from the dense kernels
(which depend only on the number of tokens, so a mixed continuous-batching step runs them once over
all its tokens), and the step's peak activations apart from the cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...backends import Target
from ..execution import DeviceGroup, TimingOptions
from ..execution.common import BOUNDS
from ..interpreter import interpret, peak_activation_bytes
from ..sizes import weight_bytes
from ..timing import fused_program, time_program
from .inplace import cache_storage
from .parallel import stage_end
from .prepare import ServingGraph

_DEFAULT_OPTIONS = TimingOptions()
__all__ = ["StepTime", "StagePart", "time_step", "activation_bytes"]


@dataclass(frozen=True)
class StagePart:
    """Time and work of some of a step's kernels (a pipeline stage's own: the embedding or the head)."""

    time_s: float = 0.0
    flops: int = 0
    bytes: int = 0
    traffic: int = 0


@dataclass(frozen=True)
class StepTime:
    """Predicted time of one step and what it is made of (sums over kernels, one replica).

    ``bytes`` is the unfused ops' compulsory traffic (as ``analyze`` counts it), ``traffic`` the
    fused kernels' (what memory time is charged for). ``attention_s`` is the time of the attention
    kernels, ``dense_s`` the rest; ``comm_s`` includes
    the collectives a parallel layout adds. ``activation_bytes`` is the step's peak of live
    tensors other than the KV cache, per device; ``weight_bytes`` per device too.
    """

    time_s: float
    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float
    attention_s: float
    dense_s: float
    flops: int
    bytes: int
    traffic: int
    kernels: int
    devices: int
    bound: str
    activation_bytes: int
    weight_bytes: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: A dataflow layout that streams the weights from the external tier (they take no fast memory);
    #: for the memory budget, not part of the step's JSON.
    weight_streaming: bool = False
    #: A dataflow layout's bytes in fast memory: (all its chips, their weights, the fullest chip, that
    #: chip's weights); for the memory budget, whose fit is per chip; not part of the step's JSON.
    chip_bytes: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    #: What only a pipeline's first stage (the embedding) and last stage (the final norm and the head)
    #: run (:func:`.parallel.stage_end`); for the pipeline's schedule, not part of the step's JSON.
    ends: tuple[StagePart, StagePart] = (StagePart(), StagePart())

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()
                if k not in ("weight_streaming", "chip_bytes", "ends")}


def time_step(sg: ServingGraph, target: Target, *, batch: int, tokens: int, past: int,
              options: TimingOptions = _DEFAULT_OPTIONS, devices: int | None = None) -> StepTime:
    """The step on ``target`` (a dataflow target lays it out over as many chips as it needs)."""
    bindings = sg.bindings(batch, tokens, past)
    table = interpret(sg.graph, bindings)
    program = fused_program(table, target, options)
    schedule = time_program(program, DeviceGroup(target, devices))
    terms = {"compute": 0.0, "memory": 0.0, "interconnect": 0.0, "overhead": 0.0}
    by_bound = {b: 0.0 for b in BOUNDS}
    attention = 0.0
    ends: dict[str, list[float]] = {"first": [0.0] * 4, "last": [0.0] * 4, "every": [0.0] * 4}
    for kernel, t in zip(program.kernels, schedule.times):
        part = ends[stage_end(kernel.anchor.source.scope)]
        part[0] += t.time_s
        part[3] += kernel.cost.bytes
        terms["compute"] += t.compute_s
        terms["memory"] += t.memory_s
        terms["interconnect"] += t.comm_s
        terms["overhead"] += t.overhead_s
        by_bound[t.bound] += t.time_s
        if kernel.kind == "attention":
            attention += t.time_s
    for node, cost in table.costs.items():
        part = ends[stage_end(node.source.scope)]
        part[1] += cost.flops
        part[2] += cost.bytes
    total = table.total()
    activations = activation_bytes(sg, batch, tokens, past, table)
    return StepTime(
        time_s=schedule.total_s, compute_s=terms["compute"], memory_s=terms["memory"],
        comm_s=terms["interconnect"], overhead_s=terms["overhead"], attention_s=attention,
        dense_s=schedule.total_s - attention, flops=total.flops, bytes=total.bytes,
        traffic=sum(k.cost.bytes for k in program.kernels),
        kernels=sum(1 for k in program.kernels if not k.is_free), devices=schedule.devices,
        bound=max(by_bound, key=by_bound.get) if schedule.total_s > 0 else "overhead",  # type: ignore[arg-type]
        activation_bytes=activations // max(schedule.devices, 1), weight_bytes=weight_bytes(table),
        notes=tuple(schedule.notes), weight_streaming=bool(schedule.layout.get("weight_streaming", False)),
        chip_bytes=_chip_bytes(schedule.layout), ends=(_part(ends["first"]), _part(ends["last"])))


def _part(sums: list[float]) -> StagePart:
    return StagePart(sums[0], int(sums[1]), int(sums[2]), int(sums[3]))


def _chip_bytes(plan: dict[str, Any]) -> tuple[float, float, float, float]:
    """(all chips, their weights, the fullest chip, its weights) of a dataflow plan; zeros otherwise."""
    held, weights = plan.get("chip_bytes") or [], plan.get("chip_weight_bytes") or []
    if not held or len(weights) != len(held):
        return 0.0, 0.0, 0.0, 0.0
    fullest = max(range(len(held)), key=held.__getitem__)
    return float(sum(held)), float(sum(weights)), float(held[fullest]), float(weights[fullest])


def activation_bytes(sg: ServingGraph, batch: int, tokens: int, past: int = 0, table: Any = None) -> int:
    """Peak bytes of live tensors in a step of ``batch`` x ``tokens`` on a cache of ``past`` tokens
    (``table``: that step interpreted, when the caller has it), the KV cache left out (the memory
    budget counts it on its own, every token of the context included).

    The step is the one at its context: what a step holds besides the cache can grow with it. A
    latent-attention step built as transformers runs it expands the whole cache through ``kv_b_proj``
    (DeepSeek-V2-Lite at 4,096 tokens: ~67 MB per sequence and layer of keys and values); a decode
    step's activations were once read at ``past = 0``, so ``serve --mla-decode as-built`` put 0.07 GB
    of activations where ``analyze`` of the same step found 24 GB at batch 356.

    The peak is the interpreter's liveness walk with the cache's storage (its inputs and what each
    append returns, :func:`.inplace.cache_storage`) taken as empty: a static cache's preallocated
    buffer and a copying append's new cache both leave the peak, while an in-place append, which
    holds no storage of its own, never was in it. (Subtracting every new row from the peak, as this
    once did, took out rows an in-place update never put there: Llama-3-8B's prefill at batch 8 x
    2,048 read 1 MB of activations for a 1.5 GB peak.) The new tokens' keys and values, as the
    projections write them before the append, stay in: they are activations."""
    if table is None:
        table = interpret(sg.graph, sg.bindings(batch, tokens, past))
    cache = cache_storage(sg.graph, sg.cache)
    shapes = {v: ((0,) if v in cache else shape) for v, shape in table.shapes.items()}
    return peak_activation_bytes(sg.graph, shapes)
