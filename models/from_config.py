"""``from_config``: a Hugging Face config (object or dict) to :func:`~.transformer.transformer`'s arguments.

Why a table of readers rather than one generic reader: the architectures spell the same sizes
differently (GPT-2's ``n_embd`` and ``n_inner``, Llama's ``intermediate_size``) and differ in
switches the config does not state (GPT-2 always has biases and learned positions, Qwen2 biases q,
k and v but not the output). Each reader states its architecture's facts once. No transformers
import: a config object is read through ``to_dict()``, so a plain dict (a ``config.json``) works.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import NarrowpipeError
from ..ir import DType, Graph
from .decoder import transformer

__all__ = ["from_config", "SUPPORTED"]

Reader = Callable[[Mapping[str, Any]], dict[str, Any]]

_ACT = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
        "silu": "silu", "swish": "silu", "relu": "relu"}


def _act(name: Any) -> str:
    try:
        return _ACT[str(name)]
    except KeyError:
        raise NarrowpipeError(f"from_config: activation {name!r} is not modelled "
                              f"(known: {', '.join(sorted(_ACT))})") from None


def _gpt2(c: Mapping[str, Any]) -> dict[str, Any]:
    hidden = int(c["n_embd"])
    return dict(layers=c["n_layer"], hidden=hidden, heads=c["n_head"], vocab=c["vocab_size"],
                ffn=c.get("n_inner") or 4 * hidden, activation=_act(c.get("activation_function", "gelu_new")),
                norm="layer", positions="learned", max_positions=c["n_positions"], attn_bias=True,
                out_bias=True, mlp_bias=True, tie_embeddings=c.get("tie_word_embeddings", True),
                eps=c.get("layer_norm_epsilon", 1e-5))


def _llama(c: Mapping[str, Any], *, attn_bias: bool | None = None, out_bias: bool | None = None) -> dict[str, Any]:
    """Llama and its kin (Mistral, Qwen2): RMS norm, rotary, gated SiLU MLP, grouped-query attention."""
    bias = bool(c.get("attention_bias", False))
    return dict(layers=c["num_hidden_layers"], hidden=c["hidden_size"], heads=c["num_attention_heads"],
                vocab=c["vocab_size"], ffn=c["intermediate_size"],
                kv_heads=c.get("num_key_value_heads") or c["num_attention_heads"], head_dim=c.get("head_dim"),
                gated_mlp=True, activation=_act(c.get("hidden_act", "silu")), norm="rms", positions="rotary",
                max_positions=c.get("max_position_embeddings"),
                attn_bias=bias if attn_bias is None else attn_bias, out_bias=bias if out_bias is None else out_bias,
                mlp_bias=bool(c.get("mlp_bias", False)), tie_embeddings=bool(c.get("tie_word_embeddings", False)),
                eps=c.get("rms_norm_eps", 1e-6), **_rope(c))


def _rope(c: Mapping[str, Any]) -> dict[str, Any]:
    """``rope_theta`` and ``rope_scaling``: transformers 4 writes ``rope_theta`` and ``rope_scaling``,
    transformers 5 one ``rope_parameters`` dict holding both; a config with neither has transformers'
    default base, 10,000. The plain ``default`` type is no scaling."""
    raw_params, raw_scaling = c.get("rope_parameters"), c.get("rope_scaling")
    params: Mapping[str, Any] = raw_params if isinstance(raw_params, Mapping) else {}
    scaling: Mapping[str, Any] = raw_scaling if isinstance(raw_scaling, Mapping) else params
    theta = c.get("rope_theta") or params.get("rope_theta") or 10000.0
    kind = scaling.get("rope_type", scaling.get("type", "default")) if scaling else "default"
    extra = {k: v for k, v in scaling.items() if k != "rope_theta"} if kind not in ("default", None) else None
    return {"rope_theta": float(theta), **({"rope_scaling": extra} if extra else {})}


def _first(c: Mapping[str, Any], *keys: str) -> Any:
    """The first of ``keys`` the config has (transformers renames some on ``to_dict``: Qwen3-MoE's
    ``num_experts`` is written ``num_local_experts``)."""
    for key in keys:
        if c.get(key) is not None:
            return c[key]
    raise KeyError(keys[0])


def _windows(c: Mapping[str, Any], default: Callable[[int], bool]) -> dict[str, Any]:
    """``sliding_window`` and ``sliding_layers`` from the config's ``layer_types`` (what a transformers
    config object holds), else from ``default(layer)``, the family's rule for a ``config.json`` that
    predates ``layer_types``. A window of 0 or None is none (Qwen2-MoE writes 0)."""
    window = c.get("sliding_window")
    if not window:
        return {}
    layers = int(c["num_hidden_layers"])
    types = c.get("layer_types")
    if types:
        sliding = [i for i, t in enumerate(types) if t == "sliding_attention"]
    else:
        sliding = [i for i in range(layers) if default(i)]
    if not sliding:
        return {}
    return {"sliding_window": int(window), **({} if len(sliding) == layers else {"sliding_layers": sliding})}


def _mistral(c: Mapping[str, Any]) -> dict[str, Any]:
    """Mistral: Llama's layout; v0.1 attends to a 4,096-token sliding window on every layer."""
    return _llama(c) | _windows(c, lambda i: True)


def _qwen2(c: Mapping[str, Any]) -> dict[str, Any]:
    """Qwen2 biases q, k, v only; with ``use_sliding_window`` the layers from ``max_window_layers`` on
    are windowed (transformers' rule)."""
    if not c.get("use_sliding_window", False):
        c = {**c, "sliding_window": None}
    first = int(c.get("max_window_layers", 28))
    return _llama(c, attn_bias=True, out_bias=False) | _windows(c, lambda i: i >= first)


def _qwen3(c: Mapping[str, Any]) -> dict[str, Any]:
    """Qwen3: Llama's layout with an RMS norm over each head's q and k; windows as Qwen2's."""
    if not c.get("use_sliding_window", False):
        c = {**c, "sliding_window": None}
    first = int(c.get("max_window_layers", 28))
    return _llama(c) | {"qk_norm": True} | _windows(c, lambda i: i >= first)


def _qwen3_moe(c: Mapping[str, Any]) -> dict[str, Any]:
    """Qwen3-MoE: q/k norms, experts of ``moe_intermediate_size`` with no shared expert, dense MLPs as
    Qwen2-MoE places them; with ``use_sliding_window`` every layer is windowed."""
    if not c.get("use_sliding_window", False):
        c = {**c, "sliding_window": None}
    layers, step = int(c["num_hidden_layers"]), int(c.get("decoder_sparse_step", 1))
    only = set(c.get("mlp_only_layers") or [])
    experts = int(_first(c, "num_experts", "num_local_experts"))
    dense = [i for i in range(layers) if i in only or not (experts > 0 and (i + 1) % step == 0)]
    return _llama(c) | _windows(c, lambda i: True) | dict(
        qk_norm=True, experts=experts, top_k=c["num_experts_per_tok"], expert_ffn=c["moe_intermediate_size"],
        moe_renormalize=bool(c.get("norm_topk_prob", False)), dense_layers=dense)


def _mixtral(c: Mapping[str, Any]) -> dict[str, Any]:
    return _llama(c) | dict(experts=c["num_local_experts"], top_k=c["num_experts_per_tok"])


def _qwen2_moe(c: Mapping[str, Any]) -> dict[str, Any]:
    """Qwen2-MoE: experts of ``moe_intermediate_size`` beside a sigmoid-gated shared expert; dense MLPs of
    ``intermediate_size`` on ``mlp_only_layers`` and off the ``decoder_sparse_step`` grid; with
    ``use_sliding_window``, the odd-numbered layers below ``max_window_layers`` are windowed."""
    layers, step = int(c["num_hidden_layers"]), int(c.get("decoder_sparse_step", 1))
    only = set(c.get("mlp_only_layers") or [])
    experts = int(_first(c, "num_experts", "num_local_experts"))
    dense = [i for i in range(layers) if i in only or not (experts > 0 and (i + 1) % step == 0)]
    if not c.get("use_sliding_window", False):
        c = {**c, "sliding_window": None}
    first = int(c.get("max_window_layers", 28))
    qkv = bool(c.get("qkv_bias", True))
    shared = c.get("shared_expert_intermediate_size")
    return (_llama(c, attn_bias=qkv, out_bias=False)
            | dict(experts=experts, top_k=c["num_experts_per_tok"], expert_ffn=c["moe_intermediate_size"],
                   moe_renormalize=bool(c.get("norm_topk_prob", False)), dense_layers=dense)
            | (dict(shared_ffn=int(shared), shared_gate=True) if shared else {})
            | _windows(c, lambda i: bool((i + 1) % 2) and i < first))


def _yarn_scale(c: Mapping[str, Any], head_dim: int) -> float | None:
    """DeepSeek's softmax scale: ``head_dim**-0.5``, times ``mscale**2`` under YaRN with ``mscale_all_dim``."""
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) in ("default", None) or not rope.get("mscale_all_dim"):
        return None
    factor = float(rope.get("factor", 1.0))
    mscale = 0.1 * float(rope["mscale_all_dim"]) * math.log(factor) + 1.0 if factor > 1 else 1.0
    return float(head_dim ** -0.5 * mscale * mscale)


def _deepseek(c: Mapping[str, Any], *, v3: bool) -> dict[str, Any]:
    """DeepSeek-V2/V3: latent attention, ``first_k_dense_replace`` dense layers, then routed experts of
    ``moe_intermediate_size`` beside ``n_shared_experts`` shared ones, weights scaled by
    ``routed_scaling_factor``. V3 routes on sigmoid scores among the best ``topk_group`` of ``n_group``
    groups and renormalizes (``norm_topk_prob``); V2 on softmax scores, group-limited only with
    ``topk_method="group_limited_greedy"``, never renormalized."""
    head_dim = int(c["qk_nope_head_dim"]) + int(c["qk_rope_head_dim"])
    experts = next((c[k] for k in ("n_routed_experts", "num_local_experts", "num_experts") if c.get(k)), None)
    shared = int(c.get("n_shared_experts") or 0)
    limited = v3 or c.get("topk_method") == "group_limited_greedy"
    groups = (int(c["n_group"]), int(c["topk_group"])) if limited and c.get("n_group") else None
    out = _llama(c) | dict(
        kv_heads=c["num_attention_heads"], head_dim=head_dim, q_lora_rank=c.get("q_lora_rank"),
        kv_lora_rank=c["kv_lora_rank"], qk_rope_head_dim=c["qk_rope_head_dim"], v_head_dim=c["v_head_dim"],
        out_bias=bool(c.get("attention_bias", False)), attn_scale=_yarn_scale(c, head_dim))
    if experts:
        out |= dict(experts=int(experts), top_k=c["num_experts_per_tok"], expert_ffn=c["moe_intermediate_size"],
                    dense_layers=list(range(int(c.get("first_k_dense_replace", 0)))),
                    router="sigmoid" if v3 else "softmax", expert_groups=groups, router_fp32=True,
                    routed_scale=float(c.get("routed_scaling_factor", 1.0)),
                    moe_renormalize=bool(c.get("norm_topk_prob", False)) if v3 else False)
        if shared:
            out["shared_ffn"] = int(c["moe_intermediate_size"]) * shared
    return out


def _gemma(c: Mapping[str, Any], *, version: int) -> dict[str, Any]:
    """Gemma-2/3: a norm before and after each block, embeddings scaled by sqrt(hidden), tied head,
    tanh-approximate GELU, softmax scale ``query_pre_attn_scalar**-0.5``; local (windowed) layers
    alternate with global ones (Gemma-2: every other; Gemma-3: five of every ``sliding_window_pattern``
    of 6, with their own rotary base). Gemma-2 soft-caps attention and final logits; Gemma-3 normalizes
    each head's q and k instead. Keys a ``config.json`` leaves out take transformers' defaults."""
    if c.get("use_bidirectional_attention"):
        raise NarrowpipeError("from_config: Gemma with bidirectional attention is not modelled")
    pattern = int(c.get("sliding_window_pattern") or c.get("_sliding_window_pattern") or (2 if version == 2 else 6))
    bias = bool(c.get("attention_bias", False))
    out = _llama(c, attn_bias=bias, out_bias=bias) | dict(
        activation=_act(c.get("hidden_activation") or c.get("hidden_act", "gelu_pytorch_tanh")),
        tie_embeddings=bool(c.get("tie_word_embeddings", True)), sandwich_norm=True, embed_scale=True,
        attn_scale=float(c.get("query_pre_attn_scalar", 256)) ** -0.5,
        attn_softcap=c.get("attn_logit_softcapping", 50.0 if version == 2 else None),
        logit_softcap=c.get("final_logit_softcapping", 30.0 if version == 2 else None),
        qk_norm=version == 3, local_rope=version == 3)
    return out | _windows(c, lambda i: bool((i + 1) % pattern))


def _bert(c: Mapping[str, Any]) -> dict[str, Any]:
    """BERT as ``BertModel``: the encoder and pooler, no masked-LM head."""
    return dict(layers=c["num_hidden_layers"], hidden=c["hidden_size"], heads=c["num_attention_heads"],
                vocab=c["vocab_size"], ffn=c["intermediate_size"], activation=_act(c.get("hidden_act", "gelu")),
                norm="layer", positions="learned", max_positions=c["max_position_embeddings"], attn_bias=True,
                out_bias=True, mlp_bias=True, encoder=True, type_vocab=c.get("type_vocab_size", 2),
                eps=c.get("layer_norm_eps", 1e-12))


#: model_type -> reader; architectures with parts the builder lacks (vision towers, bidirectional Gemma,
#: state-space layers) are absent.
SUPPORTED: dict[str, Reader] = {
    "gpt2": _gpt2, "llama": _llama, "mistral": _mistral, "qwen2": _qwen2, "qwen3": _qwen3, "mixtral": _mixtral,
    "qwen2_moe": _qwen2_moe, "qwen3_moe": _qwen3_moe, "deepseek_v2": functools.partial(_deepseek, v3=False),
    "deepseek_v3": functools.partial(_deepseek, v3=True), "gemma2": functools.partial(_gemma, version=2),
    "gemma3_text": functools.partial(_gemma, version=3), "bert": _bert}


def _as_dict(config: Any) -> dict[str, Any]:
    if isinstance(config, Mapping):
        return dict(config)
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        return dict(to_dict())
    raise NarrowpipeError(f"from_config: expected a transformers config or a dict, got {type(config).__name__}")


def _config_dtype(c: Mapping[str, Any]) -> DType | None:
    raw = c.get("dtype") or c.get("torch_dtype")
    if raw is None:
        return None
    try:
        return DType.parse(str(raw).removeprefix("torch."))
    except ValueError:
        return None


def from_config(config: Any, *, seq: int | None = None, batch: int = 1, past: int | None = None,
                dtype: DType | str | None = None, name: str | None = None, **overrides: Any) -> Graph:
    """The graph of a Hugging Face config: causal LMs (GPT-2, Llama, Mistral, Qwen2, Qwen3, Mixtral,
    Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3, Gemma-2, Gemma-3's text model) or BERT.

    ``seq`` defaults to 2048, or the model's maximum positions when that is shorter; ``dtype`` to
    the config's own ``dtype`` when it names a float type, else bf16; ``past`` adds a KV cache of that
    default length (see :func:`~.decoder.transformer`). ``overrides`` replace what the config says with
    any :func:`~.decoder.transformer` argument (``mla_absorb=True`` for DeepSeek's serving formulation,
    ``sliding_window=None`` to drop a window).
    """
    c = _as_dict(config)
    model_type = str(c.get("model_type", ""))
    reader = SUPPORTED.get(model_type)
    if reader is None:
        raise NarrowpipeError(f"from_config: model_type {model_type!r} is not supported "
                              f"(supported: {', '.join(SUPPORTED)})")
    try:
        kwargs = reader(c)
    except KeyError as exc:
        raise NarrowpipeError(f"from_config: {model_type} config lacks {exc.args[0]!r}") from None
    kwargs |= overrides
    if "sliding_window" in overrides and overrides["sliding_window"] is None:
        kwargs.pop("sliding_layers", None)
    limit = kwargs.get("max_positions")
    chosen = _config_dtype(c)
    resolved = dtype if dtype is not None else (chosen if chosen is not None and chosen.is_float else DType.BF16)
    return transformer(**kwargs, seq=seq or min(2048, limit or 2048), batch=batch, past=past, dtype=resolved,
                       name=name or model_type)
