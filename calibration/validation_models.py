"""The architectures the CPU validation runs: one transformers config class each, random weights.

Issue 12 asks for depthwise convnets, GQA decoders, encoders, ViT/Swin and an encoder-decoder, at
two batch sizes. Each entry builds its model from a transformers config at the published sizes of
the named checkpoint (nothing is downloaded: ``HF_HUB_OFFLINE=1``, weights are random) and the
inputs of one forward pass; ``tiny`` shrinks the same architecture to a few small layers so that a
unit test builds and exports every entry in seconds. The same module and inputs feed both sides of
a validation: eager torch measures them, ``torch.export`` lowers them for the prediction.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import NarrowpipeError

__all__ = ["check_seq_option", "ValidationModel", "VALIDATION_MODELS", "MODELS", "build_validation_model",
           "validation_inputs", "validation_param_count", "validation_label"]


@dataclass(frozen=True)
class ValidationModel:
    name: str
    description: str
    kind: str                            # "vision", "text" (encoder or decoder), "seq2seq"
    model_class: str                     # transformers class name
    config: Callable[[], Any]            # -> transformers config at the checkpoint's sizes
    tiny: dict[str, Any] = field(default_factory=dict)   # config overrides for unit tests
    attn: str | None = "sdpa"            # attn_implementation, where the class takes one
    causal: bool = False                 # a decoder-only LM: forward with use_cache=False

    @property
    def has_seq(self) -> bool:
        return self.kind != "vision"


def _cfg(class_name: str, **kwargs: Any) -> Callable[[], Any]:
    def make() -> Any:
        import transformers
        return getattr(transformers, class_name)(**kwargs)
    return make


_TINY_TEXT = {"num_hidden_layers": 2, "hidden_size": 128, "intermediate_size": 512, "num_attention_heads": 4,
              "vocab_size": 2000}

#: name -> architecture. Sizes are the named checkpoint's config.json values (the config classes'
#: defaults where those are that checkpoint, as for GPT-2, BERT-base, ViT-B/16, Swin-T, T5-small,
#: MobileNetV2 1.0 and ConvNeXt-T).
MODELS: dict[str, ValidationModel] = {m.name: m for m in (
    ValidationModel("mobilenet-v2", "MobileNetV2 1.0 224 (3.5M): inverted residuals, 3x3 depthwise convs",
                    "vision", "MobileNetV2ForImageClassification", _cfg("MobileNetV2Config", num_labels=1001),
                    {"depth_multiplier": 0.25, "image_size": 32}, attn=None),
    ValidationModel("convnext-tiny", "ConvNeXt-T 224 (28.6M): 7x7 depthwise convs, LayerNorm, GELU MLPs",
                    "vision", "ConvNextForImageClassification", _cfg("ConvNextConfig", num_labels=1000),
                    {"depths": [1, 1, 1, 1], "hidden_sizes": [8, 16, 32, 64], "image_size": 32}, attn=None),
    ValidationModel("resnet50", "ResNet-50 (25.6M): bottleneck 1x1/3x3 convs, batch norm", "vision",
                    "ResNetForImageClassification",
                    _cfg("ResNetConfig", depths=[3, 4, 6, 3], hidden_sizes=[256, 512, 1024, 2048],
                         layer_type="bottleneck", embedding_size=64, num_labels=1000),
                    {"depths": [1, 1, 1, 1], "hidden_sizes": [16, 32, 64, 128], "embedding_size": 8,
                     "image_size": 32}, attn=None),
    ValidationModel("vit-base", "ViT-B/16 224 (86.6M): 12-layer encoder on 197 patches", "vision",
                    "ViTForImageClassification", _cfg("ViTConfig", num_labels=1000),
                    {**_TINY_TEXT, "image_size": 32, "patch_size": 8}),
    ValidationModel("swin-tiny", "Swin-T 224 (28.3M): shifted-window attention, patch merging", "vision",
                    "SwinForImageClassification", _cfg("SwinConfig", num_labels=1000),
                    {"image_size": 32, "patch_size": 4, "window_size": 2, "embed_dim": 16, "depths": [1, 1],
                     "num_heads": [1, 2]}, attn=None),
    ValidationModel("gpt2", "GPT-2 small (124M): 12-layer causal LM, MHA", "text", "GPT2LMHeadModel",
                    _cfg("GPT2Config"), {"n_layer": 2, "n_embd": 128, "n_head": 4, "vocab_size": 2000}, causal=True),
    ValidationModel("smollm2-135m", "SmolLM2-135M (135M): 30-layer Llama, GQA 9 query / 3 KV heads, SwiGLU",
                    "text", "LlamaForCausalLM",
                    _cfg("LlamaConfig", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                         max_position_embeddings=8192, rope_theta=100000.0, rms_norm_eps=1e-5,
                         tie_word_embeddings=True),
                    {**_TINY_TEXT, "num_key_value_heads": 2}, causal=True),
    ValidationModel("bert-base", "BERT-base uncased (110M): 12-layer encoder", "text", "BertModel",
                    _cfg("BertConfig"), _TINY_TEXT),
    ValidationModel("t5-small", "T5-small (60.5M): 6+6-layer encoder-decoder, relative position bias",
                    "seq2seq", "T5ForConditionalGeneration", _cfg("T5Config"),
                    {"num_layers": 2, "num_decoder_layers": 2, "d_model": 64, "d_ff": 128, "num_heads": 4,
                     "d_kv": 16, "vocab_size": 1000}),
)}

#: What ``benchmarks/cpu_validate.py`` runs by default.
VALIDATION_MODELS: tuple[str, ...] = tuple(MODELS)


def _entry(name: str) -> ValidationModel:
    try:
        return MODELS[name]
    except KeyError:
        raise NarrowpipeError(f"no validation model {name!r} (known: {', '.join(MODELS)})") from None


def _config(name: str, tiny: bool) -> Any:
    entry = _entry(name)
    config = entry.config()
    if tiny:
        for key, value in entry.tiny.items():
            setattr(config, key, value)
    if entry.attn is not None:
        config._attn_implementation = entry.attn
    return config


def check_seq_option(name: str, seq: int | None) -> None:
    """``validate --seq`` on an image model: refused (it has no sequence dim; the value was ignored)."""
    model = MODELS.get(name)
    if seq is not None and model is not None and not model.has_seq:
        raise NarrowpipeError(f"--seq {seq}: {name} is an image model, it has no sequence dim "
                              "(its input size is the architecture's); drop --seq")


def validation_label(name: str, batch: int, seq: int) -> str:
    return f"{name} b{batch}" + (f" s{seq}" if _entry(name).has_seq else "")


def build_validation_model(name: str, batch: int, seq: int = 128,
                           tiny: bool = False) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """The architecture on the CPU with random weights (seeded), and the inputs of one forward pass."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers

    config = _config(name, tiny)
    torch.manual_seed(0)
    model = getattr(transformers, _entry(name).model_class)(config).eval()
    return model, (), validation_inputs(name, model, batch, seq)


def validation_inputs(name: str, model: Any, batch: int, seq: int = 128) -> dict[str, Any]:
    """Keyword inputs of one forward pass of ``model`` (built by :func:`build_validation_model`):
    images at the config's size, or ``seq`` random tokens (an encoder-decoder gets ``seq`` decoder
    tokens too: one teacher-forced forward)."""
    import torch

    entry, config = _entry(name), model.config
    if batch < 1 or seq < 1:
        raise NarrowpipeError(f"{name}: batch and seq must be 1 or more (got batch {batch}, seq {seq})")
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if entry.has_seq and isinstance(limit, int) and seq > limit:
        raise NarrowpipeError(f"{name}: seq {seq} is past the model's {limit} positions")
    gen = torch.Generator().manual_seed(batch)
    if entry.kind == "vision":
        size = getattr(config, "image_size", 224)
        return {"pixel_values": torch.randn(batch, getattr(config, "num_channels", 3), size, size, generator=gen)}
    kwargs: dict[str, Any] = {"input_ids": torch.randint(0, config.vocab_size, (batch, seq), generator=gen)}
    if entry.kind == "seq2seq":
        kwargs["decoder_input_ids"] = torch.randint(0, config.vocab_size, (batch, seq), generator=gen)
    if entry.causal or entry.kind == "seq2seq":
        kwargs["use_cache"] = False
    return kwargs


def validation_param_count(name: str, tiny: bool = False) -> int:
    """Parameters of a validation model, or of a bundled example (counted on the meta device)."""
    import torch
    import transformers

    if name not in MODELS:
        from ..models.examples import EXAMPLES
        if name not in EXAMPLES:
            _entry(name)
        with torch.device("meta"):
            model = getattr(transformers, EXAMPLES[name].model_class)(EXAMPLES[name].config())
    else:
        with torch.device("meta"):
            model = getattr(transformers, MODELS[name].model_class)(_config(name, tiny))
    return sum(p.numel() for p in model.parameters())
