"""Bundled example models, built from published config dimensions on the meta device.

No weights are created and nothing is downloaded: each example is a transformers model class
instantiated on torch's meta device from its config and exported with ``torch.export``, with the
batch (and sequence) dims left symbolic. The lowered graphs are also shipped pre-built in
``models/data`` so the CLI answers instantly, and without torch installed; ``build_example``
re-exports them (``tools/build_examples.py`` regenerates the shipped files, and a test checks
they still match a fresh export).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from ..errors import ModelLoadError, NarrowpipeError
from ..ir import Graph, graph_from_dict, to_json

__all__ = ["Example", "EXAMPLES", "example_names", "load_example", "build_example", "shipped_path"]


@dataclass(frozen=True)
class Example:
    name: str
    description: str
    family: str                     # "causal-lm", "encoder", "vision"
    config: Callable[[], Any]       # -> transformers config
    model_class: str                # transformers class name
    dtype: str = "float32"
    dims: dict[str, int] = field(default_factory=dict)   # default bindings (what the CLI uses)
    export_dims: dict[str, int] = field(default_factory=dict)  # example sizes used to export
    max_dims: dict[str, int] = field(default_factory=dict)
    #: the config's rotary base: the export holds the inv_freq buffer's shape, not its values (meta device)
    rope_theta: float | None = None


# transformers 5 types its configs as keyword-only dataclasses that leave out the legacy keywords
# (num_labels, rope_theta) it still accepts at run time and that 4.x needs: hence the targeted
# `type: ignore[call-arg]` below.
def _gpt2() -> Any:
    from transformers import GPT2Config
    return GPT2Config()  # GPT-2 small: 12 layers, 768 hidden, 12 heads, 50257 vocab, 1024 positions


def _bert() -> Any:
    from transformers import BertConfig
    return BertConfig()  # bert-base-uncased: 12 layers, 768 hidden, 12 heads, 30522 vocab


def _resnet50() -> Any:
    from transformers import ResNetConfig
    return ResNetConfig(depths=[3, 4, 6, 3], hidden_sizes=[256, 512, 1024, 2048], layer_type="bottleneck",
                        embedding_size=64, num_labels=1000)  # type: ignore[call-arg]  # legacy keyword, see above


def _vit() -> Any:
    from transformers import ViTConfig
    return ViTConfig(num_labels=1000)  # type: ignore[call-arg]  # ViT-B/16 at 224x224; legacy keyword


_LLAMA3_ROPE_THETA = 500000.0


def _llama3(hidden: int, inter: int, layers: int, heads: int) -> Callable[[], Any]:
    def make() -> Any:
        from transformers import LlamaConfig
        return LlamaConfig(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                           num_attention_heads=heads, num_key_value_heads=8, vocab_size=128256,
                           max_position_embeddings=8192, rope_theta=_LLAMA3_ROPE_THETA, tie_word_embeddings=False,
                           rms_norm_eps=1e-5)  # type: ignore[call-arg]  # legacy keyword, see above
    return make


EXAMPLES: dict[str, Example] = {e.name: e for e in (
    Example("gpt2", "GPT-2 small (124M), causal LM, fp32", "causal-lm", _gpt2, "GPT2LMHeadModel",
            dims={"batch": 1, "seq": 1024}, export_dims={"batch": 2, "seq": 16}, max_dims={"seq": 1024}),
    Example("bert-base", "BERT-base uncased encoder (110M), fp32", "encoder", _bert, "BertModel",
            dims={"batch": 1, "seq": 512}, export_dims={"batch": 2, "seq": 16}, max_dims={"seq": 512}),
    Example("resnet50", "ResNet-50 image classifier (25.6M), 224x224, fp32", "vision", _resnet50,
            "ResNetForImageClassification", dims={"batch": 1}, export_dims={"batch": 2}),
    Example("vit-base", "ViT-B/16 image classifier (86.6M), 224x224, fp32", "vision", _vit,
            "ViTForImageClassification", dims={"batch": 1}, export_dims={"batch": 2}),
    Example("llama-3-8b", "Llama-3-8B dimensions (GQA, 32 layers, hidden 4096), bf16", "causal-lm",
            _llama3(4096, 14336, 32, 32), "LlamaForCausalLM", "bfloat16",
            dims={"batch": 1, "seq": 2048}, export_dims={"batch": 2, "seq": 16}, max_dims={"seq": 8192},
            rope_theta=_LLAMA3_ROPE_THETA),
    Example("llama-3-70b", "Llama-3-70B dimensions (GQA, 80 layers, hidden 8192), bf16", "causal-lm",
            _llama3(8192, 28672, 80, 64), "LlamaForCausalLM", "bfloat16",
            dims={"batch": 1, "seq": 2048}, export_dims={"batch": 2, "seq": 16}, max_dims={"seq": 8192},
            rope_theta=_LLAMA3_ROPE_THETA),
)}


def example_names() -> list[str]:
    return list(EXAMPLES)


def _get(name: str) -> Example:
    try:
        return EXAMPLES[name]
    except KeyError:
        import difflib
        close = difflib.get_close_matches(name, EXAMPLES, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ModelLoadError(f"no bundled example {name!r}{hint} (examples: {', '.join(EXAMPLES)})") from None


def shipped_path(name: str) -> Any:
    return resources.files("narrowpipe.models").joinpath("data", f"{name}.json.gz")


def load_example(name: str, *, rebuild: bool = False) -> Graph:
    """The example's graph: the shipped pre-lowered file, or a fresh meta-device export."""
    ex = _get(name)
    path = shipped_path(name)
    if not rebuild and path.is_file():
        # a shipped file was verified when it was written and is again by tests/ir/test_ir_verifier.py;
        # verifying it on every load doubled the load (a 70B graph: ~0.05 s more per call)
        return graph_from_dict(json.loads(gzip.decompress(path.read_bytes())), check=False)
    return build_example(ex.name)


def build_example(name: str, *, attn_implementation: str = "sdpa") -> Graph:
    """Instantiate the example on the meta device and lower it through torch.export (needs torch)."""
    ex = _get(name)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch
        import transformers
        from torch.export import Dim
    except ImportError as exc:
        raise NarrowpipeError(f"building example {name!r} needs torch and transformers: "
                              f"pip install 'narrowpipe[torch]' transformers") from exc
    from ..frontends.torch.frontend import from_torch
    from ..ir import DimSpec

    config = ex.config()
    if ex.family != "vision" or ex.name.startswith("vit"):
        config._attn_implementation = attn_implementation
    cls = getattr(transformers, ex.model_class)
    with torch.device("meta"):
        model = cls(config).to(getattr(torch, ex.dtype)).eval()
    b = ex.export_dims.get("batch", 2)
    batch = Dim("batch", min=1, max=4096)
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    dyn: dict[str, dict[int, Any] | None]
    if ex.family == "vision":
        size = getattr(config, "image_size", 224)
        x = torch.empty(b, 3, size, size, device="meta", dtype=getattr(torch, ex.dtype))
        args, kwargs, dyn = (), {"pixel_values": x}, {"pixel_values": {0: batch}}
    else:
        ids = torch.zeros(b, ex.export_dims["seq"], dtype=torch.long, device="meta")
        seq = Dim("seq", min=2, max=ex.max_dims.get("seq", 8192))
        kwargs = {"input_ids": ids}
        dyn = {"input_ids": {0: batch, 1: seq}}
        if ex.family == "causal-lm":
            kwargs["use_cache"] = False
            dyn["use_cache"] = None
        args = ()
    graph = from_torch(model, args, kwargs, dynamic_shapes=dyn, name=ex.name)
    for dim, default in ex.dims.items():
        spec = graph.dims.get(dim) or DimSpec(dim)
        graph.declare_dim(dataclasses.replace(spec, default=default))
    graph.meta.update({"example": ex.name, "description": ex.description,
                       "transformers_version": transformers.__version__})
    return graph


def save_shipped(graph: Graph, name: str, directory: str) -> str:
    """Write a graph as the gzip'd JSON the package ships (used by tools/build_examples.py)."""
    path = os.path.join(directory, f"{name}.json.gz")
    with open(path, "wb") as fh:
        fh.write(gzip.compress(to_json(graph).encode(), compresslevel=9, mtime=0))
    return path
