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

__all__ = ["export_decode_step"]


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
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dtype = next(model.parameters()).dtype
    layers = config.num_hidden_layers
    caps = sliding_caps(config)
    # duck sizing would make one symbol of equal example lengths: export ``past`` above every cap
    past_ex = max([past, *(c + 1 for c in caps.values())])
    # a windowed layer's cache is exported full, ``W - 1`` tokens (transformers' mask code fixes that
    # length: a Dim there is refused as "specialized to a constant"); the third entry makes the layer
    # transformers' ``DynamicSlidingWindowLayer``, whose masks and update the model then runs
    kv = [(torch.zeros(batch, heads, caps.get(i, past_ex), head_dim, device=device, dtype=dtype),
           torch.zeros(batch, heads, caps.get(i, past_ex), head_dim, device=device, dtype=dtype),
           *([torch.tensor(caps[i] + 1)] if i in caps else [])) for i in range(layers)]
    b = torch.export.Dim("batch", min=1, max=4096)
    axes = {0: b, 2: torch.export.Dim.AUTO}
    dyn = {"input_ids": {0: b}, "cache": [[axes] * layers, [axes] * layers], "use_cache": None}
    ep = export_module(model, (), {"input_ids": ids, "cache": DynamicCache(kv), "use_cache": True},
                       dynamic_shapes=dyn)
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
