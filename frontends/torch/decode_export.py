"""Exporting a transformers causal LM's decode step, the two ways that work in transformers 5 / torch 2.13.

* ``static=False`` (default): the model called with ``input_ids [batch, 1]`` and a ``DynamicCache``
  of ``past`` tokens as an input (transformers registers the cache with torch's pytree in
  ``integrations.executorch.register_dynamic_cache_export_support``). The cache length is exported
  with ``Dim.AUTO`` (a named ``Dim`` with a range trips guards on the mask's ``min`` arithmetic that
  the solver cannot discharge) and named ``past`` here, the batch ``batch``: both stay symbolic,
  with roles BATCH and KV_LENGTH, so one export serves every batch and context. A sliding-window
  layer's cache is transformers' ``DynamicSlidingWindowLayer`` holding its ``W - 1`` tokens, named in
  ``graph.meta["kv_windows"]``: the step is the one at ``past >= W - 1`` (below that, those layers'
  keys are over-counted).
* ``static=True``: transformers' own ``StaticCache`` recipe for ExecuTorch
  (``TorchExportableModuleForDecoderOnlyLM``): the cache is preallocated buffers of
  ``max_cache_len`` tokens for ``batch`` sequences, written with ``index_copy_``; the frontend
  recognises them as the KV cache (:mod:`.static_cache`), at the exported batch and length.

Both run on the meta device when the model is on it: no weights, no downloads.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from ...errors import FrontendError
from ...ir import Graph
from ...models.decoder import KV_WINDOWS_META

__all__ = ["export_decode_step", "cache_layer_shapes"]


def export_decode_step(model: Any, *, batch: int = 2, past: int = 16, static: bool = False,
                       name: str | None = None) -> Graph:
    """The IR graph of one decode step of ``model`` (a transformers causal LM), see the module doc."""
    from .frontend import export_module, from_exported_program
    try:
        import transformers  # noqa: F401
        from transformers import DynamicCache
        from transformers.integrations.executorch import (
            TorchExportableModuleForDecoderOnlyLM,
            register_dynamic_cache_export_support,
        )
    except ImportError as exc:
        raise FrontendError(f"exporting a decode step needs transformers: {exc}") from exc
    config = model.config.get_text_config()
    device = next(model.parameters()).device
    ids = torch.zeros(batch, 1, dtype=torch.long, device=device)
    label = name or f"{type(model).__name__}-decode"
    if static:
        model.generation_config.use_cache = True
        model.generation_config.cache_implementation = "static"
        wrapper = TorchExportableModuleForDecoderOnlyLM(model, batch_size=batch, max_cache_len=past + 1, device=device)
        try:
            ep = wrapper.export(input_ids=ids, cache_position=torch.tensor([past], device=device))
        except Exception as exc:
            raise FrontendError(f"static-cache export of {type(model).__name__} failed: "
                                f"{type(exc).__name__}: {exc}") from exc
        return from_exported_program(ep, name=label)
    _register_cache_pytree(DynamicCache, register_dynamic_cache_export_support)
    shapes = cache_layer_shapes(model, config)
    dtype = next(model.parameters()).dtype
    layers = len(shapes)
    caps = sliding_caps(config)
    # duck sizing would make one symbol of equal example lengths: export ``past`` above every cap
    past_ex = max([past, *(c + 1 for c in caps.values())])
    # a windowed layer's cache is exported full, ``W - 1`` tokens (transformers' mask code fixes that
    # length: a Dim there is refused as "specialized to a constant"); the third entry makes the layer
    # transformers' ``DynamicSlidingWindowLayer``, whose masks and update the model then runs
    kv = [(torch.zeros(batch, k[0], caps.get(i, past_ex), k[1], device=device, dtype=dtype),
           torch.zeros(batch, v[0], caps.get(i, past_ex), v[1], device=device, dtype=dtype),
           *([torch.tensor(caps[i] + 1)] if i in caps else [])) for i, (k, v) in enumerate(shapes)]
    b = torch.export.Dim("batch", min=1, max=4096)
    axes = {0: b, 2: torch.export.Dim.AUTO}
    dyn = {"input_ids": {0: b}, "cache": [[axes] * layers, [axes] * layers], "use_cache": None}
    try:
        ep = export_module(model, (), {"input_ids": ids, "cache": DynamicCache(kv), "use_cache": True},
                           dynamic_shapes=dyn)
    except FrontendError as exc:   # say which cache the step was exported with: the usual suspect
        (k, v) = shapes[0]
        raise FrontendError(f"export_decode_step: the decode step of {type(model).__name__} with a cache of keys "
                            f"[batch, {k[0]}, past, {k[1]}] and values [batch, {v[0]}, past, {v[1]}] per layer "
                            f"(cache_layer_shapes) did not export: {exc}") from exc
    # Dim.AUTO has no name: the first full layer's cache length is called ``past``
    full = next((i for i in range(layers) if i not in caps), 0)
    names = {("input_ids", 0): "batch", (f"cache_key_cache_{full}", 2): "past"}
    graph = from_exported_program(ep, name=label, dim_names=names)
    if caps:
        graph.meta[KV_WINDOWS_META] = {f"cache_{part}_cache_{i}": cap for i, cap in caps.items()
                                       for part in ("key", "value")}
        spec = graph.dims.get("past")
        if spec is not None and spec.default != past:   # the default binding: the past asked for
            graph.declare_dim(replace(spec, default=past))
    return graph


#: transformers' cache layer types whose layer holds its own attention keys and values (``DynamicLayer``,
#: ``DynamicSlidingWindowLayer``): what a ``DynamicCache`` input of the exported step can carry
_KV_LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention"})


def cache_layer_shapes(model: Any, config: Any) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Per layer, the (heads, head dim) of the keys and of the values the model's attention hands
    ``cache.update``: what transformers' own cache holds, so the exported step's cache inputs are the
    tensors the model concatenates its new token to.

    A plain attention caches ``num_key_value_heads`` heads of ``head_dim`` for both. Latent attention
    (a config with ``kv_lora_rank``: DeepSeek-V2/V3 and the models built like them) caches, in
    transformers 5, the compressed latent before ``expand_kv`` expands it at every step: keys the normed
    latent ``[batch, 1, seq, kv_lora_rank]``, values the rotary key ``[batch, 1, seq, qk_rope_head_dim]``
    (modeling_deepseek_v2.py / _v3.py ``forward``); an attention without ``expand_kv`` (transformers 4)
    caches the expanded per-head keys of ``qk_nope + qk_rope`` dims and values of ``v_head_dim``. One
    ``head_dim`` for all of them made a cache no DeepSeek layer could extend (torch.export failed on the
    first ``cat``). A layer of a kind that holds no keys and values of its own (recurrent or convolutional
    state, a layer reading another's cache, an MoE-only layer) has no such input: refused, naming it."""
    name = type(model).__name__
    layers = int(config.num_hidden_layers)
    try:
        from transformers.cache_utils import get_layer_types_and_kwargs
        types = list(get_layer_types_and_kwargs(config)[0])
    except Exception:   # an older transformers, or a config it cannot read: attention everywhere
        types = ["full_attention"] * layers
    for i, kind in enumerate(types):
        if kind not in _KV_LAYER_TYPES:
            raise FrontendError(
                f"export_decode_step: layer {i} of {name} is a {kind!r} layer, whose cache in transformers holds "
                "no keys and values of its own (recurrent or convolutional state, or another layer's cache); the "
                "decode step is exported with a DynamicCache of per-layer keys and values as its input, so "
                f"only models whose every layer is one of {sorted(_KV_LAYER_TYPES)} can be exported this way")
    rank = getattr(config, "kv_lora_rank", None)
    if rank:
        rope = int(config.qk_rope_head_dim)
        if _expands_latent(model):
            return [((1, int(rank)), (1, rope))] * layers
        heads = int(config.num_attention_heads)
        return [((heads, int(config.qk_nope_head_dim) + rope), (heads, int(config.v_head_dim)))] * layers
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return [((int(heads), int(head_dim)), (int(heads), int(head_dim)))] * layers


def _expands_latent(model: Any) -> bool:
    """The model's latent attention caches the latent and expands it with ``expand_kv`` every step."""
    return any(hasattr(m, "kv_lora_rank") and callable(getattr(m, "expand_kv", None)) for m in model.modules())


def sliding_caps(config: Any) -> dict[int, int]:
    """Layer index -> the most past tokens its cache keeps (``W - 1``), for the layers transformers
    gives a ``DynamicSlidingWindowLayer`` (sliding and chunked attention): such a layer attends its
    ``W - 1`` kept tokens and the new one, so a decode step at ``past >= W - 1`` reads ``W`` keys
    there, not ``past + 1`` (Gemma3 tiny, b=2, past=30: 217600 FLOPs where transformers' own decode
    counts 205824)."""
    try:
        from transformers.cache_utils import get_layer_types_and_kwargs
        _, kwargs = get_layer_types_and_kwargs(config)
    except Exception:   # an older transformers, or a config it cannot read: no windows
        return {}
    return {i: int(kw["sliding_window"]) - 1 for i, kw in enumerate(kwargs)
            if isinstance(kw.get("sliding_window"), int) and kw["sliding_window"] > 1}


def _register_cache_pytree(cache_type: type, register: Any) -> None:
    """Make ``DynamicCache`` flatten as transformers' export support does ({key_cache, value_cache}
    lists, the shape the dynamic-shapes spec here follows). Other code in the same process may have
    registered it another way first (transformers' ONNX export path flattens it to one flat list),
    and registration keeps the first: replace whatever is there."""
    import torch.fx._pytree as fx_pytree
    from torch.utils import _pytree as pytree
    if cache_type in pytree.SUPPORTED_NODES:
        pytree._deregister_pytree_node(cache_type)
    if cache_type in fx_pytree.SUPPORTED_NODES:
        fx_pytree._deregister_pytree_flatten_spec(cache_type)
    register()
