"""Which role a graph input's symbolic dim plays, from its name and where it sits (torch and ONNX).

Both frontends see the same Hugging Face input names (``input_ids``, ``attention_mask``,
``pixel_values``, ``past_key_values...``), so one set of rules tags dims for both. A name the user or
exporter gave (``batch``, ``sequence_length``, ``past_sequence_length``) wins over position; a dim
whose name says nothing (torch's ``input_ids_0``, ONNX's ``N``) gets the role of its position: dim 0
of ``input_ids`` is the batch, dim 1 the sequence, dim 2 of a past key/value the KV length.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from ..ir import DimRole, Graph
from ..ir.roles import plain_name

__all__ = ["role_from_name", "role_at", "is_cache_input", "assign_roles"]

_BATCH_INPUTS = frozenset({"input_ids", "attention_mask", "inputs_embeds", "token_type_ids", "position_ids",
                           "pixel_values", "input_features", "input_values", "decoder_input_ids",
                           "decoder_attention_mask", "decoder_inputs_embeds", "labels", "pixel_mask"})
_SEQUENCE_INPUTS = frozenset({"input_ids", "attention_mask", "inputs_embeds", "token_type_ids", "position_ids",
                              "labels", "decoder_input_ids", "decoder_attention_mask", "decoder_inputs_embeds"})
_KV_INPUT = re.compile(r"(^|[._])(past|present|cache|key_cache|value_cache)([._]|$)|past_key_values")
_KV_WORDS = frozenset({"past", "kv", "cache", "total", "kvlen", "cached"})
_BATCH_WORDS = frozenset({"batch", "batchsize", "bs"})
_SEQUENCE_WORDS = frozenset({"seq", "sequence", "seqlen", "tokens", "ntokens"})


def role_from_name(name: str) -> DimRole | None:
    """The role a dim's own name states (``batch_size``, ``seq_len``, ``past_sequence_length``), else None."""
    words = set(re.split(r"[^a-z0-9]+", name.lower())) - {""}
    if words & _KV_WORDS:
        return DimRole.KV_LENGTH
    if words & _BATCH_WORDS:
        return DimRole.BATCH
    if words & _SEQUENCE_WORDS:
        return DimRole.SEQUENCE
    return None


def is_cache_input(input_name: str) -> bool:
    """A past key/value tensor (``past_key_values.0.key``, ``past_key``, ``key_cache``)."""
    return bool(_KV_INPUT.search(input_name.lower()))


def role_at(input_name: str, axis: int, rank: int, *, cached: bool = False) -> DimRole | None:
    """The role of dim ``axis`` of a model input by Hugging Face's conventions, else None.

    With a KV cache (``cached``) the attention mask spans past and new tokens, so its dim 1 is
    neither the sequence nor the past length and gets no role.
    """
    name = input_name.lower()
    if is_cache_input(name):
        # [batch, kv_heads, past, head_dim], or the legacy stacked [2, batch, heads, past, head_dim]
        if rank == 4:
            return {0: DimRole.BATCH, 2: DimRole.KV_LENGTH}.get(axis)
        if rank == 5:
            return {1: DimRole.BATCH, 3: DimRole.KV_LENGTH}.get(axis)
        return None
    if name == "cache_position" and axis == 0:
        return DimRole.SEQUENCE
    if axis == 0 and name in _BATCH_INPUTS:
        return DimRole.BATCH
    if axis == 1 and name in _SEQUENCE_INPUTS and not (cached and "attention_mask" in name):
        return DimRole.SEQUENCE
    return None


def assign_roles(graph: Graph, input_names: Iterable[tuple[str, str]] | None = None) -> None:
    """Tag ``graph.dims`` still of role OTHER: by the dim's name, else by its first input position.

    ``input_names`` pairs a graph input's IR name with the model's name for it when they differ.
    """
    names = {v.name: v.source_name for v in graph.inputs} | dict(input_names or ())
    cached = any(is_cache_input(n) for n in names.values())
    found: dict[str, DimRole] = {}
    for value in graph.inputs:
        for axis, d in enumerate(value.shape):
            sym = plain_name(d)
            if sym is None or sym in found:
                continue
            role = role_from_name(sym) or role_at(names[value.name], axis, len(value.shape), cached=cached)
            if role is not None:
                found[sym] = role
    for name, spec in list(graph.dims.items()):
        role = found.get(name) or role_from_name(name)
        if spec.role is DimRole.OTHER and role is not None:
            graph.declare_dim(dataclasses.replace(spec, role=role))
