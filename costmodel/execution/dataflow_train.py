"""The dataflow layout of a training step: a layer's forward, backward and optimizer on the same chips.

Why a layout of its own: laid out in program order over its footprint, a training step put the whole
forward (and so every weight) on the first chip, the backward on the next and the optimizer's fp32
states on the rest, so every saved activation and every gradient crossed the chip-to-chip link
(Llama-3-8B at 2k tokens on 4 WSE-3s: 102 ms, 99% of it on the 150 GB/s links, against a compute
floor of 0.3 ms). A spatial pipeline keeps what belongs to a layer where the layer is: its weights,
their gradients and their optimizer states are co-resident, the backward of a layer runs on the chips
its forward ran on (the pipeline in reverse), and the update of a parameter runs where the parameter
is (GPipe, Huang et al. 2019; PipeDream, Narayanan et al. SOSP'19). So only the forward is cut into
chips, each forward kernel charged the footprint of what it owns, and every backward and optimizer
kernel follows the forward kernel of its module scope (the training graph keeps the forward's scope on
the backward's nodes, and a parameter's scope on its update).

The footprint terms are :mod:`..training.memory`'s: weights, a gradient and the optimizer states per
parameter, and the activations at the step's peak (saved activations plus the backward's temporaries,
:mod:`..training.liveness`; a gradient and an optimizer state are terms of their own, not activations).
Weight streaming (Cerebras MemoryX: weights and optimizer states stay in the external tier, which runs
the update; activations stay on the wafer) leaves only the activations in fast memory; its kernels
stream the weights they read, forward and backward, and the gradients leave the chip over the same link.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil
from typing import TYPE_CHECKING

from ...backends import DataflowTarget
from ...ir import DimRole, Value
from ..kernels import Kernel
from ..sizes import values_bytes
from .dataflow_layout import Layout, crossing_by_position, cuts, footprint_parts, place, produced_for_later

if TYPE_CHECKING:
    from .program import Program

__all__ = ["TrainingFootprint", "TrainingTerms", "is_training", "training_footprint", "training_terms",
           "training_layout", "training_layouts"]

_PHASE = "phase"            # costmodel.training.phases.PHASE, by name as kernels.py reads it
_OPTIMIZER = "optimizer"
_BACKWARD = "backward"
_LATER = ("backward", "optimizer")       # phases that run where their forward ran


def is_training(program: Program) -> bool:
    """A training step's graph (``build_training_graph`` records its options in ``meta["training"]``)."""
    return "training" in program.table.graph.meta


def _phase(k: Kernel) -> str:
    """A kernel's phase: a step's phases never fuse together, so its anchor's is every node's."""
    phase = k.anchor.attrs.get(_PHASE)
    return phase if isinstance(phase, str) else "forward"


@dataclass(frozen=True)
class TrainingFootprint:
    """What a training step holds, by :mod:`..training.memory`'s terms, in bytes."""

    weights: float
    gradients: float
    optimizer_states: float
    activations: float

    @property
    def resident(self) -> float:
        """What lives with the parameters (the external tier holds it under weight streaming)."""
        return self.weights + self.gradients + self.optimizer_states

    @property
    def total(self) -> float:
        return self.resident + self.activations

    def describe(self) -> str:
        return (f"weights ({self.weights / 1e9:.3g} GB), gradients ({self.gradients / 1e9:.3g} GB) and optimizer "
                f"states ({self.optimizer_states / 1e9:.3g} GB) with activations ({self.activations / 1e9:.3g} GB)")


@dataclass(frozen=True)
class TrainingTerms:
    """A step's footprint per kernel (:func:`training_terms`), worked out once per layout search: every
    layout, its timing and its fit read the same terms (they were walked again for each, with the
    step's liveness, five to six times per timing)."""

    weights: list[float]
    gradients: list[float]
    optimizer_states: list[float]
    peak_activations: float

    @property
    def footprint(self) -> TrainingFootprint:
        return TrainingFootprint(sum(self.weights), sum(self.gradients), sum(self.optimizer_states),
                                 self.peak_activations)

    def streamed_gradients(self, kernels: list[Kernel]) -> dict[str, float]:
        """Under weight streaming, the gradient bytes each update sends to the external tier, where the
        optimizer states live and the update runs (Cerebras MemoryX)."""
        return {k.name: g for k, g in zip(kernels, self.gradients) if g}


def training_terms(program: Program) -> TrainingTerms:
    return TrainingTerms(*_owned(program.kernels, program), _peak_activations(program))


def _owned(kernels: list[Kernel], program: Program) -> tuple[list[float], list[float], list[float]]:
    """Per kernel: its parameters' bytes (first use), and the gradients and optimizer states it reads
    first (an update reads its parameter's gradient, made by the backward, and its states, inputs of
    the step); the gradient of a parameter is what the backward hands its update."""
    table = program.table
    weights = [float(w) for w, _ in footprint_parts(kernels, table)]
    grads, states = [0.0] * len(kernels), [0.0] * len(kernels)
    seen: set[Value] = set()
    for i, k in enumerate(kernels):
        if _phase(k) != _OPTIMIZER:
            continue
        for v in dict.fromkeys(k.inputs):
            if v.kind.is_weight or v in seen:
                continue
            seen.add(v)
            made = v.producer
            if made is None:
                states[i] += values_bytes(table, [v])
            elif made.attrs.get(_PHASE) == _BACKWARD:
                grads[i] += values_bytes(table, [v])
    return weights, grads, states


def _peak_activations(program: Program) -> float:
    """The step's peak of activations and temporaries, gradients and optimizer states apart."""
    from ..training.liveness import step_liveness  # the training wing imports this layer: import late
    table = program.table
    return float(step_liveness(table.graph).bytes(table.bindings).peak)


def training_footprint(program: Program) -> TrainingFootprint:
    return training_terms(program).footprint


def _owners(kernels: list[Kernel]) -> list[int]:
    """The forward kernel each kernel runs beside: itself for the forward; for the backward and the
    optimizer, the first forward kernel of its module scope, or of the nearest enclosing one (a layer's
    backward glue), else the kernel before it's."""
    home: dict[str, int] = {}
    for i, k in enumerate(kernels):
        if _phase(k) not in _LATER:
            scope = k.anchor.source.scope
            while scope:
                home.setdefault(scope, i)
                scope = scope.rpartition(".")[0]
    out: list[int] = []
    for i, k in enumerate(kernels):
        if _phase(k) not in _LATER:
            out.append(i)
            continue
        scope, owner = k.anchor.source.scope, None
        while scope and owner is None:
            owner = home.get(scope)
            scope = scope.rpartition(".")[0]
        out.append(owner if owner is not None else (out[-1] if out else 0))
    return out


def _inbound(kernels: list[Kernel], layout: Layout, program: Program) -> dict[str, float]:
    """Bytes each kernel receives from other chips: every value it reads that a kernel on another
    chip made, once per chip that reads it (a chip keeps what it received)."""
    table = program.table
    made_on: dict[Value, int] = {}
    for k in kernels:
        for v in k.outputs:
            made_on.setdefault(v, layout.chip_of[k.name])
    got: set[tuple[Value, int]] = set()
    out: dict[str, float] = {}
    for k in kernels:
        if k.is_free:
            continue
        chip = layout.chip_of[k.name]
        new = [v for v in dict.fromkeys(k.inputs) if made_on.get(v, chip) != chip and (v, chip) not in got]
        got.update((v, chip) for v in new)
        if new:
            out[k.name] = float(values_bytes(table, new))
    return out


def training_layout(program: Program, terms: TrainingTerms, chips: int, streaming: bool, capacity: float,
                    microbatches: int, fits: bool, notes: list[str]) -> Layout:
    """The forward cut over ``chips`` by what each forward kernel owns (its weights, their gradients
    and optimizer states, its activations at the step's peak; under weight streaming only the
    activations), the backward and optimizer kernels on their forward kernel's chips."""
    kernels = program.kernels
    weights, grads, states, peak = terms.weights, terms.gradients, terms.optimizer_states, terms.peak_activations
    owner = _owners(kernels)
    made = [0.0 if _phase(k) == _OPTIMIZER else float(values_bytes(program.table, k.outputs)) for k in kernels]
    scale = peak / sum(made) if sum(made) > peak else 1.0
    forward = sorted(set(owner))
    index = {i: n for n, i in enumerate(forward)}
    own_w, own_rest = [0.0] * len(forward), [0.0] * len(forward)
    for i, o in enumerate(owner):
        own_w[index[o]] += 0.0 if streaming else weights[i]
        own_rest[index[o]] += (0.0 if streaming else grads[i] + states[i]) + made[i] * scale
    fwd = [kernels[i] for i in forward]
    parts = list(zip(own_w, own_rest))
    cut_list = cuts([w + r for w, r in parts], crossing_by_position(fwd, program.table),
                    produced_for_later(fwd, program.table), capacity, chips) if chips > 1 else []
    chip_of, shares, chip_bytes, chip_weights = place(fwd, parts, cut_list, chips)
    for i, k in enumerate(kernels):
        lead = kernels[owner[i]].name
        chip_of[k.name] = chip_of[lead]
        if lead in shares and k.name != lead:
            shares[k.name] = shares[lead]
    layout = Layout(chips, streaming, chip_of, microbatches, fits, notes, cut_list, shares, chip_bytes,
                    chip_weights, training=terms)
    layout.inbound = _inbound(kernels, layout, program)
    return layout


def training_layouts(program: Program, target: DataflowTarget, limit: int | None, where: str) -> list[Layout]:
    """The layouts of a training step worth timing (as :meth:`.DataflowModel.layouts` for inference):
    over ceil(footprint / fast memory) chips, and, where the chip streams weights, one chip holding
    only the activations (weights, gradients and optimizer states in the external tier) while they fit
    it. The sequences of the batch stream through as microbatches; a sequence's tokens do not (the
    backward of a token needs the gradients of every later one)."""
    terms = training_terms(program)
    fp = terms.footprint
    table = program.table
    cap = target.memory_capacity
    need = max(1, ceil(fp.total / cap))
    m = max(table.graph.role_size(DimRole.BATCH, table.bindings), 1)

    def layout(chips: int, streaming: bool, notes: list[str]) -> Layout:
        fits = not (limit and chips > limit)
        if not fits:
            notes.append(f"needs {chips:,} chips, more than {where}: it does not fit")
        return training_layout(program, terms, chips, streaming, cap, m, fits, notes)

    if not target.weight_streaming or need == 1:
        return [layout(need, False, [])]
    what = f"{fp.describe()} exceed one chip's fast memory ({cap / 1e9:.3g} GB)"
    out = []
    external = target.external_memory_capacity
    if fp.activations <= cap and (not external or fp.resident <= external):
        out.append(layout(1, True, [f"{what}: weights streamed from external memory, which holds the gradients "
                                    f"and optimizer states and runs the update; activations on chip"]))
    if not out or not limit or need <= limit:
        why = "" if out else (f"; streaming the weights would leave {fp.activations / 1e9:.3g} GB of activations "
                              f"for one chip" if fp.activations > cap else
                              f"; weights, gradients and optimizer states exceed the external tier "
                              f"({external / 1e9:.3g} GB)")
        out.append(layout(need, False, [f"{what}: spread over {need} chips, each holding its layers' weights, "
                                        f"gradients and optimizer states{why}"]))
    return out
