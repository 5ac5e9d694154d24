"""What the training framework does besides the math: which communication it overlaps with compute,
how it runs attention, what precision its gradients travel in.

Why a named profile rather than loose flags: a prediction is only comparable with a measurement
made under the same runtime, and runtimes differ in exactly these choices. Megatron-LM as of the
SC'21 paper reduced data-parallel gradients after the backward pass, ran attention unfused with
dropout, and did not overlap tensor-parallel collectives; Megatron-Core today overlaps the gradient
reduction with the backward, prefetches ZeRO/FSDP parameters, and runs fused (flash) attention.
MaxText (JAX/XLA) recomputes by JAX checkpoint policies (``dots``: the weights' matmul outputs kept),
which Megatron does not offer, and shards with FSDP rather than the distributed optimizer.
Every field says where it comes from; the planner never fits them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import PlanError
from ...ir import DType

__all__ = ["Runtime", "RUNTIMES", "get_runtime"]

_MT = "github.com/AI-Hypercomputer/maxtext"

#: Fields a plan does not record (see :meth:`Runtime.to_dict`).
_NOT_RECORDED = ("sources", "sequence_parallel", "zero_stages", "recompute_modes", "context_parallel",
                 "expert_parallel", "moe_tp_needs_sp", "overlap_ep_comm")


@dataclass(frozen=True)
class Runtime:
    name: str
    #: Data-parallel gradients reduced in buckets while the backward still runs (else after it).
    overlap_grad_reduce: bool = True
    #: ZeRO-3/FSDP parameter all-gathers prefetched one layer ahead, hidden behind compute.
    overlap_param_gather: bool = True
    #: Tensor-parallel collectives overlapped with their GEMMs (else exposed, in the layer's time).
    overlap_tp_comm: bool = False
    #: Expert-parallel all-to-alls hidden behind another microbatch's compute, the forward of one
    #: merged with the backward of the next (:mod:`.ep_overlap`). Not recorded in a plan: a plan that
    #: used it shows the hidden seconds (``hidden_comm['ep_comm']``) and says so in its notes.
    overlap_ep_comm: bool = False
    #: Pipeline activations sent split over the tensor-parallel ranks' links, all-gathered after.
    pipeline_scatter_gather: bool = True
    #: ``fused`` (flash attention: one kernel, scores never stored) or ``unfused`` (QK^T, softmax,
    #: dropout and PV as separate kernels with the scores in memory).
    attention: str = "fused"
    #: The layout a fused attention reads and writes: ``sbhd`` (Megatron-Core: its output is already
    #: the output projection's ``[s, b, h*d]``, so the transpose to it is a view and nothing is copied)
    #: or ``bhsd`` (torch's SDPA: the transpose after it is a copy, ``.contiguous()``, that the
    #: projection saves beside the attention's own output).
    attention_layout: str = "sbhd"
    #: A gated MLP's activation and gate product run as one kernel that saves only its input (the gate
    #: and up projections) and computes the activation again in its backward (else: as eager torch,
    #: which saves the activation's output for the product's backward too).
    fused_glu: bool = True
    #: An RMS norm spelled as elementwise steps (an exported Hugging Face ``RMSNorm``: cast, square,
    #: mean, rsqrt, scale, cast back, weight) runs as one fused norm kernel that saves its input and
    #: the per-row scale (else: each step saves what its own backward reads, as eager torch does).
    fused_norm: bool = True
    #: The vocabulary is padded to a multiple of this times ``tp`` (Megatron's
    #: ``--make-vocab-size-divisible-by``), so every tensor-parallel rank holds an equal slice of the
    #: embedding and the head, and computes logits for the padding rows too. 1: no padding.
    vocab_multiple: int = 128
    #: Dropout after attention probabilities and on the residual branches (0: none).
    dropout: float = 0.0
    #: Precision the data-parallel gradient reduction runs in.
    grad_reduce_dtype: DType = DType.FP32
    #: fp32 master copy of the weights kept by the optimizer (mixed-precision training).
    master_weights: bool = True
    #: The weights live in fp32 only and are cast to the compute dtype where a layer reads them
    #: (MaxText), so the resident weights take 4 bytes per parameter and there is no second,
    #: master copy; the gathered (FSDP) weights are the cast ones. False: the model's dtype plus
    #: the ``master_weights`` copy.
    fp32_weights: bool = False
    #: Layers per pipeline chunk: ``uniform`` (equal counts, the embedding and head on top) or
    #: ``balanced`` (contiguous runs balanced by time, the embedding and head counted in).
    stage_split: str = "balanced"
    #: Fusion mode of the execution model: ``full`` (compiler-style epilogues into GEMMs) or
    #: ``no-epilogue`` (library GEMMs; elementwise chains and norms fuse among themselves).
    fusion: str = "full"
    #: What the framework offers beyond data, tensor and pipeline parallelism (a strategy using
    #: anything else is one it cannot run, so the search never picks it): sequence parallelism,
    #: the ZeRO stages, the recomputation modes, context and expert parallelism.
    sequence_parallel: bool = True
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    recompute_modes: tuple[str, ...] = ("none", "selective", "full")
    context_parallel: bool = True
    expert_parallel: bool = True
    #: A mixture of experts under tensor parallelism trains only with sequence parallelism on (the
    #: framework refuses the pair otherwise), so the search never picks it and a fixed one is refused.
    moe_tp_needs_sp: bool = False
    #: FP8 training recipe: "" (none: the model's own precision) or "hybrid", Transformer Engine's
    #: default (E4M3 forward, E5M2 gradients) feeding only the Linear layers' GEMMs in FP8
    #: (:mod:`..training.fp8_gemms`); set by ``plan(dtype="fp8")``.
    fp8: str = ""
    #: A mixture of experts' tokens reach the experts through dense one-hot einsums into per-sequence
    #: buckets of ``int(S k / E x moe_capacity_factor)`` slots (GShard-style token dropping,
    #: :mod:`.moe_capacity`); 0: dropless (sorted rows through a grouped GEMM).
    moe_capacity_factor: float = 0.0
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.attention not in ("fused", "unfused"):
            raise PlanError(f"runtime {self.name!r}: attention must be 'fused' or 'unfused', got {self.attention!r}")
        if self.attention_layout not in ("sbhd", "bhsd"):
            raise PlanError(f"runtime {self.name!r}: attention_layout must be 'sbhd' or 'bhsd', "
                            f"got {self.attention_layout!r}")
        if self.vocab_multiple < 1:
            raise PlanError(f"runtime {self.name!r}: vocab_multiple must be at least 1, got {self.vocab_multiple!r}")
        if self.stage_split not in ("uniform", "balanced"):
            raise PlanError(f"runtime {self.name!r}: stage_split must be 'uniform' or 'balanced'")
        if self.fp8 not in ("", "hybrid"):
            raise PlanError(f"runtime {self.name!r}: fp8 must be '' or 'hybrid', got {self.fp8!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise PlanError(f"runtime {self.name!r}: dropout must be in [0, 1), got {self.dropout!r}")

    def unsupported(self, choices: Mapping[str, Any]) -> str | None:
        """Why this runtime cannot run the strategy choices ``choices`` (any of ``sequence_parallel``,
        ``zero``, ``recompute``, ``cp``, ``ep``, as a :class:`.Parallel` names them), or None."""
        why = []
        if choices.get("sequence_parallel") and not self.sequence_parallel:
            why.append("sequence parallelism")
        if "zero" in choices and int(choices["zero"]) not in self.zero_stages:
            why.append(f"ZeRO-{int(choices['zero'])} (it offers ZeRO {', '.join(map(str, self.zero_stages))})")
        if "recompute" in choices and choices["recompute"] not in self.recompute_modes:
            why.append(f"recompute={choices['recompute']} (it offers {', '.join(self.recompute_modes)})")
        if int(choices.get("cp", 1)) > 1 and not self.context_parallel:
            why.append("context parallelism")
        if int(choices.get("ep", 1)) > 1 and not self.expert_parallel:
            why.append("expert parallelism")
        return f"runtime {self.name!r} has no " + "; no ".join(why) if why else None

    def moe_tp_refusal(self, tp: int, sequence_parallel: bool) -> str | None:
        """Why this runtime cannot train a mixture of experts at ``tp`` without sequence parallelism, or None."""
        if not self.moe_tp_needs_sp or tp == 1 or sequence_parallel:
            return None
        return (f"runtime {self.name!r} trains a mixture of experts with tensor parallelism (tp={tp}) only with "
                f"sequence parallelism: {self.sources.get('moe_tp_needs_sp', 'its MoE layer refuses the pair')}")

    def to_dict(self) -> dict[str, Any]:
        """The behaviour a plan assumed. What the runtime offers the search (``sequence_parallel``
        ... ``expert_parallel``) is left out, like ``sources``: the plan's strategy says what it used."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in _NOT_RECORDED}
        out["grad_reduce_dtype"] = self.grad_reduce_dtype.value
        if not self.fp8:                # recorded only when set, so a bf16 plan's record is unchanged
            out.pop("fp8")
        if not self.fp32_weights:       # likewise (plan version 9)
            out.pop("fp32_weights")
        if not self.moe_capacity_factor:    # likewise (plan version 10)
            out.pop("moe_capacity_factor")
        return out


RUNTIMES: dict[str, Runtime] = {
    "megatron-core": Runtime(
        "megatron-core", overlap_grad_reduce=True, overlap_param_gather=True, overlap_tp_comm=False,
        attention="fused", dropout=0.0, grad_reduce_dtype=DType.FP32, moe_tp_needs_sp=True, overlap_ep_comm=True,
        sources={
            "overlap_grad_reduce": "Megatron-Core DistributedDataParallelConfig.overlap_grad_reduce (bucketed "
                                   "all-reduce/reduce-scatter during backward)",
            "overlap_param_gather": "Megatron-Core distributed optimizer overlap_param_gather; PyTorch FSDP "
                                    "forward/backward prefetch",
            "overlap_tp_comm": "Megatron-Core: TP comm overlap (tp_comm_overlap, Transformer Engine userbuffers) "
                               "is opt-in, off by default",
            "attention": "Megatron-Core uses Transformer Engine fused (flash) attention by default",
            "attention_layout": "Megatron-Core keeps activations [s, b, h] and hands attention q, k, v as "
                                "[s, b, heads, head_dim] (TEDotProductAttention qkv_format 'sbhd'); its output "
                                "is viewed as [s, b, h] for linear_proj, no transpose or copy",
            "fused_glu": "Megatron-Core megatron/core/fusions/fused_bias_swiglu.py: SwiGLUFunction.forward saves "
                         "only its input and swiglu_back recomputes SiLU (bias_swiglu_fusion, on by default with "
                         "--swiglu; fused_bias_geglu.py likewise for GeGLU)",
            "fused_norm": "Megatron-Core normalizes with Transformer Engine's fused LayerNorm/RMSNorm (TENorm), "
                          "one kernel saving its input and the per-row statistics",
            "vocab_multiple": "Megatron --make-vocab-size-divisible-by (default 128): _vocab_size_with_padding "
                              "pads the vocabulary to a multiple of it x tensor-parallel size",
            "stage_split": "Megatron-Core can split pipeline layers unevenly (decoder_first/last_pipeline_num_layers, "
                           "account_for_embedding/loss_in_pipeline_split); the planner balances by time",
            "grad_reduce_dtype": "Megatron-Core accumulates and reduces gradients in fp32 by default for bf16 "
                                 "(accumulate_allreduce_grads_in_fp32)",
            "zero_stages": "Megatron-Core (core 0.20.0, megatron/training/arguments.py): ZeRO-1 is "
                           "--use-distributed-optimizer, ZeRO-2/3 Megatron FSDP's --data-parallel-sharding-strategy "
                           "optim_grads / optim_grads_params; neither refuses pipeline parallelism (only "
                           "--use-torch-fsdp2 asserts pipeline_model_parallel_size == 1)",
            "sequence_parallel": "Megatron-Core --sequence-parallel (Korthikanti et al. 2022)",
            "recompute_modes": "Megatron-Core --recompute-granularity selective | full",
            "overlap_ep_comm": "Megatron-Core --overlap-moe-expert-parallel-comm (ModelParallelConfig."
                               "overlap_moe_expert_parallel_comm, from core_v0.14.0; megatron/core/pipeline_parallel/"
                               "combined_1f1b.py: 'EP A2A in forward step is hidden by the attention/mlp computation "
                               "in the backward step, and vice versa'); opt-in like --overlap-grad-reduce, and "
                               "--emit megatron passes it when the plan used it. Off for MoE runs measured before "
                               "core 0.14 (benchmarks/moe_validate.py: MCore v0.9)",
            "moe_tp_needs_sp": "Megatron-Core MoELayer.forward (megatron/core/transformer/moe/moe_layer.py, "
                               "core_v0.12.0 through main d98e8a64) raises ValueError 'During training, performance "
                               "may degrade if MoE and tensor parallelism are enabled without also enabling "
                               "sequence parallelism' when the tensor-parallel group is larger than 1 and "
                               "--sequence-parallel is off",
        }),
    "megatron-lm-2021": Runtime(
        "megatron-lm-2021", overlap_grad_reduce=False, overlap_param_gather=False, overlap_tp_comm=False,
        pipeline_scatter_gather=True, attention="unfused", attention_layout="bhsd", fused_glu=False,
        fused_norm=False, dropout=0.1, grad_reduce_dtype=DType.FP16,
        stage_split="uniform", fusion="no-epilogue", sequence_parallel=False, zero_stages=(0,),
        recompute_modes=("none", "full"), context_parallel=False, expert_parallel=False, sources={
            "stage_split": "Megatron-LM v2 gives every pipeline chunk num_layers / (pp x v) layers (it asserts "
                           "divisibility); the embedding sits on the first stage, the head on the last",
            "fusion": "Megatron-LM v2 runs its GEMMs through cuBLAS via torch (no epilogue fusion); bias+GeLU "
                      "and bias+dropout+add are separate fused kernels (megatron/model/fused_bias_gelu.py, "
                      "fused_bias_dropout_add), layer norm is Apex's fused kernel",
            "overlap_grad_reduce": "Narayanan et al. SC'21 / Megatron-LM v2 (2021): the local DDP all-reduces "
                                   "the contiguous gradient buffer after the backward pass of the last microbatch",
            "pipeline_scatter_gather": "Narayanan et al. SC'21, section 4.1 (scatter/gather communication "
                                       "optimization)",
            "attention": "Megatron-LM v2 (2021) attention: batched matmul for QK^T, fused scale-mask-softmax "
                         "kernel, dropout, batched matmul with V (no flash attention until 2022)",
            "dropout": "Megatron-LM GPT defaults: attention and hidden dropout 0.1",
            "attention_layout": "Megatron-LM v2.5 megatron/model/transformer.py: the context [b, np, sq, hn] is "
                                "permuted to [sq, b, np, hn] and made contiguous (a copy) before the dense "
                                "projection",
            "fused_glu": "Megatron-LM v2.5 has no gated MLP (GeLU only): a gated model runs as eager torch",
            "fused_norm": "Megatron-LM v2.5 has LayerNorm only (Apex FusedLayerNorm, one LAYER_NORM op here); an "
                          "RMS norm spelled as steps runs as eager torch",
            "vocab_multiple": "Megatron-LM v2.5 --make-vocab-size-divisible-by (default 128), padded to a "
                              "multiple of it x tensor-parallel size",
            "grad_reduce_dtype": "Megatron-LM v2 fp16 training all-reduces fp16 gradients (main_grad buffer in "
                                 "fp16 unless --accumulate-allreduce-grads-in-fp32)",
            "overlap_tp_comm": "Narayanan et al. SC'21: tensor-parallel all-reduces are on the critical path",
            "sequence_parallel": "Megatron-LM v2.5 (tag v2.5, 2021-08-10, megatron/arguments.py) has no "
                                 "--sequence-parallel: it came in 2022 with Korthikanti et al.",
            "zero_stages": "Megatron-LM v2.5 has data parallelism through its local or torch DDP only; the "
                           "distributed optimizer (ZeRO-1, --use-distributed-optimizer) came in 2022, sharded "
                           "gradients and parameters later with Megatron FSDP",
            "recompute_modes": "Megatron-LM v2.5: --checkpoint-activations recomputes whole layers (full); "
                               "selective recomputation (--recompute-granularity) came in 2022",
            "context_parallel": "Megatron-LM v2.5 has no context parallelism (Megatron-Core, 2023)",
            "expert_parallel": "Megatron-LM v2.5 has no mixture-of-experts layers",
            "overlap_ep_comm": "Megatron-LM v2.5 has no mixture-of-experts layers, so no all-to-alls to overlap",
        }),
    "maxtext": Runtime(
        "maxtext", overlap_grad_reduce=True, overlap_param_gather=True, overlap_tp_comm=False,
        pipeline_scatter_gather=True, attention="fused", attention_layout="sbhd", fused_glu=False, fused_norm=False,
        vocab_multiple=1, dropout=0.0, grad_reduce_dtype=DType.FP32, master_weights=True, fp32_weights=True,
        stage_split="uniform",
        fusion="full", sequence_parallel=True, zero_stages=(0, 1, 3), recompute_modes=("none", "dots", "full"),
        context_parallel=True, expert_parallel=True, sources={
            "name": f"{_MT}: JAX/XLA as MaxText runs it; 2023 = the v5p/v5e/v4 tables' commit 76bd53b0f "
                    "(MaxText/configs/base.yml), head = the snapshot e591f30 (src/maxtext/configs/base.yml)",
            "overlap_grad_reduce": "the tables' run scripts (configs/v5p/*.sh, 2023) set LIBTPU_INIT_ARGS "
                                   "--xla_tpu_enable_data_parallel_all_reduce_opt=true "
                                   "--xla_tpu_enable_async_collective_fusion=true: XLA's async collectives run "
                                   "the gradient reduce-scatters under the backward",
            "overlap_param_gather": "the same scripts: --xla_enable_async_all_gather=true "
                                    "--xla_tpu_enable_ag_backward_pipelining=true (FSDP all-gathers issued ahead "
                                    "of the layer that reads them)",
            "overlap_tp_comm": "assumption: off. A tensor-parallel all-gather/reduce-scatter sits between "
                               "dependent matmuls; XLA hides it only with collective matmul (windowed einsum, "
                               "--xla_tpu_enable_windowed_einsum_for_*), which the tables' scripts do not set",
            "pipeline_scatter_gather": "base.yml logical_axis_rules (both commits): activation_embed -> tensor, "
                                       "so a stage's activations leave it sharded over the tensor axis",
            "attention": "base.yml 2023: attention 'flash' (Pallas TPU flash attention); head: 'autoselected' "
                         "(splash/flash on TPU, cudnn_flash_te on GPU)",
            "attention_layout": "assumption: XLA folds the transposes around the attention kernel into the "
                                "projections' dot_general dimension numbers (layout assignment), no saved copy",
            "fused_glu": "JAX saves each primitive's VJP residuals (silu's input and output, the product's "
                         "operands); under scan_layers (base.yml default True) they leave the forward scan as "
                         "stacked outputs, so XLA cannot recompute them in the backward: eager-like, unless "
                         "the remat policy recomputes them (dots, full)",
            "fused_norm": "MaxText's RMSNorm (layers/normalizations.py) is jnp steps (fp32 cast, mean of squares, "
                          "rsqrt, scale): JAX saves their residuals as eager torch does (see fused_glu)",
            "vocab_multiple": "MaxText has no vocabulary padding option (base.yml 2023: vocab_size 32_768 "
                              "'powers of 2 for sharding'); GSPMD pads an uneven tensor split to equal shards",
            "dropout": "base.yml: dropout_rate 0 (2023) / 0.0 (head)",
            "grad_reduce_dtype": "the weights are fp32 (2023: MaxText/layers/linears.py DenseGeneral creates its "
                                 "kernel as jnp.float32; head: base.yml weight_dtype float32), so are their "
                                 "gradients (head: grad_dtype float32)",
            "master_weights": "the optimizer updates fp32 weights (optax on the fp32 params)",
            "fp32_weights": "MaxText keeps fp32 weights only and casts them to dtype bfloat16 per use "
                            "(2023: linears.py jnp.asarray(kernel, self.dtype); head: base.yml weight_dtype "
                            "float32): 4 bytes a parameter, no second copy; the cast is elementwise, so GSPMD "
                            "gathers an FSDP-sharded weight after it, in bfloat16",
            "stage_split": "base.yml (head): decoder layers = stages x num_layers_per_pipeline_stage x "
                           "num_pipeline_repeats, equal per stage",
            "fusion": "XLA fuses elementwise producers and consumers into the dots' fusions on TPU (output fusion)",
            "sequence_parallel": "base.yml activation_embed -> tensor (both commits): between layers the "
                                 "activations are sharded over the tensor axis (by the hidden dim, not the "
                                 "sequence; head: ici_tensor_sequence_parallelism by the sequence), the same "
                                 "all-gathers and reduce-scatters and 1/tp memory as Megatron's sequence parallelism",
            "zero_stages": "ici_fsdp_parallelism (ZeRO-3: weights, gradients and optimizer states sharded), "
                           "ici_data_parallelism (plain DP); head: shard_optimizer_over_data 'Enable ZeRO-1 "
                           "optimizer sharding over data axis' (opt_state only, maxtext_utils.py). No ZeRO-2",
            "recompute_modes": "remat_policy: none; minimal = jax.checkpoint_policies.checkpoint_dots_with_no_"
                               "batch_dims (MaxText/layers/models.py, 2023; head layers/decoders.py saves the "
                               "q/k/v/out and MLP projections by name, the same values) -> dots; full = policy "
                               "None (nothing saved but the layer input) -> full",
            "context_parallel": "base.yml: ici_context_parallelism (head)",
            "expert_parallel": "base.yml: ici_expert_parallelism (head)",
            "overlap_ep_comm": "off: base.yml (head) use_batch_split_schedule (default false; 'Currently only "
                               "implemented with DeepSeek sparse layers') is MaxText's all-to-all/compute overlap, "
                               "and the tables' runs predate it",
            "moe_tp_needs_sp": "src/maxtext/layers/moe.py (head) raises nothing on a tensor axis without "
                               "sequence sharding: GSPMD shards the experts' inputs as the logical axis rules say",
            "moe_capacity_factor": "base.yml@e7292a3a: megablox True, capacity_factor -1.0 ('no dropping by "
                                   "default'): dropless, sorted rows through the megablox grouped GEMM",
            "pipeline": "base.yml (head): ici_pipeline_parallelism with a circular schedule "
                        "(num_pipeline_repeats); its bubble (p-1)/(r m + p-1) is the interleaved schedule's. Not "
                        "modelled: JAX runs the microbatches' forwards before their backwards, so activations "
                        "in flight are bounded by the remat policy, not by 1F1B",
        }),
}

RUNTIMES["maxtext-dropped"] = dataclasses.replace(
    RUNTIMES["maxtext"], name="maxtext-dropped", moe_capacity_factor=1.25,
    sources={**RUNTIMES["maxtext"].sources,
             "name": f"{_MT}: MaxText with token-dropping experts (megablox: False, capacity_factor > 0), as the "
                     "published Mixtral runs: benchmarks/maxtext_trillium_model_configs.py mixtral_8x7b_dropped "
                     "at e7292a3a (tpu-recipes training/trillium/Mixtral-8x7B-MaxText)",
             "moe_capacity_factor": "mixtral_8x7b_dropped sets capacity_factor 1.25, megablox False; "
                                    "MaxText/layers/linears.py@e7292a3a MoeBlock.dense_matmul then runs the "
                                    "dispatch/combine einsums BSM,BSEC->EBCM and EBCM,BSEC->BSM with expert "
                                    "capacity int(S k / E x capacity_factor) per sequence (generate_masks)"})


def _google_tpu(target: Any) -> bool:
    """A Google TPU (JAX/XLA's home), not another chip the TPU execution model times (Gaudi, Trainium:
    their training stacks are PyTorch-based, Intel's Megatron-DeepSpeed and AWS's NeuronX Distributed)."""
    return getattr(target, "family", None) == "tpu" and str(getattr(target, "vendor", "")).lower() == "google"


def default_runtime(target: Any) -> str:
    """The framework a target's users train with when the plan names none: MaxText (JAX/XLA) on
    Google TPUs, where Megatron-Core does not run (it is built on CUDA/ROCm and torch.distributed's
    NCCL groups); Megatron-Core elsewhere (the torch stacks of Gaudi and Trainium shard as it does)."""
    return "maxtext" if _google_tpu(target) else "megatron-core"


def runtime_notes(runtime: Runtime, target: Any) -> list[str]:
    """What a plan's reader must know when the named runtime does not run on the target (a plan
    timed as Megatron-Core runs on a TPU is a what-if, not a launchable plan)."""
    if _google_tpu(target) and runtime.name.startswith("megatron"):
        return [f"runtime {runtime.name}: Megatron-LM runs on CUDA/ROCm GPUs (torch.distributed's NCCL/RCCL "
                "groups), not on TPUs; this plan times its behaviour on the TPU as a what-if. The TPU default "
                "is --runtime maxtext (JAX/XLA)"]
    return []


def get_runtime(runtime: str | Runtime | None, target: Any = None) -> Runtime:
    """``runtime`` by name (or as given); None: the target's :func:`default_runtime`."""
    if runtime is None:
        return RUNTIMES[default_runtime(target)]
    if isinstance(runtime, Runtime):
        return runtime
    try:
        return RUNTIMES[runtime]
    except KeyError:
        raise PlanError(f"unknown runtime {runtime!r}; known: {', '.join(sorted(RUNTIMES))}") from None
