"""What a training step keeps alive, from last uses: the activations saved for the backward (what the
backward and the recomputation actually read, not the forward's peak) and the step's peak.

Why a walk of its own rather than the interpreter's peak: the terms are different questions. A
forward value is *saved* when a backward or recompute node reads it (through any view of it); a
parameter's gradient is the gradients term, not an activation; the optimizer updates its states in
place. The walk is worked out once per training graph with symbolic shapes, and each binding of the
dims (a microbatch size, a sequence length) only evaluates sizes, each distinct shape once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import prod
from weakref import WeakKeyDictionary

from ...ir import Graph, TensorType, Value
from ...ir.ops import storage_operand
from ..interpreter import ShapeBinder
from .phases import BACKWARD, FORWARD, OPTIMIZER, PHASE, RECOMPUTE
from .recompute import layer_of

__all__ = ["StepLiveness", "step_liveness", "LiveBytes"]


@dataclass(frozen=True)
class LiveBytes:
    """Bytes of one microbatch under one binding."""

    saved: int                       # activations kept from the forward for the backward
    peak: int                        # most activation bytes live at once over the step
    saved_by_layer: dict[str, int]   # saved bytes by layer scope ("" outside every layer)


@dataclass
class StepLiveness:
    """The step's storages (symbolic types) with when each is allocated and freed, and which are saved."""

    types: list[TensorType]
    layers: list[str]
    saved: list[bool]
    allocs: dict[int, list[int]]     # node index -> storages allocated there (-1: graph inputs)
    frees: dict[int, list[int]]      # node index -> storages freed after it
    n_nodes: int

    def bytes(self, bindings: Mapping[str, int]) -> LiveBytes:
        binder = ShapeBinder(bindings)
        sizes = [t.dtype.nbytes(prod(binder.bind(t.shape))) for t in self.types]
        by_layer: dict[str, int] = {}
        saved = 0
        for i, s in enumerate(sizes):
            if self.saved[i]:
                saved += s
                by_layer[self.layers[i]] = by_layer.get(self.layers[i], 0) + s
        live = peak = sum(sizes[s] for s in self.allocs.get(-1, ()))
        for i in range(self.n_nodes):
            live += sum(sizes[s] for s in self.allocs.get(i, ()))
            peak = max(peak, live)
            live -= sum(sizes[s] for s in self.frees.get(i, ()))
        return LiveBytes(saved, peak, by_layer)


_CACHE: WeakKeyDictionary[Graph, tuple[int, StepLiveness]] = WeakKeyDictionary()


def step_liveness(graph: Graph) -> StepLiveness:
    """The liveness skeleton of a training graph (cached per graph version)."""
    hit = _CACHE.get(graph)
    if hit is not None and hit[0] == graph.version:
        return hit[1]
    result = _walk(graph)
    _CACHE[graph] = (graph.version, result)
    return result


def _walk(graph: Graph) -> StepLiveness:
    storage: dict[Value, int] = {}
    types: list[TensorType] = []
    layers: list[str] = []
    origin: list[str | None] = []          # the phase that made each storage (None: a graph input)
    allocs: dict[int, list[int]] = {}
    last: list[int] = []
    born: list[int] = []
    read_by: list[set[str]] = []

    def new(v: Value, at: int, layer: str, phase: str | None) -> None:
        storage[v] = len(types)
        types.append(v.type)
        layers.append(layer)
        origin.append(phase)
        last.append(at)
        born.append(at)
        read_by.append(set())
        allocs.setdefault(at, []).append(storage[v])

    for x in graph.inputs:
        new(x, -1, "", None)
    weights = set(graph.weights)
    for i, node in enumerate(graph.nodes):
        phase = node.attrs.get(PHASE)
        for v in node.inputs:
            if v is None or v in weights or v not in storage:
                continue
            s = storage[v]
            last[s] = i
            read_by[s].add(str(phase))
        shared = storage_operand(node.op, node.attrs)
        base = node.inputs[shared] if shared is not None and shared < len(node.inputs) else None
        if phase == OPTIMIZER:
            continue                        # states update in place; nothing new stays live
        for v in node.outputs:
            if base is not None and base in storage:
                storage[v] = storage[base]
            else:
                new(v, i, layer_of(node) or "", str(phase))
    n = len(graph.nodes)
    for v in graph.outputs:
        if v in storage:
            last[storage[v]] = n
    frees: dict[int, list[int]] = {}
    saved = []
    for s in range(len(types)):
        grads = origin[s] == BACKWARD and OPTIMIZER in read_by[s]       # a parameter's gradient
        if origin[s] is None and read_by[s] == {OPTIMIZER}:             # an optimizer state: its own term
            allocs[born[s]].remove(s)
            saved.append(False)
            continue
        kept = origin[s] in (FORWARD, None) and bool(read_by[s] & {BACKWARD, RECOMPUTE})
        saved.append(kept)
        if grads:                           # counted as the gradients term, not as activations
            allocs[born[s]].remove(s)
            continue
        frees.setdefault(last[s], []).append(s)
    return StepLiveness(types, layers, saved, allocs, frees, n)

