"""The attention mask's length in a decoder-with-past export: past + new tokens, not a KV length.

An ONNX decoder-with-past (optimum's, onnxruntime GenAI's builder) names three dims on its inputs:
``sequence_length`` on the new tokens, ``past_sequence_length`` on the cache tensors and
``total_sequence_length`` on the integer attention mask. By their names both of the last two read as
``KV_LENGTH``, so ``graph.role_size(DimRole.KV_LENGTH)`` multiplied them (2047 x 2048) although the
role is the past length and the total counts the new tokens too. The total is derived from the other
two, so it gets no role (``OTHER``) and is recorded in ``graph.meta["kv_total_length"]``::

    {"dim": "total_sequence_length", "past": "past_sequence_length", "sequence": "sequence_length",
     "exact": True}

Serving binds it to ``past + tokens`` (:meth:`narrowpipe.costmodel.serving.prepare.ServingGraph.bindings`)
and an analysis refuses a binding below that (:func:`narrowpipe.costmodel.kv_lengths.check_mask_length`),
and above it where ``exact``: a GroupQueryAttention attends ``total`` keys (its present cache is
``total`` long), so a longer mask would be costed as keys the cache does not hold; a plain mask
(GPT-2's export) is read only where the model indexes it, so a longer one runs.
"""

from __future__ import annotations

import dataclasses

from ...ir import DimRole, DType, Graph, ValueKind
from ...ir.roles import plain_name

__all__ = ["TOTAL_LENGTH_META", "tag_total_length"]

#: ``graph.meta`` key of the mask's total-length dim and the dims it is the sum of.
TOTAL_LENGTH_META = "kv_total_length"
_INDEX = frozenset({DType.INT64, DType.INT32, DType.BOOL})


def tag_total_length(graph: Graph) -> None:
    """Find the one KV-length dim only integer inputs (the mask) carry, beside one on the cache tensors
    and one sequence dim; give it role OTHER and record it (module doc). Other layouts are left alone."""
    kv = set(graph.dims_with_role(DimRole.KV_LENGTH))
    seq = graph.dims_with_role(DimRole.SEQUENCE)
    if len(kv) < 2 or len(seq) != 1:
        return
    inputs = [v for v in graph.inputs if v.kind is ValueKind.INPUT]

    def dims_on(values: list) -> set[str]:
        return {n for v in values for n in map(plain_name, v.shape) if n in kv}

    cache = dims_on([v for v in inputs if v.type.dtype not in _INDEX and v.type.rank >= 3])
    masks = dims_on([v for v in inputs if v.type.dtype in _INDEX]) - cache
    if len(cache) != 1 or len(masks) != 1:
        return
    (past,), (total,) = cache, masks
    exact = any(n.source.op.endswith("::GroupQueryAttention") for n in graph.nodes)
    graph.declare_dim(dataclasses.replace(graph.dims[total], role=DimRole.OTHER))
    graph.meta[TOTAL_LENGTH_META] = {"dim": total, "past": past, "sequence": seq[0], "exact": exact}
