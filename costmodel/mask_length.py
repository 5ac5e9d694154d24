"""A decoder-with-past's attention mask spans the cache and the new tokens: ``total = past + sequence``.

An ONNX decoder-with-past export names three dims on its inputs: ``sequence_length`` on the new
tokens, ``past_sequence_length`` on the cache tensors and ``total_sequence_length`` on the integer
attention mask. The program never states the relation; the mask reaches attention through gather
indices computed at run time, so a binding with ``total`` below ``past + sequence`` was costed without
complaint while onnxruntime refuses the same inputs (the gather runs past the mask). Serving binds
``total = past + tokens`` (:meth:`.serving.prepare.ServingGraph.bindings`); a plain analysis checks
the user's binding against the same relation instead of costing a model that cannot run.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import NarrowpipeError
from ..ir import DimRole, DType, Graph, Value, ValueKind
from ..ir.roles import plain_name

__all__ = ["check_mask_length"]

#: Dtypes of attention masks and position ids (a cache is stored in a float or quantized format).
_INDEX_DTYPES = frozenset({DType.INT64, DType.INT32, DType.BOOL})


def _dims_on(values: list[Value], role_dims: set[str]) -> set[str]:
    return {name for v in values for name in map(plain_name, v.shape) if name in role_dims}


def check_mask_length(graph: Graph, bindings: Mapping[str, int]) -> None:
    """Raise when a mask-only KV-length dim is bound below the cache length plus the new tokens.

    A longer mask runs (onnxruntime reads the entries it needs from GPT-2's export), so it is accepted.

    Only the unambiguous layout is checked: one KV-length dim on the cache tensors (float inputs with
    per-token features), one on integer inputs only (the mask), one sequence dim. Sliding-window or
    several-cache layouts are left alone.
    """
    kv = set(graph.dims_with_role(DimRole.KV_LENGTH))
    seq = graph.dims_with_role(DimRole.SEQUENCE)
    if len(kv) < 2 or len(seq) != 1:
        return
    inputs = [v for v in graph.inputs if v.kind is ValueKind.INPUT]
    cache = _dims_on([v for v in inputs if v.type.dtype not in _INDEX_DTYPES and v.type.rank >= 3], kv)
    masks = _dims_on([v for v in inputs if v.type.dtype in _INDEX_DTYPES], kv) - cache
    if len(cache) != 1 or len(masks) != 1:
        return
    (past,), (total,), (new,) = cache, masks, seq
    if not all(n in bindings for n in (past, total, new)):
        return
    expected = bindings[past] + bindings[new]
    if bindings[total] < expected:
        raise NarrowpipeError(
            f"graph {graph.name!r}: {total}={bindings[total]} is shorter than the cache and the new tokens the "
            f"attention mask spans, {past} + {new} = {bindings[past]} + {bindings[new]} = {expected}; bind "
            f"{total}={expected} (the model reads mask entries past the end at the shorter length)")
