"""What an FP8 training plan needs of its chip, and the line it prints about what it modelled.

Why apart from the planner: the refusal and the statement are the user-facing edge of
:mod:`..training.fp8_gemms` (the mechanism); the planner only asks for both.
"""

from __future__ import annotations

from typing import Any

from ...backends import Target
from ...errors import PlanError
from ...ir import Op
from ..training.fp8_gemms import FORWARD_FORMAT, GRAD_FORMAT

__all__ = ["check_fp8_target", "fp8_notes", "FP8_STATEMENT"]

#: The one line a plan prints about what FP8 means in it.
FP8_STATEMENT = ("FP8: GEMMs only (Transformer Engine hybrid recipe: E4M3 forward, E5M2 gradients) in the "
                 "transformer layers' Linear modules, each input cast once (fused into the norm or activation "
                 "before it) and each weight once per step; attention, norms, embedding, output layer, loss and "
                 "optimizer in bf16/fp32")


def check_fp8_target(target: Target) -> None:
    """Refuse a chip whose spec lists no FP8 matrix rate (A100, V100: their tensor cores have none),
    or that is no GPU: the recipe is Transformer Engine's, which runs on NVIDIA and AMD (ROCm) GPUs."""
    missing = [d.value for d in (FORWARD_FORMAT, GRAD_FORMAT) if d.value not in target.matrix_flops]
    if missing:
        raise PlanError(f"plan --dtype fp8: {target.name} has no FP8 tensor rate (its spec lists no "
                        f"{' or '.join(missing)} matrix rate), so its GEMMs cannot run in FP8; plan in --dtype bf16")
    if target.family != "gpu":
        raise PlanError(f"plan --dtype fp8: {target.name} is a {target.family} chip; FP8 training is modelled as "
                        "Transformer Engine runs it on GPUs (NVIDIA, AMD ROCm), not as a TPU or other compiler "
                        "would; plan in --dtype bf16")


def fp8_notes(planner: Any) -> list[str]:
    """The plan's FP8 statement (nothing for a plan without FP8), and what it leaves in bf16."""
    if not planner.runtime.fp8:
        return []
    notes = [FP8_STATEMENT]
    if any(n.op is Op.GROUPED_DOT for n in planner.graph.nodes):
        notes.append("FP8: the routed experts' grouped GEMMs are costed in bf16 (Transformer Engine's FP8 "
                     "GroupedLinear is not modelled), so this MoE plan understates FP8's speed-up")
    notes.append("FP8: MFU is against the bf16 peak (the model FLOPs are the same; the rate they could reach "
                 "is not); the FP8 weight casts are in the optimizer term, their copies in the weights")
    return notes
