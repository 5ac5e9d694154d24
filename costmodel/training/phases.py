"""The phases of a training step, carried by every node of a training graph as its ``phase`` attr.

Why an attribute rather than four graphs: the step is one program (the backward reads what the forward
saved, the optimizer reads what the backward produced), so liveness, fusion and timing need it whole,
while reports still group FLOPs and time by phase (``Report.flops_by_phase``). A node without the
attribute belongs to no phase (an inference graph).
"""

from __future__ import annotations

from ...ir import Node

__all__ = ["PHASE", "FORWARD", "RECOMPUTE", "BACKWARD", "OPTIMIZER", "PHASES", "phase_of"]

#: The node attribute naming the phase.
PHASE = "phase"
FORWARD = "forward"
#: Forward ops run again during the backward (activation recomputation), counted apart from the forward.
RECOMPUTE = "recompute"
BACKWARD = "backward"
OPTIMIZER = "optimizer"
#: In the order they run.
PHASES = (FORWARD, RECOMPUTE, BACKWARD, OPTIMIZER)


def phase_of(node: Node) -> str | None:
    phase = node.attrs.get(PHASE)
    return phase if isinstance(phase, str) else None
