"""Expert-parallel all-to-alls hidden behind another microbatch's compute (batch-level overlap).

Why: under expert parallelism each MoE layer exchanges its routed rows twice per pass (dispatch,
combine), and a dispatcher that waits for each exchange puts all of it on the critical path (30-40%
of a step, by Megatron-Core's own MoE README). Megatron-Core 0.14 and later
(``--overlap-moe-expert-parallel-comm``, megatron/core/pipeline_parallel/combined_1f1b.py) merge the
forward of one microbatch with the backward of another, layer by layer, on two CUDA streams: "EP A2A
in forward step is hidden by the attention/mlp computation in the backward step, and vice versa"
(DeepSeek-V3's DualPipe pairs them the same way). So, per block and per microbatch:

* the forward's exchanges hide behind the block's backward compute, at most all of it:
  ``hidden_f = min(a2a_f, compute_b)``; the backward's behind the forward compute:
  ``hidden_b = min(a2a_b, compute_f)`` (compute: the pass less its exposed all-to-alls);
* a pass with no partner exposes its exchanges: the schedule runs ``w`` forwards alone before the
  first merged step and ``w`` backwards alone after the last one. Without pipelining ``w = 1``
  (combined_1f1b_schedule_for_no_pipelining: "the first microbatch forward ... executed alone, no
  a2a overlapping", and the last backward likewise); with the interleaved pipeline ``w`` is the
  warmup count of ``get_pp_rank_microbatches`` (schedules.py): ``(pp - rank - 1) x 2 + (v - 1) x pp
  + 1`` model-chunk passes (microbatch_group_size_per_vp_stage = pp, its default), at most ``m v``.
  Each device's passes take the hiding in the share that has a partner, ``1 - w / (m v)``
  (:func:`paired_share`), so the closed form, the simulated schedule and the timeline see the same
  chunk times (the unpaired passes' exposure spread over all of them, not placed at the ends).

Where the runtime's version lacks it, or Megatron-Core's TransformerConfig asserts against the
strategy (``expert_model_parallel_size > 1``; ``recompute_granularity != 'full'``; a pipeline
needs ``virtual_pipeline_model_parallel_size``), nothing is hidden (:func:`applies`). Not modelled:
contention for SMs and links between the two streams (the A2A kernels take SMs from the GEMMs).
"""

from __future__ import annotations

from .block_cost import BlockCost
from .runtime import Runtime
from .strategy import Parallel, warmup_chunk_forwards

__all__ = ["applies", "block_hidden", "unpaired_passes", "paired_share", "why_not", "note"]


def why_not(p: Parallel, runtime: Runtime) -> str | None:
    """Why ``runtime`` cannot overlap ``p``'s expert all-to-alls across microbatches, or None when it does."""
    if not runtime.overlap_ep_comm:
        return f"runtime {runtime.name!r} has no batch-level all-to-all overlap"
    if p.ep == 1:
        return "no expert parallelism"
    if p.recompute == "full":
        return "full recomputation (Megatron-Core asserts recompute_granularity != 'full' with the overlap)"
    if p.pp > 1 and p.interleave == 1:
        return ("a pipeline without interleaving (Megatron-Core asserts virtual_pipeline_model_parallel_size "
                "with the overlap when pp > 1)")
    return None


def applies(p: Parallel, runtime: Runtime) -> bool:
    return why_not(p, runtime) is None


def block_hidden(block: BlockCost) -> tuple[float, float]:
    """Per microbatch, the seconds of ``block``'s forward and backward all-to-alls that the other
    microbatch's pass hides (see the module doc)."""
    a2a_f = sum(u.exposed_s for u in block.collectives if u.axis == "ep" and u.phase == "forward")
    a2a_b = sum(u.exposed_s for u in block.collectives if u.axis == "ep" and u.phase in ("backward", "recompute"))
    if not a2a_f and not a2a_b:
        return 0.0, 0.0
    compute_f = max(0.0, block.forward_s - a2a_f)
    compute_b = max(0.0, block.backward_s - a2a_b)
    return min(a2a_f, compute_b), min(a2a_b, compute_f)


def unpaired_passes(p: Parallel, rank: int) -> int:
    """Model-chunk forward passes (and as many backward) that device ``rank`` runs with no partner."""
    if p.pp == 1:
        return min(1, p.microbatches * p.interleave)
    return warmup_chunk_forwards(p, rank)


def paired_share(p: Parallel, rank: int) -> float:
    """Of device ``rank``'s ``m v`` forward (and backward) chunk passes, the share merged with a partner."""
    total = p.microbatches * p.interleave
    return (total - unpaired_passes(p, rank)) / total if total else 0.0


def note(p: Parallel, runtime: Runtime, exposed_s: float, hidden_s: float) -> str:
    """What the plan assumed of its expert all-to-alls, for its notes."""
    why = why_not(p, runtime)
    if why is None:
        return (f"expert-parallel all-to-alls overlapped across microbatches (Megatron-Core "
                f"--overlap-moe-expert-parallel-comm: one microbatch's forward merged with another's backward): "
                f"{hidden_s * 1e3:.0f} ms hidden, {exposed_s * 1e3:.0f} ms exposed (the passes with no partner, "
                "and what outlasts the partner's compute)")
    return ("expert-parallel all-to-alls are exposed: the all-to-all dispatcher waits for each exchange before the "
            f"experts' GEMMs (no batch-level overlap: {why})")
