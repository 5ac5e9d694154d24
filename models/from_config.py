"""``from_config``: a Hugging Face config (object or dict) to :func:`~.transformer.transformer`'s arguments.

Why a table of readers rather than one generic reader: the architectures spell the same sizes
differently (GPT-2's ``n_embd`` and ``n_inner``, Llama's ``intermediate_size``) and differ in
switches the config does not state (GPT-2 always has biases and learned positions, Qwen2 biases q,
k and v but not the output). Each reader states its architecture's facts once. No transformers
import: a config object is read through ``to_dict()``, so a plain dict (a ``config.json``) works.
"""

from __future__ import annotations

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
                eps=c.get("rms_norm_eps", 1e-6))


def _qwen2(c: Mapping[str, Any]) -> dict[str, Any]:
    return _llama(c, attn_bias=True, out_bias=False)   # Qwen2 biases q, k, v only


def _mixtral(c: Mapping[str, Any]) -> dict[str, Any]:
    return _llama(c) | dict(experts=c["num_local_experts"], top_k=c["num_experts_per_tok"])


def _bert(c: Mapping[str, Any]) -> dict[str, Any]:
    """BERT as ``BertModel``: the encoder and pooler, no masked-LM head."""
    return dict(layers=c["num_hidden_layers"], hidden=c["hidden_size"], heads=c["num_attention_heads"],
                vocab=c["vocab_size"], ffn=c["intermediate_size"], activation=_act(c.get("hidden_act", "gelu")),
                norm="layer", positions="learned", max_positions=c["max_position_embeddings"], attn_bias=True,
                out_bias=True, mlp_bias=True, encoder=True, type_vocab=c.get("type_vocab_size", 2),
                eps=c.get("layer_norm_eps", 1e-12))


#: model_type -> reader; architectures with parts the builder lacks (shared experts, q/k norms) are absent.
def _mistral(c: Mapping[str, Any]) -> dict[str, Any]:
    """Mistral: Llama's layout; v0.1 attends to a 4,096-token sliding window (``sliding_window``)."""
    window = c.get("sliding_window")
    return _llama(c) | ({"sliding_window": int(window)} if window else {})


SUPPORTED: dict[str, Reader] = {"gpt2": _gpt2, "llama": _llama, "mistral": _mistral, "qwen2": _qwen2,
                                "mixtral": _mixtral, "bert": _bert}


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
                dtype: DType | str | None = None, name: str | None = None) -> Graph:
    """The graph of a Hugging Face config: causal LMs (GPT-2, Llama, Mistral, Qwen2, Mixtral) or BERT.

    ``seq`` defaults to 2048, or the model's maximum positions when that is shorter; ``dtype`` to
    the config's own ``dtype`` when it names a float type, else bf16; ``past`` adds a KV cache of that
    default length (see :func:`~.decoder.transformer`).
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
    limit = kwargs.get("max_positions")
    chosen = _config_dtype(c)
    resolved = dtype if dtype is not None else (chosen if chosen is not None and chosen.is_float else DType.BF16)
    return transformer(**kwargs, seq=seq or min(2048, limit or 2048), batch=batch, past=past, dtype=resolved,
                       name=name or model_type)
