"""A training plan as Megatron-LM arguments: ``torchrun ... pretrain_gpt.py --tensor-model-parallel-size ...``.

Flag names and their constraints are Megatron-LM's own (``megatron/training/arguments.py`` and the
config dataclasses it generates flags from, main at d98e8a64; the names parse at ``core_v0.15.0`` too). How the
plan maps, and why:

* parallel sizes one to one; data parallelism is what Megatron derives from the world size.
* pipeline chunks: Megatron's default split (embedding on the first stage, loss on the last, equal
  decoder layers per chunk) when the plan's chunks are equal, with
  ``--num-layers-per-virtual-pipeline-stage`` when interleaved; otherwise the plan's exact split as
  ``--pipeline-model-parallel-layout`` (``E`` embedding, ``t`` a layer, ``L`` the loss; chunk ``g``
  of ``pp * v`` in order, which is Megatron's order too).
* recomputation: ``selective`` is Megatron's selective granularity (core attention, the plan's
  softmax region); ``full`` recomputes every layer (``--recompute-method uniform
  --recompute-num-layers 1``).
* ZeRO: 1 is the distributed optimizer; 2 and 3 are Megatron FSDP's ``optim_grads`` and
  ``optim_grads_params`` sharding with the flags ``docs/source/api-guide/custom_fsdp.md`` lists
  together (``--use-megatron-fsdp --data-parallel-sharding-strategy ... --no-gradient-accumulation-fusion
  --use-distributed-optimizer``) and the ``fsdp_dtensor`` checkpoint format ``validate_args`` asserts.
* ``CUDA_DEVICE_MAX_CONNECTIONS``: ``validate_args`` asserts it is ``1`` with tensor or context
  parallelism on GPUs before Blackwell (compute capability below 10), and that it is not ``1`` with
  Megatron FSDP; the command sets it (``env CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun ...``) when needed,
  and to 32 when the plan overlaps expert all-to-alls (``--overlap-moe-expert-parallel-comm``, which
  the MoE README says needs more than 1; validate_args only warns then).
* the model: sizes, rotary base (``--rotary-base``: Megatron's default is 10,000, Llama-3 trains with
  500,000), Llama-3.1's rotary scaling (``--use-rope-scaling``), per-head q/k norms (``--qk-layernorm``);
  experts and latent attention as :mod:`.emit_megatron_moe` says (expert width, dispatcher, shared
  expert, dense layers, router; MLA's ranks and head sizes). A feature no flag expresses is a note.
* the runtime: gradient-reduction and parameter-gather overlap, attention form, dropout and the
  gradient-reduction precision as the planner's runtime profile assumed them.
"""

from __future__ import annotations

from math import ceil
from typing import Any

from ..backends import Target, defaults, get_system, get_target
from ..costmodel.planner.plan import Plan
from ..errors import NarrowpipeError
from .emit import STACKS, Launch, check_tool_runtime, plan_source, software_stack, training_dtype
from .emit_megatron_moe import mla_flags, moe_flags

__all__ = ["megatron_launch", "pipeline_layout", "MEGATRON_REFERENCE"]

MEGATRON_REFERENCE = ("NVIDIA/Megatron-LM megatron/training/arguments.py and the config dataclasses it makes flags "
                      "of (megatron/core/transformer/transformer_config.py), main at commit "
                      "d98e8a64ddf34856e74b24714e3bedb2f5a39553 (2026-08-22); the same names parse at tag core_v0.15.0")
#: ``TransformerConfig.layernorm_epsilon`` (``--norm-epsilon``), transformer_config.py at d98e8a64.
MEGATRON_NORM_EPS = 1e-5
_PRECISION = {"bf16": "--bf16", "fp16": "--fp16"}
_ZERO_SHARDING = {2: "optim_grads", 3: "optim_grads_params"}
#: Megatron's --use-rope-scaling is Llama-3.x's scaling with these fixed (``RotaryEmbedding._apply_scaling``,
#: megatron/core/models/common/embeddings/rotary_pos_embedding.py, core_v0.15.0); only the factor is a flag.
_LLAMA3_ROPE_FIXED = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def pipeline_layout(plan: Plan) -> str | None:
    """The plan's chunks as ``--pipeline-model-parallel-layout`` (``Et*3|t*4|t*4|t*3L``), or None
    when they are Megatron's default even split."""
    chunks = sorted((c for s in plan.stages for c in s.get("chunks", [])), key=lambda c: int(c["chunk"]))
    if plan.parallel.pp == 1 or not chunks:
        return None
    sizes = [len(c["layers"]) for c in chunks]
    if len(set(sizes)) == 1:
        return None
    parts = []
    for g, n in enumerate(sizes):
        body = f"t*{n}" if n > 1 else "t" * n
        parts.append(("E" if g == 0 else "") + body + ("L" if g == len(sizes) - 1 else ""))
    return "|".join(parts)


def megatron_launch(plan: Plan, chip: Target | None = None) -> Launch:
    """Megatron-LM's ``pretrain_gpt.py`` arguments for ``plan`` (see the module doc)."""
    target = chip or get_target(plan.target)   # a file's chip has no catalog name to look up
    stack = software_stack(target)
    p, arch, notes = plan.parallel, dict(plan.architecture), []
    check_tool_runtime("megatron", str(plan.runtime.get("name", "megatron-core")))
    if stack == "tpu":
        raise NarrowpipeError(f"Megatron-LM runs on GPUs; this plan is for {target.name}, a TPU: "
                              "use --emit jax, or plan for a GPU system")
    if stack == "neuron":
        raise NarrowpipeError(f"Megatron-LM runs on GPUs; {target.name} runs {STACKS[stack]}: NeuronX Distributed "
                              f"Training takes tensor/pipeline sizes of its own (this plan: tp={p.tp}, pp={p.pp}, "
                              f"dp={p.dp}); no pretrain_gpt.py command is emitted")
    if stack == "gaudi":
        notes.append(f"{target.name} runs {STACKS[stack]}: upstream Megatron-LM needs CUDA; run these arguments "
                     "with Intel's Gaudi port (HabanaAI/Megatron-LM, or Megatron-DeepSpeed), whose argument names "
                     "follow upstream's but may lag it")
    elif stack not in ("cuda", "rocm"):
        raise NarrowpipeError(f"Megatron-LM runs on GPUs; this plan is for {target.name} (a {target.family} "
                              "target): plan for a GPU system")
    if not arch:
        raise NarrowpipeError("Megatron-LM's pretrain_gpt.py trains GPT-style decoders, described by their sizes "
                              "(--num-layers, --hidden-size, ...); this plan's model is not a recognised transformer: "
                              "no command is emitted")
    if arch.get("encoder"):
        raise NarrowpipeError("Megatron-LM's pretrain_gpt.py trains decoders; this model is an encoder")
    if arch.get("experts") and p.tp > 1 and not p.sequence_parallel:
        raise NarrowpipeError(f"Megatron-Core's MoELayer.forward (megatron/core/transformer/moe/moe_layer.py) raises "
                              f"ValueError when a mixture of experts trains with tensor parallelism (tp={p.tp}) "
                              "without --sequence-parallel; re-plan with sequence parallelism on, or tp=1")
    flags: dict[str, Any] = {"--tensor-model-parallel-size": p.tp, "--pipeline-model-parallel-size": p.pp}
    layout = pipeline_layout(plan)
    if layout is not None:
        flags["--pipeline-model-parallel-layout"] = layout
        notes.append("the plan splits layers unevenly over the pipeline chunks (balanced by time), so the "
                     "split is given as --pipeline-model-parallel-layout (Megatron-Core 0.13 and later)")
    elif p.interleave > 1:
        layers = sum(len(s["layers"]) for s in plan.stages)
        flags["--num-layers-per-virtual-pipeline-stage"] = layers // (p.pp * p.interleave)
    if p.cp > 1:
        flags["--context-parallel-size"] = p.cp
    if p.ep > 1:
        flags["--expert-model-parallel-size"] = p.ep
    if p.sequence_parallel:
        flags["--sequence-parallel"] = True
    flags["--micro-batch-size"] = p.microbatch
    flags["--global-batch-size"] = p.global_batch
    if p.recompute == "dots":
        raise NarrowpipeError("recompute=dots (JAX's dots_with_no_batch_dims_saveable, MaxText's remat_policy="
                              "minimal) has no Megatron flag: --emit jax, or re-plan with --runtime megatron-core")
    if p.recompute == "selective":
        flags["--recompute-granularity"] = "selective"
    elif p.recompute == "full":
        flags.update({"--recompute-granularity": "full", "--recompute-method": "uniform", "--recompute-num-layers": 1})
    flags.update(_zero_flags(plan))
    flags.update(_runtime_flags(plan, notes))
    flags.update(_model_flags(plan, arch, notes))
    program = _environment(plan, target, stack, notes) + _launcher(plan, notes)
    args: list[str] = []
    for flag, value in flags.items():
        args += [flag] if value is True else [flag, str(value)]
    return Launch("megatron", plan_source(plan), flags, program, args, notes=notes, reference=MEGATRON_REFERENCE)


def _zero_flags(plan: Plan) -> dict[str, Any]:
    zero = plan.parallel.zero
    if zero == 1:
        return {"--use-distributed-optimizer": True}
    if zero in _ZERO_SHARDING:
        return {"--use-megatron-fsdp": True, "--data-parallel-sharding-strategy": _ZERO_SHARDING[zero],
                "--no-gradient-accumulation-fusion": True, "--use-distributed-optimizer": True,
                "--ckpt-format": "fsdp_dtensor"}
    return {}


def _runtime_flags(plan: Plan, notes: list[str]) -> dict[str, Any]:
    """The planner runtime's assumptions as flags, only where Megatron accepts them together."""
    rt, p = plan.runtime, plan.parallel
    out: dict[str, Any] = {}
    dtype = training_dtype(plan)
    if dtype in _PRECISION:
        out[_PRECISION[dtype]] = True
    elif dtype == "fp32":
        notes.append("fp32 training: Megatron's default precision, no --bf16/--fp16")
    else:
        raise NarrowpipeError(f"Megatron-LM trains in fp32, bf16 or fp16 (fp8 through Transformer Engine on top "
                              f"of bf16); this plan's parameters are {dtype}")
    if rt.get("fp8"):
        # TransformerConfig.fp8 / fp8_recipe (--fp8-format {e4m3,hybrid}, --fp8-recipe {delayed,tensorwise,
        # mxfp8,blockwise}): Transformer Engine's FP8 GEMMs on top of --bf16, in the format the plan timed and
        # with per-tensor scales (training/fp8_gemms.py: one scale per tensor, TE's DelayedScaling default)
        out["--fp8-format"] = rt["fp8"]
        out["--fp8-recipe"] = "delayed"
        notes.append(f"FP8: --fp8-format {rt['fp8']} is the recipe the plan timed (hybrid: E4M3 forward, E5M2 "
                     "gradients, for --dtype fp8, fp8_e4m3 and fp8_e5m2 alike); Megatron's e4m3 (E4M3 everywhere) "
                     "runs the same 1-byte GEMMs, so the predicted step would not change; --fp8-recipe delayed is "
                     "the per-tensor scaling the plan assumes")
    if rt.get("grad_reduce_dtype") == "fp32" and dtype in _PRECISION:
        out["--accumulate-allreduce-grads-in-fp32"] = True
    elif rt.get("grad_reduce_dtype") in ("fp16", "bf16") and dtype == "bf16":
        # Megatron turns --bf16 into fp32 gradient accumulation and reduction unless told otherwise
        # (arguments.py, core_v0.15.0): the plan's 2-byte gradients need the flag
        out["--grad-reduce-in-bf16"] = True
    reduces = p.dp * p.cp > 1 and p.zero < 3
    if rt.get("overlap_grad_reduce") and (reduces or p.zero >= 2):
        out["--overlap-grad-reduce"] = True
    if rt.get("overlap_param_gather") and p.zero >= 1 and "--overlap-grad-reduce" in out:
        out["--overlap-param-gather"] = True     # Megatron: only with the distributed optimizer / FSDP
    if rt.get("attention") == "unfused":
        out["--attention-backend"] = "unfused"
    dropout = float(rt.get("dropout", 0.0))
    out["--attention-dropout"] = dropout        # Megatron's defaults are 0.1: say what the plan assumed
    out["--hidden-dropout"] = dropout
    if rt.get("overlap_tp_comm"):
        notes.append("the runtime overlaps tensor-parallel communication: Megatron's --tp-comm-overlap needs "
                     "Transformer Engine userbuffers; not emitted")
    if overlaps_all_to_all(plan):
        # the plan hid expert all-to-alls behind the other microbatch's pass (costmodel/planner/ep_overlap.py)
        out["--overlap-moe-expert-parallel-comm"] = True
        notes.append("--overlap-moe-expert-parallel-comm (Megatron-Core 0.14 and later) is the batch-level "
                     "all-to-all overlap the plan timed; TransformerConfig asserts torch 2.6 or later with it, and "
                     "the MoE README asks CUDA_DEVICE_MAX_CONNECTIONS > 1 (set to 32 here)")
    return out


def overlaps_all_to_all(plan: Plan) -> bool:
    """Whether the plan hid expert all-to-alls behind another microbatch's compute."""
    return float(plan.hidden_comm.get("ep_comm", 0.0)) > 0


def _model_flags(plan: Plan, arch: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    heads, kv, hidden = int(arch["heads"]), int(arch["kv_heads"]), int(arch["hidden"])
    out: dict[str, Any] = {"--num-layers": arch["layers"], "--hidden-size": hidden, "--ffn-hidden-size": arch["ffn"],
                           "--num-attention-heads": heads}
    if kv != heads:
        out.update({"--group-query-attention": True, "--num-query-groups": kv})
    other = dict(arch.get("other") or {})
    mla = other.get("kv_lora_rank") is not None
    if int(arch["head_dim"]) * heads != hidden and not mla:    # MLA's head sizes are flags of their own
        out["--kv-channels"] = arch["head_dim"]
    out["--seq-length"] = plan.seq
    out["--max-position-embeddings"] = max(plan.seq, int(arch.get("max_positions") or 0))
    out["--position-embedding-type"] = "rope" if arch.get("positions") == "rotary" else "learned_absolute"
    if arch.get("positions") == "rotary":
        out.update(_rope_flags(arch, notes, yarn_flags=mla))
    out["--normalization"] = "RMSNorm" if arch.get("norm") == "rms" else "LayerNorm"
    eps = other.pop("norm_eps", None)
    if eps is not None and float(eps) != MEGATRON_NORM_EPS:
        out["--norm-epsilon"] = float(eps)
    act, gated = arch.get("activation"), bool(arch.get("gated_mlp"))
    if gated and act == "silu":
        out["--swiglu"] = True
    elif gated:
        notes.append(f"a gated {act} MLP has no Megatron flag (--swiglu is SiLU): set "
                     "TransformerConfig(gated_linear_unit=True, activation_func=...) in the model provider")
    elif act == "gelu_tanh":
        # --openai-gelu is read only by megatron/legacy models; Megatron-Core's MLP uses F.gelu (erf)
        notes.append("the tanh-approximated GeLU (GPT-2's gelu_new) has no Megatron-Core flag (--openai-gelu acts "
                     "only with --use-legacy-models): set TransformerConfig(activation_func=functools.partial("
                     "torch.nn.functional.gelu, approximate='tanh')) in the model provider; left at Megatron-Core's "
                     "exact (erf) GeLU")
    elif act not in ("gelu", None):
        notes.append(f"activation {act}: Megatron's default is GeLU; set activation_func in the model provider")
    out.update(_bias_flags(arch, notes))
    if not arch.get("tie_embeddings"):
        out["--untie-embeddings-and-output-weights"] = True
    if other.pop("qk_norm", False):
        out["--qk-layernorm"] = True           # an RMS norm per head with --normalization RMSNorm
    if mla:
        out.update(mla_flags(arch, other, notes))
    if arch.get("experts"):
        out.update(moe_flags(arch, other, plan.parallel.ep, training_dtype(plan), notes))
    if other:
        notes.append("model features these flags do not set: " + ", ".join(f"{k}={v}" for k, v in
                                                                          sorted(other.items()))
                     + " (add Megatron's flags or model-provider settings for them)")
    notes.append(f"add data and tokenizer flags (--data-path, --tokenizer-type, ...); to measure this plan on "
                 f"synthetic data: --mock-data --tokenizer-type NullTokenizer --vocab-size {int(arch['vocab'])} "
                 "(NullTokenizer's vocabulary is --vocab-size, its end-of-document id the last one; core_v0.15.0's "
                 f"legacy NullTokenizer added one, so there pass {int(arch['vocab']) - 1}; Megatron pads the "
                 "vocabulary to a multiple of 128 x tp)")
    return out


def _rope_flags(arch: dict[str, Any], notes: list[str], *, yarn_flags: bool = False) -> dict[str, Any]:
    """``--rotary-base`` (an integer in Megatron; default 10,000) and Llama-3.x's ``--use-rope-scaling``;
    with ``yarn_flags`` (latent attention) YaRN scaling is left to :func:`.emit_megatron_moe.mla_flags`."""
    out: dict[str, Any] = {}
    theta = arch.get("rope_theta")
    if theta is None:
        notes.append("the model's rotary base (rope_theta) is unknown (a plan saved before narrowpipe.plan v4, or an "
                     "export without inv_freq values): Megatron's --rotary-base defaults to 10000; set it to the "
                     "model's (Llama-3: 500000)")
    elif float(theta) != int(float(theta)):
        notes.append(f"rotary base {theta}: Megatron's --rotary-base takes an integer; set rotary_base in the model "
                     "provider")
    else:
        out["--rotary-base"] = int(float(theta))
    scaling = arch.get("rope_scaling")
    if scaling and yarn_flags and scaling.get("rope_type", scaling.get("type")) == "yarn":
        return out
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type"))
        fixed = all(float(scaling.get(k, v)) == v for k, v in _LLAMA3_ROPE_FIXED.items())
        if kind == "llama3" and fixed:
            out.update({"--use-rope-scaling": True, "--rope-scaling-factor": float(scaling.get("factor", 8.0))})
        else:
            notes.append(f"rotary scaling {dict(scaling)} has no Megatron flag for this attention (--use-rope-scaling "
                         f"is Llama-3.x's with {_LLAMA3_ROPE_FIXED}): set it in the model provider")
    return out


def _environment(plan: Plan, target: Any, stack: str, notes: list[str]) -> list[str]:
    """``env CUDA_DEVICE_MAX_CONNECTIONS=1`` where Megatron's ``validate_args`` asserts it: tensor or
    context parallelism before Blackwell (NVIDIA's compute capability 10; AMD's Instinct report 9)
    without Megatron FSDP, which asserts the opposite."""
    p = plan.parallel
    if stack in ("cuda", "rocm") and overlaps_all_to_all(plan) and p.zero not in _ZERO_SHARDING:
        # MoE README (main d98e8a64): the overlap needs CUDA_DEVICE_MAX_CONNECTIONS > 1; validate_args then
        # only warns about tensor/context parallelism ("you can set CUDA_DEVICE_MAX_CONNECTIONS to 1 or 32")
        return ["env", "CUDA_DEVICE_MAX_CONNECTIONS=32"]
    if stack not in ("cuda", "rocm") or (p.tp == 1 and p.cp == 1):
        return []
    if p.zero in _ZERO_SHARDING:
        notes.append("Megatron FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS is not 1: leave it unset (Megatron warns that "
                     "tensor/context parallelism would prefer 1)")
        return []
    blackwell = stack == "cuda" and "fp4" in target.matrix_flops      # NVFP4 tensor cores came with Blackwell
    return [] if blackwell else ["env", "CUDA_DEVICE_MAX_CONNECTIONS=1"]


def _bias_flags(arch: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    qkv, out, mlp = bool(arch.get("attn_bias")), bool(arch.get("out_bias")), bool(arch.get("mlp_bias"))
    if qkv and out and mlp:
        return {}                                 # Megatron's default: biases in every linear layer
    if not (out or mlp):
        return {"--disable-bias-linear": True, **({"--add-qkv-bias": True} if qkv else {})}
    notes.append(f"biases only in some linear layers (qkv {qkv}, attention output {out}, MLP {mlp}): Megatron's "
                 "command line has all, none, or QKV only; left at its default (all)")
    return {}


def _launcher(plan: Plan, notes: list[str]) -> list[str]:
    """``torchrun`` over the hosts the plan's devices fill."""
    per_host = plan.devices
    try:
        system = get_system(plan.system)
        per_host = defaults.GPUS_PER_HOST.get(system.name, system.devices)
    except NarrowpipeError:
        notes.append(f"no catalog system named {plan.system!r}: --nproc-per-node assumes one host")
    per_host = min(per_host, plan.devices)
    hosts = ceil(plan.devices / per_host)
    if hosts > 1:
        notes.append(f"{hosts} hosts: add torchrun's --node-rank and --master-addr (or --rdzv-endpoint) on each")
    return ["torchrun", "--nproc-per-node", str(per_host), "--nnodes", str(hosts), "pretrain_gpt.py"]
