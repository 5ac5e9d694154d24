"""The training step: backward derived from the forward graph op by op, activation recomputation,
the optimizer update, and memory per device (weights, gradients, optimizer states, activations kept
for the backward) under ZeRO/FSDP and tensor/pipeline parallelism.

``build_training_graph(graph)`` returns one IR graph for the whole step (every node tagged with its
phase); ``training_memory(graph, ...)`` says what a device holds and which term overflows.
"""

from .memory import TERMS, TrainingMemory, training_memory
from .phases import BACKWARD, FORWARD, OPTIMIZER, PHASE, PHASES, RECOMPUTE, phase_of
from .step import build_training_graph, differentiable_outputs, is_training_graph

__all__ = ["build_training_graph", "differentiable_outputs", "is_training_graph", "training_memory",
           "TrainingMemory", "TERMS", "PHASE", "PHASES", "FORWARD", "RECOMPUTE", "BACKWARD", "OPTIMIZER", "phase_of"]
