"""transformers' ``StaticCache`` in an export: preallocated KV buffers updated in place are the KV cache.

The executorch recipe (``transformers.integrations.executorch.TorchExportableModuleForDecoderOnlyLM``,
what exports a decode step with a static cache in transformers 5 and torch 2.13) registers each
layer's keys and values as module buffers of ``[batch, kv_heads, max_cache_len, head_dim]`` and
writes the new token into them with ``index_copy_``. As buffers they would count as weights; they
are the KV cache, state the runtime owns. So a buffer whose name says cache, of rank 4 (or the
legacy stacked rank 5) and mutated in place, becomes a graph input, and ``graph.meta["kv_cache"]``
lists it with its batch and length axes for serving. Its shape is static (buffers cannot be
dynamic in ``torch.export``), so the cache's length and batch are the exported ones; an export
with cache *inputs* (a ``DynamicCache`` argument) keeps both symbolic instead.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from ..dim_roles import is_cache_input
from .lowering import op_key

__all__ = ["static_cache_buffers", "KV_CACHE_META"]

#: ``graph.meta`` key serving reads (:data:`narrowpipe.costmodel.serving.kvcache.STATIC_CACHE_META`).
KV_CACHE_META = "kv_cache"


def _mutated_in_place(gm: fx.GraphModule) -> set[str]:
    """Placeholders an in-place aten op (``index_copy_``, ``copy_``) writes into."""
    out: set[str] = set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or not node.args or not isinstance(node.args[0], fx.Node):
            continue
        packet = op_key(node.target)[1]
        if packet.endswith("_") and not packet.endswith("__") and node.args[0].op == "placeholder":
            out.add(node.args[0].name)
    return out


def static_cache_buffers(ep: ExportedProgram) -> dict[str, dict[str, Any]]:
    """Placeholder name -> its ``kv_cache`` entry (batch and length axes) for each static cache buffer."""
    sig = ep.graph_signature
    mutated_targets = set(getattr(sig, "buffers_to_mutate", {}).values())
    in_place = _mutated_in_place(ep.graph_module)
    out: dict[str, dict[str, Any]] = {}
    for spec in sig.input_specs:
        if spec.kind != InputKind.BUFFER or not hasattr(spec.arg, "name"):
            continue
        name = spec.arg.name
        node = next((n for n in ep.graph_module.graph.nodes if n.op == "placeholder" and n.name == name), None)
        val = node.meta.get("val") if node is not None else None
        if not isinstance(val, torch.Tensor) or val.dim() not in (4, 5):
            continue
        if not (is_cache_input(spec.target or "") or is_cache_input(name)):
            continue
        if name not in in_place and spec.target not in mutated_targets:
            continue
        batch, length = (0, 2) if val.dim() == 4 else (1, 3)
        out[name] = {"batch_axis": batch, "length_axis": length, "target": spec.target}
    return out
