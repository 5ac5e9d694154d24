"""A training plan as PyTorch settings: the ``DeviceMesh``, FSDP2/DDP for the data-parallel axis, the
tensor-parallel plan of each transformer layer, activation checkpointing and the pipeline schedule,
written as a Python snippet to adapt (a fragment: it expects the model, and for a pipeline its chunks
and the loss, from the script around it; it names Hugging Face Llama modules) plus the same as data.

How the plan maps, and why:

* mesh: ``init_device_mesh("cuda", (pp, dp, cp, tp), mesh_dim_names=...)`` with the pipeline and
  context axes only when used; the last dim is the innermost (adjacent ranks), so ``tp`` stays
  inside a node as in the plan's Megatron rank order.
* data parallelism by ZeRO stage: 0 is DDP; 1 is DDP with ``ZeroRedundancyOptimizer`` (optimizer
  states sharded); 2 is FSDP2 ``fully_shard(reshard_after_forward=False)`` (parameters stay
  gathered between forward and backward: gradients and states sharded); 3 is
  ``fully_shard(reshard_after_forward=True)``. With context parallelism the gradient group is
  ``dp x cp`` (the flattened ``dp_cp`` mesh, as torchtitan does). With tensor parallelism the
  parameters are DTensors, which DDP refuses (``_sync_module_states``: "mixed torch.Tensor and
  DTensor") and ``ZeroRedundancyOptimizer`` cannot broadcast: ZeRO-0 is the composable
  ``replicate(model, device_mesh=dp_mesh)`` (DDP's reducer, DTensor-aware), ZeRO-1 is FSDP2 without
  resharding after forward (it also shards the gradients: a note says so).
* tensor parallelism: Megatron's column/row split (q, k, v, gate, up column-wise; o and down
  row-wise) in every layer, and at the model level the embedding row-wise (vocabulary split) and
  the head column-wise, as torchtitan does. With sequence parallelism the norms are
  ``SequenceParallel`` and the residual stream stays a sequence-sharded DTensor between them:
  the embedding's output is kept a DTensor (Hugging Face's Llama reads the sequence length off it
  for positions and mask), attention's ``hidden_states`` (passed by keyword by Hugging Face's
  decoder layer) and the MLP input are gathered on entry, the row-wise outputs reduce-scattered back
  to sequence shards, and the head gathers the final norm's output.
* the device type follows the chip's software: ``cuda`` (NVIDIA, AMD ROCm), ``hpu`` (Intel Gaudi,
  through its PyTorch bridge); Trainium (Neuron SDK) and TPUs are refused.
* recomputation ``full`` wraps every layer in ``checkpoint_wrapper``; the pipeline is
  ``torch.distributed.pipelining``'s ``Schedule1F1B`` or ``ScheduleInterleaved1F1B``.
"""

from __future__ import annotations

from typing import Any

from ..backends import Target, get_target
from ..costmodel.planner.plan import Plan
from ..errors import NarrowpipeError
from .emit import STACKS, Launch, plan_source, py_tuple, software_stack, training_dtype

__all__ = ["torch_launch", "mesh_axes", "TORCH_REFERENCE"]

TORCH_REFERENCE = ("torch.distributed.device_mesh.init_device_mesh, torch.distributed.fsdp.fully_shard, "
                   "torch.distributed.tensor.parallel, torch.distributed.pipelining (PyTorch 2.6 and later)")
_TORCH_DTYPE = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}
_COLWISE = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
_ROWWISE = ("self_attn.o_proj", "mlp.down_proj")
_DEVICE = {"cuda": "cuda", "rocm": "cuda", "gaudi": "hpu", "cpu": "cpu"}


def mesh_axes(plan: Plan) -> list[tuple[str, int]]:
    """``(name, size)`` of the device mesh from the outermost axis to the innermost."""
    p = plan.parallel
    axes = [("pp", p.pp)] if p.pp > 1 else []
    axes.append(("dp", p.dp))
    axes += [("cp", p.cp)] if p.cp > 1 else []
    axes.append(("tp", p.tp))
    return axes


def torch_launch(plan: Plan, chip: Target | None = None) -> Launch:
    """PyTorch settings for ``plan`` (see the module doc)."""
    p, notes = plan.parallel, []
    target = chip or get_target(plan.target)   # a file's chip has no catalog name to look up
    stack = software_stack(target)
    if stack not in _DEVICE:
        way_out = ("NeuronX Distributed (torch-neuronx) has tensor/pipeline-parallel layers of its own"
                   if stack == "neuron" else "use --emit jax" if stack == "tpu" else "plan for a GPU system")
        raise NarrowpipeError(f"the PyTorch settings are torch.distributed on CUDA devices (DeviceMesh, FSDP2, "
                              f"DTensor tensor parallelism); {target.name} runs {STACKS[stack]}: {way_out}")
    if stack == "gaudi":
        notes.append(f"{target.name}: import habana_frameworks.torch before building the mesh (device type 'hpu', "
                     "HCCL backend), and check Intel Gaudi's documentation for the FSDP2 and DTensor features used")
    if not plan.architecture:
        raise NarrowpipeError("the PyTorch settings shard a transformer's layers (tensor-parallel plan, per-layer "
                              "FSDP); this plan's model is not a recognised transformer: no snippet is emitted")
    if p.tp > 1:
        why = tp_refusal(plan.architecture)
        if why:
            raise NarrowpipeError(f"tp={p.tp}: {why}; use --emit megatron, or re-plan with --tp 1")
    axes = mesh_axes(plan)
    dtype = training_dtype(plan)
    fsdp = p.zero >= 2 or (p.zero == 1 and p.tp > 1)
    data = "fsdp2" if fsdp else "replicate" if p.tp > 1 else {0: "ddp", 1: "ddp+zero_redundancy_optimizer"}[p.zero]
    settings: dict[str, Any] = {
        "mesh": {"device_type": _DEVICE[stack], "shape": [n for _, n in axes],
                 "mesh_dim_names": [a for a, _ in axes]},
        "data_parallel": {"kind": data, "mesh": "dp_cp" if p.cp > 1 else "dp",
                          **({"reshard_after_forward": p.zero == 3} if fsdp else {})},
        "param_dtype": dtype, "reduce_dtype": str(plan.runtime.get("grad_reduce_dtype", "fp32")),
        "tensor_parallel": _tp_plan(p.sequence_parallel) if p.tp > 1 else {},
        "tensor_parallel_model": _tp_model_plan(p.sequence_parallel) if p.tp > 1 else {},
        "activation_checkpointing": p.recompute,
        "pipeline": ({"schedule": "ScheduleInterleaved1F1B" if p.interleave > 1 else "Schedule1F1B",
                      "n_microbatches": p.microbatches, "stages_per_rank": p.interleave,
                      "chunk_layers": _chunk_layers(plan)} if p.pp > 1 else {}),
        "microbatch": p.microbatch, "global_batch": p.global_batch,
    }
    if p.recompute == "dots":
        notes.append("recompute=dots keeps only the weights' matmul outputs (JAX's dots_with_no_batch_dims_saveable): "
                     "torch.utils.checkpoint with a selective-checkpoint policy saving aten.mm/addmm outputs and "
                     "recomputing the rest does the same (torch.utils.checkpoint.create_selective_checkpoint_contexts)")
    if p.recompute == "selective":
        notes.append("selective recomputation (attention's softmax region) has no switch in PyTorch: torchtitan's "
                     "selective activation checkpointing, or checkpoint the attention core yourself")
    if p.cp > 1:
        notes.append("context parallelism: torch.distributed.tensor.experimental.context_parallel over mesh['cp'] "
                     "(experimental) shards the sequence for attention")
    if p.ep > 1:
        notes.append(f"expert parallelism ep={p.ep}: torch.distributed has no built-in expert-parallel layer; "
                     "shard the experts over the data-parallel ranks yourself")
    if p.tp > 1 and p.zero == 1:
        notes.append("ZeRO-1 with tensor parallelism: ZeroRedundancyOptimizer cannot broadcast DTensor parameters, so "
                     "the data-parallel axis is FSDP2 without resharding after forward, which shards the gradients "
                     "too (ZeRO-2: less memory than planned, the same reduce-scatter + all-gather traffic)")
    if p.tp > 1 and p.pp > 1:
        notes.append("the model-level tensor-parallel plan (embedding, final norm, head) applies on the pipeline "
                     "stage that holds each module")
    if not _llama_layers(plan.architecture):
        notes.append("the snippet walks Hugging Face Llama's decoder list, model.model.layers; point it at this "
                     "model's (GPT-2: model.transformer.h, BERT: model.encoder.layer)")
    return Launch("torch", plan_source(plan), settings, code=_snippet(plan, settings), notes=notes,
                  reference=TORCH_REFERENCE)


def _llama_layers(arch: dict[str, Any]) -> bool:
    """Whether the model's decoder layers are Hugging Face Llama's (``model.model.layers``, each with
    ``self_attn`` and ``mlp``): decoders with rotary positions; GPT-2 and encoders nest them elsewhere."""
    return bool(arch) and not arch.get("encoder") and arch.get("positions") == "rotary"


def tp_refusal(arch: dict[str, Any]) -> str | None:
    """Why torch's tensor-parallel plan (``ColwiseParallel``/``RowwiseParallel`` on ``nn.Linear``
    modules named as in Hugging Face Llama) cannot split this model as the plan does, or None.

    The plan's layer costs assume Megatron's split of every matmul over ``tp``. Hugging Face's MoE
    blocks (Mixtral, DeepSeek-V3, Qwen-MoE in transformers 5) hold each expert projection as one 3-D
    parameter (``mlp.experts.gate_up_proj``: experts x 2 ffn x hidden), which torch's styles do not
    shard, and the router (``mlp.gate``) would then multiply DTensors with plain tensors; latent
    attention (DeepSeek's ``q_a_proj``/``kv_a_proj_with_mqa`` down-projections and their norms) has
    no Llama names to split; GPT-2's projections are ``Conv1D``, not ``nn.Linear``."""
    if not arch:
        return "the model is not a recognised transformer"
    if arch.get("experts"):
        return (f"the plan splits each of the {arch['experts']} experts over the tensor-parallel ranks (Megatron's "
                "expert tensor parallelism); Hugging Face keeps each expert projection as one 3-D parameter "
                "(mlp.experts.gate_up_proj, mlp.experts.down_proj) that torch's ColwiseParallel/RowwiseParallel "
                "(nn.Linear, nn.Embedding) cannot shard, so the emitted plan would leave them whole")
    if (arch.get("other") or {}).get("kv_lora_rank") is not None:
        return ("latent attention (q_a_proj/q_b_proj, kv_a_proj_with_mqa/kv_b_proj and their norms) has no "
                "tensor-parallel plan in the Llama names this snippet writes")
    if not arch.get("gated_mlp") or not _llama_layers(arch):
        return ("the tensor-parallel plan names Hugging Face Llama's modules (q/k/v/o_proj, gate/up/down_proj); "
                "this model has others (GPT-2: Conv1D layers, which torch's tensor parallelism cannot split)")
    return None


def _tp_plan(sp: bool) -> dict[str, str]:
    """Each decoder layer's plan. Under sequence parallelism the row-wise outputs stay DTensors
    (``use_local_output=False``) so the residual add meets the sequence-sharded DTensor stream;
    Hugging Face's decoder layer calls ``self_attn(hidden_states=..., ...)`` with keywords only, so
    its input is prepared by keyword (a positional layout fails: 'module inputs and input_layouts
    should have same length')."""
    out = {name: "ColwiseParallel()" for name in _COLWISE}
    out.update({name: "RowwiseParallel(output_layouts=Shard(1), use_local_output=False)" if sp else "RowwiseParallel()"
                for name in _ROWWISE})
    if sp:
        out.update({"input_layernorm": "SequenceParallel()", "post_attention_layernorm": "SequenceParallel()",
                    "self_attn": 'PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)}, '
                                 'desired_input_kwarg_layouts={"hidden_states": Replicate()})',
                    "mlp": "PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))"})
    return out


def _tp_model_plan(sp: bool) -> dict[str, str]:
    """The modules outside the layers (torchtitan's plan): the embedding split by vocabulary rows, the
    head by vocabulary columns and gathered for the loss; with sequence parallelism the embedding
    leaves its output sequence-sharded (a DTensor: Hugging Face's Llama takes the sequence length for
    positions and mask from it) and the final norm runs on the shards."""
    if not sp:
        return {"model.embed_tokens": "RowwiseParallel(input_layouts=Replicate())",
                "lm_head": "ColwiseParallel(output_layouts=Replicate())"}
    return {"model.embed_tokens": "RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1), "
                                  "use_local_output=False)",
            "model.norm": "SequenceParallel()",
            "lm_head": "ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())"}


def _chunk_layers(plan: Plan) -> list[list[int]]:
    chunks = sorted((c for s in plan.stages for c in s.get("chunks", [])), key=lambda c: int(c["chunk"]))
    return [list(c["layers"]) for c in chunks]


def _snippet(plan: Plan, s: dict[str, Any]) -> str:
    p = plan.parallel
    mesh = s["mesh"]
    names = py_tuple(f'"{n}"' for n in mesh["mesh_dim_names"])
    shape = py_tuple(str(n) for n in mesh["shape"])
    kind = s["data_parallel"]["kind"]
    fsdp = kind == "fsdp2"
    reshard = bool(s["data_parallel"].get("reshard_after_forward"))
    lines = _header(p.pp > 1, p.interleave > 1)
    lines += ["import torch", "from torch.distributed.device_mesh import init_device_mesh"]
    if fsdp:
        lines.append("from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard")
    elif kind == "replicate":
        lines.append("from torch.distributed._composable.replicate import replicate")
    else:
        lines.append("from torch.nn.parallel import DistributedDataParallel as DDP")
    if kind == "ddp+zero_redundancy_optimizer":
        lines.append("from torch.distributed.optim import ZeroRedundancyOptimizer")
    if p.tp > 1:
        styles = " ".join([*s["tensor_parallel"].values(), *s["tensor_parallel_model"].values()])
        placements = [n for n in ("Replicate", "Shard") if f"{n}(" in styles]
        used = [n for n in ("ColwiseParallel", "PrepareModuleInput", "RowwiseParallel", "SequenceParallel")
                if f"{n}(" in styles]
        if placements:
            lines.append(f"from torch.distributed.tensor import {', '.join(placements)}")
        lines.append(f"from torch.distributed.tensor.parallel import ({', '.join(used)}, parallelize_module)")
    if p.recompute == "full":
        lines.append("from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper")
    if p.pp > 1:
        lines.append(f"from torch.distributed.pipelining import PipelineStage, {s['pipeline']['schedule']}")
    lines += ["", f'mesh = init_device_mesh("{mesh["device_type"]}", {shape}, mesh_dim_names={names})',
              'dp_mesh = mesh["dp", "cp"]._flatten("dp_cp")' if p.cp > 1 else 'dp_mesh = mesh["dp"]']
    if p.tp > 1:
        lines.append('parallelize_module(model, mesh["tp"], {   # embedding, final norm and head')
        lines += [f'    "{k}": {v},' for k, v in s["tensor_parallel_model"].items()]
        lines.append("})")
        lines.append("layer_plan = {")
        lines += [f'    "{k}": {v},' for k, v in s["tensor_parallel"].items()]
        lines.append("}")
    if fsdp:
        lines.append(f"mp = MixedPrecisionPolicy(param_dtype={_TORCH_DTYPE.get(s['param_dtype'], 'torch.bfloat16')}, "
                     f"reduce_dtype={_TORCH_DTYPE.get(s['reduce_dtype'], 'torch.float32')})")
    lines.append("for i, layer in enumerate(model.model.layers):   # this pipeline stage's layers"
                 if p.pp > 1 else "for i, layer in enumerate(model.model.layers):")
    body = []
    if p.tp > 1:
        body.append('parallelize_module(layer, mesh["tp"], layer_plan)')
    if p.recompute == "full":
        body += ["layer = checkpoint_wrapper(layer)", "model.model.layers[i] = layer"]
    if fsdp:
        body.append(f"fully_shard(layer, mesh=dp_mesh, reshard_after_forward={reshard}, mp_policy=mp)")
    lines += ["    " + b for b in body or ["pass"]]
    if fsdp:
        lines.append(f"fully_shard(model, mesh=dp_mesh, reshard_after_forward={reshard}, mp_policy=mp)")
    elif kind == "replicate":
        lines.append("model = replicate(model, device_mesh=dp_mesh)   # DDP's reducer over DTensor parameters")
    else:
        lines.append("model = DDP(model, process_group=dp_mesh.get_group())")
    if kind == "ddp+zero_redundancy_optimizer":
        lines.append("optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, "
                     "process_group=dp_mesh.get_group())")
    lines.append(f"# microbatch {p.microbatch} sequences, global batch {p.global_batch} "
                 f"({p.microbatches} microbatches per data-parallel replica per step)")
    if p.pp > 1:
        pipe = s["pipeline"]
        lines.append(f"# pipeline: one PipelineStage per model chunk; chunk g runs on pipeline rank g % {p.pp}, "
                     f"layers per chunk: {[len(c) for c in pipe['chunk_layers']]}")
        lines += [f'stages = [PipelineStage(chunk, stage_index=mesh["pp"].get_local_rank() + c * {p.pp}, '
                  f'num_stages={p.pp * p.interleave}, device=torch.device("{mesh["device_type"]}", '
                  'int(os.environ["LOCAL_RANK"])), group=mesh["pp"].get_group())',
                  "          for c, chunk in enumerate(model_chunks)]"]
        stages = "stages" if p.interleave > 1 else "stages[0]"
        lines.append(f"schedule = {pipe['schedule']}({stages}, n_microbatches={pipe['n_microbatches']}, "
                     "loss_fn=loss_fn)")
    return "\n".join(lines) + "\n"


def _header(pipeline: bool, interleaved: bool) -> list[str]:
    """The names the snippet expects and does not define: it is the parallel wiring of a training
    script, not a training script (no model, data, optimizer loop or checkpointing)."""
    out = ["# a fragment of a training script, to adapt: it expects `model`, the Hugging Face model built on each "
           "rank (meta device or CPU)"]
    if pipeline:
        chunks = "this rank's model chunks" if interleaved else "a one-element list: this rank's model chunk"
        out += [f"# and, for the pipeline, `model_chunks` ({chunks}, cut from `model` after the lines below) and "
                "`loss_fn` (output, target -> loss)", "import os"]
    return out
