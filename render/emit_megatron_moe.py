"""Megatron-LM flags for the parts of a model past a dense decoder: experts and latent attention.

Why a module of its own: a mixture of experts and multi-head latent attention each take a dozen
flags whose defaults differ from Hugging Face's (Megatron builds ``--ffn-hidden-size``-wide experts
unless told ``--moe-ffn-hidden-size``, routes with a softmax after the top-k, dispatches by
all-gather), so what the model spec knows must be said flag by flag, and what no flag expresses
must be named. Names, defaults and the behaviour cited are Megatron-LM's at ``core_v0.15.0``:

* ``megatron/training/arguments.py``: the flags; ``validate_args`` sets ``moe_ffn_hidden_size =
  ffn_hidden_size`` when it is not given; ``--moe-token-dispatcher-type`` defaults to ``allgather``.
* ``megatron/core/transformer/moe/moe_utils.py`` ``topk_routing_with_score_function``: softmax after
  the top-k (the top-k renormalized) unless ``--moe-router-pre-softmax``; sigmoid scores are always
  renormalized over the top-k (top-k > 1); ``--moe-router-topk-scaling-factor`` multiplies the
  weights whatever the score function; ``group_limited_topk`` scores a group by the sum of its best
  ``topk // group_topk`` experts.
* ``megatron/core/transformer/transformer_config.py``: top-1 softmax routing needs
  ``--moe-router-pre-softmax``; ``--moe-router-enable-expert-bias`` needs the sigmoid score function;
  ``MLATransformerConfig`` uses YaRN rotary unless ``--rope-type rope``.
* ``megatron/core/models/gpt/gpt_layer_specs.py``: with latent attention ``--qk-layernorm`` makes the
  q and kv up-projections layer-norm linears, i.e. DeepSeek's ``q_a_layernorm`` and ``kv_a_layernorm``
  on the compressed latents; ``moe_module_specs.py`` builds the shared expert with ``gate=False``.
"""

from __future__ import annotations

import re
from itertools import groupby
from typing import Any

__all__ = ["moe_flags", "mla_flags", "layer_freq"]

#: YaRN settings Megatron's MLATransformerConfig fixes (no flag at core_v0.15.0).
_YARN_FIXED = {"original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0}


def _ints(value: Any) -> tuple[int, ...]:
    """A tuple the plan's ``architecture["other"]`` holds as text (``"(0, 1, 2)"``: the plan JSON keeps
    non-scalar spec fields as strings) or, from a caller, as a list."""
    if isinstance(value, str):
        return tuple(int(v) for v in re.findall(r"-?\d+", value))
    return tuple(int(v) for v in value or ())


def layer_freq(layers: int, dense: tuple[int, ...]) -> str:
    """``--moe-layer-freq`` as Megatron's pattern string: 1 an expert layer, 0 a dense one, runs
    written ``[v]*n`` (DeepSeek-V3's first three dense of 61: ``([0]*3+[1]*58)``)."""
    flags = [0 if i in dense else 1 for i in range(layers)]
    return "(" + "+".join(f"[{f}]*{len(list(run))}" for f, run in groupby(flags)) + ")"


def moe_flags(arch: dict[str, Any], other: dict[str, Any], ep: int, dtype: str, notes: list[str]) -> dict[str, Any]:
    """The expert flags of ``arch``; the spec features they express are removed from ``other`` (what is
    left is named in a note by the caller)."""
    experts, top_k, ffn = int(arch["experts"]), int(arch.get("top_k") or 1), int(arch["ffn"])
    out: dict[str, Any] = {"--num-experts": experts, "--moe-router-topk": top_k,
                           # Megatron's default is --ffn-hidden-size: the dense MLP's width, not an expert's
                           "--moe-ffn-hidden-size": int(other.pop("expert_ffn", None) or ffn)}
    if ep > 1:       # the planner times Megatron-Core's all-to-all dispatcher (allgather is the default)
        out["--moe-token-dispatcher-type"] = "alltoall"
    if dtype == "bf16":   # the planner times the experts as grouped GEMMs; validate_args allows them in bf16 only
        out["--moe-grouped-gemm"] = True
    else:
        notes.append(f"the experts are timed as grouped GEMMs; Megatron's --moe-grouped-gemm needs bf16 (this plan "
                     f"trains in {dtype}): its per-expert loop (SequentialMLP) may be slower than planned")
    shared = other.pop("shared_ffn", None)
    if shared:
        out["--moe-shared-expert-intermediate-size"] = int(shared)
    if other.pop("shared_gate", False):
        notes.append("the shared expert is scaled by a sigmoid gate (Qwen2-MoE's shared_expert_gate): Megatron's "
                     "MoE layer spec builds SharedExpertMLP with gate=False (moe_module_specs.py) and no flag sets "
                     "it; set gate=True in the model provider's layer spec")
    dense = _ints(other.pop("dense_layers", ()))
    if dense:
        out["--moe-layer-freq"] = layer_freq(int(arch["layers"]), dense)
    out.update(_router_flags(other, experts, top_k, notes))
    return out


def _router_flags(other: dict[str, Any], experts: int, top_k: int, notes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    router = str(other.pop("router", "softmax"))
    renormalize = bool(other.pop("moe_renormalize", True))
    if router == "sigmoid":
        # DeepSeek-V3's e_score_correction_bias: Megatron's expert bias (sigmoid only), added for the choice only
        out.update({"--moe-router-score-function": "sigmoid", "--moe-router-enable-expert-bias": True})
        if not renormalize and top_k > 1:
            notes.append("the model weighs its top-k sigmoid scores as they are; Megatron renormalizes them over the "
                         "top-k (no flag turns it off)")
    elif top_k == 1:
        out["--moe-router-pre-softmax"] = True      # Megatron refuses top-1 softmax after the top-k
        if renormalize:
            notes.append("top-1 routing: Megatron needs --moe-router-pre-softmax, which weighs the expert by its "
                         "softmax probability; the model weighs it by 1 (renormalized)")
    elif not renormalize:
        out["--moe-router-pre-softmax"] = True      # softmax over all experts, top-k weights not renormalized
    groups = _ints(other.pop("expert_groups", ()))
    if groups:
        out.update({"--moe-router-num-groups": groups[0], "--moe-router-group-topk": groups[1]})
        per_group = 2 if router == "sigmoid" else 1     # the model: the best two (V3) or the best one (V2)
        if top_k // groups[1] != per_group:
            notes.append(f"group-limited routing: Megatron scores a group by its best top_k // group_topk = "
                         f"{top_k // groups[1]} experts summed; the model by its best {per_group}")
    scale = float(other.pop("routed_scale", 1.0))
    if scale != 1.0:
        out["--moe-router-topk-scaling-factor"] = scale
    if other.pop("router_fp32", False):
        out["--moe-router-dtype"] = "fp32"
    return out


def mla_flags(arch: dict[str, Any], other: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """Multi-head latent attention's flags (``arch["head_dim"]`` is ``qk_nope + qk_rope``); the spec
    features they express are removed from ``other``."""
    head_dim = int(arch["head_dim"])
    rope = int(other.pop("qk_rope_head_dim"))
    other.pop("mla_absorb", None)     # serving's decode formulation: same weights, nothing for training to set
    out: dict[str, Any] = {"--multi-latent-attention": True}
    q_rank = other.pop("q_lora_rank", None)
    if q_rank is not None:
        out["--q-lora-rank"] = int(q_rank)          # Megatron's default None: a plain q projection, as the model's
    out.update({"--kv-lora-rank": int(other.pop("kv_lora_rank")), "--qk-head-dim": head_dim - rope,
                "--qk-pos-emb-head-dim": rope, "--v-head-dim": int(other.pop("v_head_dim", None) or head_dim),
                # DeepSeek's norms on the compressed q and kv latents (the model builds both)
                "--qk-layernorm": True})
    scaling = arch.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "yarn":
        out.update({"--rope-type": "yarn", "--rotary-scaling-factor": float(scaling.get("factor", 1.0)),
                    "--mscale": float(scaling.get("mscale", 1.0)),
                    "--mscale-all-dim": float(scaling.get("mscale_all_dim", 0.0))})
        other.pop("attn_scale", None)     # Megatron's MLA derives the same softmax scale from mscale_all_dim
        fixed = {k: scaling[k] for k, v in _YARN_FIXED.items() if k in scaling and float(scaling[k]) != v}
        if fixed:
            notes.append(f"YaRN settings {fixed} have no Megatron flag (MLATransformerConfig fixes {_YARN_FIXED}): set "
                         "them in the model provider")
    elif not kind:
        out["--rope-type"] = "rope"       # MLA's default is YaRN: the model's rotary is plain
    return out
