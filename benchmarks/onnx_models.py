"""The transformers models the ONNX frontend is checked on, and how they are exported.

GPT-2, BERT, a Llama-style model with grouped-query attention, ResNet and ViT, built from
transformers config classes with random weights (``HF_HUB_OFFLINE=1``, nothing is downloaded), at
``tiny`` size for tests and ``full`` size for benchmarks, exported with ``torch.onnx.export`` by
the dynamo exporter or the legacy TorchScript exporter. Used by ``tests/onnx`` and the ONNX
benchmarks, so both check the same thing.

Export choices, each for a reason:

* Weights get a little noise before export: freshly initialized norms are all ones and biases all
  zeros, and both exporters merge byte-identical initializers (the dynamo one silently), which
  would make parameter counts depend on the random init rather than on the model.
* Causal LMs export with ``use_cache=False`` and an explicit ``attention_mask`` (the legacy exporter
  fails on ``aten::diff`` without one); BERT returns its pooler output too, else exporters prune
  the pooler and the FLOPs differ from the torch path for a good reason.
* ResNet exports keep batch norm (legacy: no constant folding; dynamo: no graph optimization):
  the default exports fold it into the convolutions, which removes its parameters from the file
  (``params`` then drops by the sum of the batch-norm channel counts, one per folded layer).
* The full-size Llama's legacy export skips constant folding too (it would transpose every weight
  into a copy and run out of memory); its weights then reach the matmuls through Transpose nodes.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

__all__ = ["MODELS", "ModelSpec", "build", "export", "example_inputs", "torch_reference", "dims_for"]


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str          # "lm", "encoder", "vision"
    cls: str             # transformers class


MODELS: dict[str, ModelSpec] = {
    "gpt2": ModelSpec("gpt2", "lm", "GPT2LMHeadModel"),
    "bert": ModelSpec("bert", "encoder", "BertModel"),
    "llama": ModelSpec("llama", "lm", "LlamaForCausalLM"),
    "resnet": ModelSpec("resnet", "vision", "ResNetForImageClassification"),
    "vit": ModelSpec("vit", "vision", "ViTForImageClassification"),
}


def _config(name: str, size: str) -> Any:
    import transformers as T
    tiny = size == "tiny"
    if name == "gpt2":
        return T.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=128,
                            bos_token_id=0, eos_token_id=0) if tiny else T.GPT2Config()
    if name == "bert":
        return T.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                            vocab_size=1000, max_position_embeddings=128) if tiny else T.BertConfig()
    if name == "llama":
        if tiny:
            return T.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                 intermediate_size=128, vocab_size=1000, max_position_embeddings=128,
                                 tie_word_embeddings=False)
        # Llama-3.2-1B dimensions: 16 layers, hidden 2048, 32 query / 8 KV heads, tied embeddings.
        return T.LlamaConfig(num_hidden_layers=16, hidden_size=2048, num_attention_heads=32, num_key_value_heads=8,
                             intermediate_size=8192, vocab_size=128256, max_position_embeddings=8192,
                             rope_theta=500000.0, tie_word_embeddings=True, head_dim=64)
    if name == "resnet":
        if tiny:
            return T.ResNetConfig(depths=[1, 1], hidden_sizes=[32, 64], embedding_size=16, layer_type="bottleneck",
                                  num_labels=10)
        return T.ResNetConfig(depths=[3, 4, 6, 3], hidden_sizes=[256, 512, 1024, 2048], layer_type="bottleneck",
                              embedding_size=64, num_labels=1000)
    if name == "vit":
        return T.ViTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                           image_size=32, patch_size=8, num_labels=10) if tiny else T.ViTConfig(num_labels=1000)
    raise KeyError(name)


def build(name: str, size: str = "tiny", attn: str = "eager", seed: int = 0) -> Any:
    """The model in eval mode with random, slightly perturbed weights (see the module docstring)."""
    import torch
    import transformers
    config = _config(name, size)
    if MODELS[name].family != "vision" or name == "vit":
        config._attn_implementation = attn
    torch.manual_seed(seed)
    model = getattr(transformers, MODELS[name].cls)(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 1e-3)
    return model


def _wrap(model: Any, family: str) -> Any:
    """Positional-argument forward for the exporters, returning plain tensors."""
    import torch

    class LM(torch.nn.Module):
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            extra = {"use_cache": False} if family == "lm" else {}
            out = self.m(input_ids=input_ids, attention_mask=attention_mask, **extra)
            return (out[0], out[1]) if family == "encoder" else out[0]

    class Vision(torch.nn.Module):
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, pixel_values: Any) -> Any:
            return self.m(pixel_values=pixel_values)[0]

    return (Vision if family == "vision" else LM)(model).eval()


def example_inputs(name: str, size: str = "tiny", batch: int = 2, seq: int = 16) -> tuple[Any, ...]:
    import torch
    if MODELS[name].family == "vision":
        image = 32 if size == "tiny" else 224
        return (torch.randn(batch, 3, image, image),)
    vocab = 1000 if size == "tiny" else 30000
    return (torch.randint(0, vocab, (batch, seq)), torch.ones(batch, seq, dtype=torch.long))


def dims_for(name: str, batch: int = 2, seq: int = 16) -> dict[str, int]:
    return {"batch": batch} if MODELS[name].family == "vision" else {"batch": batch, "sequence": seq}


def export(model: Any, name: str, path: str, exporter: str, size: str = "tiny", *, keep_bn: bool = True) -> float:
    """Export with ``exporter`` ("legacy" or "dynamo"), batch (and sequence) dynamic; returns seconds."""
    import torch
    family = MODELS[name].family
    wrapped = _wrap(model, family)
    args = example_inputs(name, size)
    names = ["pixel_values"] if family == "vision" else ["input_ids", "attention_mask"]
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "legacy":
            axes = {n: ({0: "batch"} if family == "vision" else {0: "batch", 1: "sequence"}) for n in names}
            # Constant folding would fold BN into the convs, and for the 1B Llama it transposes every
            # weight into a copy, which needs more than this machine's 23 GB.
            fold = not ((keep_bn and name == "resnet") or (name == "llama" and size == "full"))
            torch.onnx.export(wrapped, args, path, dynamo=False, input_names=names, dynamic_axes=axes,
                              opset_version=17, do_constant_folding=fold)
        else:
            batch = torch.export.Dim("batch", max=4096)
            seq = torch.export.Dim("sequence", max=8192)
            key = {"pixel_values": "pixel_values"} if family == "vision" else {"input_ids": "input_ids",
                                                                               "attention_mask": "attention_mask"}
            dyn = {k: ({0: batch} if family == "vision" else {0: batch, 1: seq}) for k in key}
            torch.onnx.export(wrapped, args, path, dynamo=True, input_names=names, dynamic_shapes=dyn,
                              optimize=not (keep_bn and name == "resnet"), external_data=True)
    return time.perf_counter() - t


def torch_reference(model: Any, name: str, size: str = "tiny", batch: int = 2, seq: int = 16) -> dict[str, Any]:
    """The torch path's numbers for the same model and inputs: narrowpipe.from_torch + analyze."""
    import narrowpipe
    wrapped = _wrap(model, MODELS[name].family)
    graph = narrowpipe.from_torch(wrapped, example_inputs(name, size, batch, seq))
    report = narrowpipe.analyze(graph)
    return {"modeled_flops": report.modeled_flops, "params": sum(p.numel() for p in model.parameters()),
            "graph_params": report.params, "flops": report.flops}
