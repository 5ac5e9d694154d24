"""Memory per device of a strategy, by term, from the per-block costs: what a pipeline stage holds.

Why composed here rather than read off one graph: a device holds its stage's blocks only, each
parameter shard once, and the activations of every microbatch the schedule has in flight (1F1B's
first stage holds ``p`` microbatches of its layers; interleaving adds the chunks of the warm-up,
Megatron-LM's ``(p - 1) * 2 + (v - 1) * p + 1`` chunk-forwards). The per-block numbers (local
parameter bytes, activations saved for the backward, the working set of the step beyond them) come
from the block's own sharded training program, counted by liveness.

Bytes per parameter follow mixed-precision Adam (Micikevicius et al. 2018; Rajbhandari et al.,
ZeRO, SC'20): the parameter in its training dtype, a gradient in the runtime's reduction dtype, an
fp32 master copy when the parameter is narrower, and two fp32 Adam moments; ZeRO-1 shards the
optimizer states (master and moments) over the data-parallel ranks, ZeRO-2 the gradients too,
ZeRO-3 the parameters as well (one block's parameters are gathered at a time).
"""

from __future__ import annotations

from dataclasses import dataclass

from .runtime import Runtime
from .step import DeviceLoad
from .strategy import Parallel, warmup_chunk_forwards

__all__ = ["DeviceMemory", "device_memory", "OPTIMIZER_STATES"]

#: fp32 states per parameter the optimizer keeps (Adam: first and second moments).
OPTIMIZER_STATES = {"adam": 2, "adamw": 2, "momentum": 1, "sgd": 0}


@dataclass(frozen=True)
class DeviceMemory:
    """Bytes one device holds, by term; ``device`` is which pipeline stage it is."""

    device: int
    weights: float
    gradients: float
    optimizer_states: float
    activations: float
    workspace: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer_states + self.activations + self.workspace

    def terms(self) -> dict[str, float]:
        return {"weights": self.weights, "gradients": self.gradients, "optimizer_states": self.optimizer_states,
                "activations": self.activations, "workspace": self.workspace}

    def overflow(self, capacity: float) -> list[tuple[str, float]]:
        """Terms by size when the total exceeds ``capacity``: what to shrink first, largest first."""
        if self.total <= capacity:
            return []
        return sorted(self.terms().items(), key=lambda kv: -kv[1])


def in_flight(p: Parallel, stage: int) -> float:
    """Microbatches of a whole stage whose activations device ``stage`` holds at its peak."""
    if p.pp == 1:
        return 1.0
    if p.interleave == 1:
        return float(min(p.pp - stage, p.microbatches))
    return warmup_chunk_forwards(p, stage) / p.interleave


def device_memory(p: Parallel, load: DeviceLoad, runtime: Runtime, optimizer: str = "adam",
                  param_dtype_bytes: int = 2) -> DeviceMemory:
    """Memory of the pipeline device that runs ``load`` (its layers, plus the embedding or head).
    ZeRO shards the dense parameters' states over ``dp x cp`` and the experts' over their own
    replicas, ``dp x cp / ep`` (Megatron-Core's and DeepSpeed-MoE's expert data-parallel group)."""
    grad = runtime.grad_reduce_dtype.nbytes(1)
    fp32_only = runtime.fp32_weights and param_dtype_bytes < 4    # the fp32 weights are the master copy
    master = 4 if runtime.master_weights and param_dtype_bytes < 4 and not fp32_only else 0
    per_state = master + 4 * OPTIMIZER_STATES.get(optimizer, 2)
    weights = grads = states = 0.0
    for params, pbytes, dp in ((load.params - load.expert_params, load.param_bytes - load.expert_param_bytes,
                                p.dp * p.cp), (load.expert_params, load.expert_param_bytes, p.axis("edp")[0])):
        weights += (4 * params if fp32_only else pbytes) / (dp if p.zero >= 3 else 1)
        grads += params * grad / (dp if p.zero >= 2 else 1)
        states += params * per_state / (dp if p.zero >= 1 else 1)
    weights += load.fp8_weight_bytes       # FP8 training: the resident FP8 copies (value + transpose)
    if p.zero >= 3:
        # the shard plus the gathered block (and the next one, prefetched)
        weights += 2 * load.largest_param_bytes
    activations = load.saved_bytes * in_flight(p, load.index)
    return DeviceMemory(load.index, weights, grads, states, activations, float(load.transient_bytes))
