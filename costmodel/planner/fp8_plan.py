"""What an FP8 training plan needs of its chip, and the line it prints about what it modelled.

Why apart from the planner: the refusal and the statement are the user-facing edge of
:mod:`..training.fp8_gemms` (the mechanism); the planner only asks for both.
"""

from __future__ import annotations

from typing import Any

from ...backends import Target
from ...errors import PlanError
from ...ir import Op
from ..training.fp8_gemms import FORWARD_FORMAT, GRAD_FORMAT, weight_operand

__all__ = ["check_fp8_target", "fp8_notes", "fp8_flop_share", "FP8_STATEMENT", "TE_RUNTIMES"]

_CONTRACTIONS = (Op.DOT, Op.GROUPED_DOT, Op.CONV, Op.ATTENTION)

#: The one line a plan prints about what FP8 means in it.
FP8_STATEMENT = ("FP8: GEMMs only (Transformer Engine hybrid recipe: E4M3 forward, E5M2 gradients) in the "
                 "transformer layers' Linear modules, each input cast once (fused into the norm or activation "
                 "before it) and each weight once per step; attention, norms, embedding, output layer, loss and "
                 "optimizer in bf16/fp32")


#: The runtimes that train with Transformer Engine's FP8 recipe (the one modelled): Megatron-Core.
#: Megatron-LM 2021 predates FP8 tensor cores; MaxText's fp8 is XLA's own quantization of its dots.
TE_RUNTIMES = ("megatron-core",)


def check_fp8_target(target: Target, runtime: str = "megatron-core") -> None:
    """Refuse a chip whose spec lists no FP8 matrix rate (A100, V100: their tensor cores have none),
    or that is no GPU: the recipe is Transformer Engine's, which runs on NVIDIA and AMD (ROCm) GPUs;
    and a runtime that does not run Transformer Engine."""
    if runtime not in TE_RUNTIMES:
        raise PlanError(f"plan --dtype fp8: runtime {runtime!r} does not train with Transformer Engine's FP8 "
                        f"recipe, the one modelled (runtimes that do: {', '.join(TE_RUNTIMES)}); plan in --dtype "
                        "bf16, or with --runtime megatron-core")
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
    share = fp8_flop_share(planner)
    peak = "the FP8 peak" if share > 0.5 else "the bf16 peak"
    notes.append(f"FP8: the FP8 GEMMs do {share:.0%} of the model's matmul FLOPs, so MFU is against {peak} (the "
                 "precision that does most of them, analyze's convention); the FP8 weight casts are in the "
                 "optimizer term, their copies in the weights")
    return notes


def fp8_flop_share(planner: Any) -> float:
    """The share of the forward's contraction FLOPs (matmuls, grouped matmuls, convolutions, attention)
    that an FP8 plan runs in FP8: the DOTs with a parameter operand in the transformer layers, what
    :func:`..training.fp8_gemms.fp8_linear_gemms` rewrites (the backward's FP8 dgrad/wgrad are twice
    these, as the rest's backward is twice the rest, so the forward's share is the step's). Each
    distinct block counted once, times how often it occurs, as the planner's model FLOPs are."""
    counted: dict[int, tuple[float, float]] = {}
    fp8 = total = 0.0
    for block in planner.blocks.all:
        if id(block) not in counted:
            table = planner.forward_table(block)
            f = t = 0.0
            for node, cost in table.costs.items():
                if node.op in _CONTRACTIONS:
                    t += cost.flops
                    if block.kind == "layer" and node.op is Op.DOT and weight_operand(node) is not None:
                        f += cost.flops
            counted[id(block)] = (f, t)
        fp8 += counted[id(block)][0]
        total += counted[id(block)][1]
    return fp8 / total if total else 0.0
