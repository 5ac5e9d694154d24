"""How a decoder-with-past's KV-length dims relate, checked or derived where dims are bound.

**The mask.** An attention mask spans the cache and the new tokens: ``total = past + sequence``. An
ONNX decoder-with-past export names three dims on its inputs: ``sequence_length`` on the new tokens,
``past_sequence_length`` on the cache tensors and ``total_sequence_length`` on the integer attention
mask. The program never states the relation; the mask reaches attention through gather
indices computed at run time, so a binding with ``total`` below ``past + sequence`` was costed without
complaint while onnxruntime refuses the same inputs (the gather runs past the mask). Serving binds
``total = past + tokens`` (:meth:`.serving.prepare.ServingGraph.bindings`); a plain analysis checks
the user's binding against the same relation instead of costing a model that cannot run.

**Sliding windows.** A windowed layer's cache holds ``min(past, cap)`` tokens (``graph.meta["kv_windows"]``
names each windowed cache input and its cap; the model builder puts them on ``past_window``). Binding
``past`` alone left the window dim at its export-time default: ``past=4`` attended 15 windowed keys that
a 4-token cache cannot hold. The window dim follows ``past`` unless given, and may not exceed it.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from ..errors import NarrowpipeError
from ..ir import DimRole, DType, Graph, Value, ValueKind
from ..ir.roles import plain_name

__all__ = ["check_mask_length", "bind_windows", "INDEX_DTYPES"]

#: Dtypes of attention masks and position ids, never a KV cache (a cache is stored in a float or
#: quantized format); :func:`.serving.kvcache.find_kv_cache` reads it too.
INDEX_DTYPES = frozenset({DType.INT64, DType.INT32, DType.BOOL})


def _dims_on(values: list[Value], role_dims: set[str]) -> set[str]:
    return {name for v in values for name in map(plain_name, v.shape) if name in role_dims}


def check_mask_length(graph: Graph, bindings: Mapping[str, int]) -> None:
    """Raise when a mask-only KV-length dim is bound below the cache length plus the new tokens.

    A longer mask runs (onnxruntime reads the entries it needs from GPT-2's export), so it is accepted.

    Only the unambiguous layout is checked: one KV-length dim on the cache tensors (float inputs with
    per-token features), one on integer inputs only (the mask), one sequence dim. Sliding-window or
    several-cache layouts are left alone. The ONNX frontend records that layout's total dim
    (``graph.meta["kv_total_length"]``, ``frontends/onnx/total_length.py``), no KV length itself; where
    a GroupQueryAttention attends the total (``exact``), a longer one is refused too.
    """
    recorded = graph.meta.get("kv_total_length")
    if recorded:
        _check_total(graph, bindings, recorded["past"], recorded["dim"], recorded["sequence"],
                     bool(recorded.get("exact")))
        return
    kv = set(graph.dims_with_role(DimRole.KV_LENGTH))
    seq = graph.dims_with_role(DimRole.SEQUENCE)
    if len(kv) < 2 or len(seq) != 1:
        return
    inputs = [v for v in graph.inputs if v.kind is ValueKind.INPUT]
    cache = _dims_on(_cache_inputs(graph), kv)
    masks = _dims_on([v for v in inputs if v.type.dtype in INDEX_DTYPES], kv) - cache
    if len(cache) != 1 or len(masks) != 1:
        return
    (past,), (total,), (new,) = cache, masks, seq
    _check_total(graph, bindings, past, total, new, exact=False)


def _check_total(graph: Graph, bindings: Mapping[str, int], past: str, total: str, new: str, exact: bool) -> None:
    if not all(n in bindings for n in (past, total, new)):
        return
    expected = bindings[past] + bindings[new]
    if exact and bindings[total] > expected:
        raise NarrowpipeError(
            f"graph {graph.name!r}: {total}={bindings[total]} is longer than the cache and the new tokens, "
            f"{past} + {new} = {bindings[past]} + {bindings[new]} = {expected}; its GroupQueryAttention attends "
            f"{total} keys, so bind {total}={expected}")
    if bindings[total] < expected:
        raise NarrowpipeError(
            f"graph {graph.name!r}: {total}={bindings[total]} is shorter than the cache and the new tokens the "
            f"attention mask spans, {past} + {new} = {bindings[past]} + {bindings[new]} = {expected}; bind "
            f"{total}={expected} (the model reads mask entries past the end at the shorter length)")


def _cache_inputs(graph: Graph) -> list[Value]:
    return [v for v in graph.inputs
            if v.kind is ValueKind.INPUT and v.type.dtype not in INDEX_DTYPES and v.type.rank >= 3]


def bind_windows(graph: Graph, given: Mapping[str, object], bindings: MutableMapping[str, int]) -> None:
    """Bind each window dim the user did not give to ``min(past, cap)``; refuse one given above ``past``."""
    caps: dict[str, object] = dict(graph.meta.get("kv_windows") or {})
    if not caps:
        return
    kv = set(graph.dims_with_role(DimRole.KV_LENGTH))
    cache = _cache_inputs(graph)
    windowed: dict[str, int] = {}
    for v in cache:
        if v.name in caps:
            for name in _dims_on([v], kv):
                windowed[name] = max(windowed.get(name, 0), int(caps[v.name]))  # type: ignore[call-overload]
    plain = _dims_on([v for v in cache if v.name not in caps], kv) - set(windowed)
    if len(plain) != 1 or not windowed:
        return
    (past,) = plain
    if past not in bindings:
        return
    for name, cap in windowed.items():
        if name not in given:
            bindings[name] = min(bindings[past], cap)
        elif bindings[name] > bindings[past]:
            raise NarrowpipeError(
                f"graph {graph.name!r}: {name}={bindings[name]} but a sliding-window cache holds at most the "
                f"{past}={bindings[past]} tokens there are (bind {name}=min({past}, {cap}) = "
                f"{min(bindings[past], cap)}, or leave it out and it follows {past})")
