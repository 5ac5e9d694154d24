"""The KV cache a decode step reads, found in the graph: which tensors, their bytes per token.

Why from the graph and not from a config: the bytes a token costs in the cache are whatever the
program stores, and that differs by architecture in ways a formula keyed on "layers x heads x dim"
misses: grouped-query and multi-query attention store ``kv_heads`` heads, an MLA-style model stores
one latent vector per token (``kv_lora_rank + qk_rope_head_dim`` values per layer, not ``2 x heads x
head_dim``), a sliding-window layer of window ``W`` keeps only the last ``W - 1`` tokens (the cap is per
input, in ``graph.meta["kv_windows"]``, as the model builder writes it). Every cache tensor has a
batch axis and a length axis; the product of its other dims times its dtype's size is what one token
of one sequence costs in it, and the cache is the sum over its tensors.

Two kinds of graph carry a cache: one whose cache inputs have a dim of role ``KV_LENGTH`` (the model
builder with ``past``, a torch export with cache inputs, an ONNX decoder-with-past), and a torch
export of transformers' ``StaticCache`` recipe, whose cache is preallocated at a fixed length (the
frontend lists those tensors in ``graph.meta["kv_cache"]``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import prod

from ...errors import NarrowpipeError
from ...ir import DimRole, DType, Graph, Value, ValueKind
from ...ir.roles import plain_name
from ..kv_lengths import INDEX_DTYPES

__all__ = ["KvTensor", "KvCache", "find_kv_cache", "STATIC_CACHE_META"]

#: ``graph.meta`` key under which a frontend lists a static (preallocated) KV cache's tensors:
#: ``[{"name": value name, "batch_axis": 0, "length_axis": 2}, ...]``.
STATIC_CACHE_META = "kv_cache"


@dataclass(frozen=True)
class KvTensor:
    """One cache tensor (a layer's keys, values, or latent vectors)."""

    name: str
    batch_axis: int | None
    length_axis: int
    bytes_per_token: int          # one token of one sequence
    dtype: str
    window: int | None = None     # a sliding-window layer keeps at most this many tokens (its window - 1)
    length_dim: str | None = None  # the KV_LENGTH dim of its length axis (None: static)


@dataclass(frozen=True)
class KvCache:
    """The cache of a decode graph. ``length_dim`` is the KV_LENGTH dim to bind (None for a static
    cache, whose length is ``static_length`` and batch ``static_batch``)."""

    tensors: tuple[KvTensor, ...]
    length_dim: str | None
    static_length: int | None = None
    static_batch: int | None = None

    @property
    def bytes_per_token(self) -> int:
        """Bytes one token of one sequence adds to the cache, over all layers."""
        return sum(t.bytes_per_token for t in self.tensors)

    @property
    def is_static(self) -> bool:
        return self.length_dim is None

    def length_bindings(self, past: int) -> dict[str, int]:
        """Each cache-length dim bound for a cache of ``past`` tokens (a window caps its layers')."""
        out: dict[str, int] = {}
        for t in self.tensors:
            if t.length_dim is not None:
                out[t.length_dim] = min(past, t.window) if t.window else past
        if self.length_dim is not None:
            out.setdefault(self.length_dim, past)
        return out

    def resident_bytes(self, batch: int, context: int) -> int:
        """Bytes the cache holds for ``batch`` sequences of ``context`` tokens (windows capped)."""
        return sum(batch * min(context, t.window or context) * t.bytes_per_token for t in self.tensors)

    def decode_traffic(self, context: int) -> int:
        """Bytes one sequence's decode step moves in the cache at ``context`` tokens: what the cache
        holds (:meth:`resident_bytes`: a window caps its layers) read, and the new token's keys and
        values written and read."""
        return self.resident_bytes(1, context) + 2 * self.bytes_per_token

    def describe(self) -> str:
        dtypes = sorted({t.dtype for t in self.tensors})
        windowed = sum(1 for t in self.tensors if t.window)
        extra = f", {windowed} of them windowed" if windowed else ""
        length = f"static length {self.static_length}" if self.is_static else f"length dim {self.length_dim!r}"
        return (f"{len(self.tensors)} cache tensors ({'/'.join(dtypes)}{extra}), "
                f"{self.bytes_per_token:,} B per token per sequence, {length}")


def _per_token(value: Value, skip: set[int]) -> int:
    """Bytes of ``value`` with the batch and length axes taken as 1; its other dims must be static."""
    rest = [d for i, d in enumerate(value.shape) if i not in skip]
    sizes = [d for d in rest if isinstance(d, int)]
    if len(sizes) != len(rest):
        raise NarrowpipeError(f"KV cache input {value.name!r} has symbolic dims besides batch and length "
                              f"({value.type}); bind them first")
    return value.type.dtype.nbytes(prod(sizes))


def _static(v: Value, axis: int) -> int:
    d = v.shape[axis]
    if not isinstance(d, int):
        raise NarrowpipeError(f"static KV cache tensor {v.name!r} has a symbolic dim {d} at axis {axis}")
    return d


def _windows(graph: Graph) -> Mapping[str, int]:
    return dict(graph.meta.get("kv_windows", {}) or {})


def find_kv_cache(graph: Graph) -> KvCache | None:
    """The graph's KV cache, or None when it has none (a prefill-only export)."""
    kv_dims = set(graph.dims_with_role(DimRole.KV_LENGTH))
    batch_dims = set(graph.dims_with_role(DimRole.BATCH))
    windows = _windows(graph)
    tensors: list[KvTensor] = []
    length_dim: str | None = None
    for v in graph.inputs:
        if v.kind is not ValueKind.INPUT:
            continue
        axes = [(i, plain_name(d)) for i, d in enumerate(v.shape)]
        length = next((i for i, name in axes if name in kv_dims), None)
        if length is None and v.name in windows and v.type.rank >= 3:
            length = v.type.rank - 2     # a windowed cache exported full: [..., W - 1, head_dim]
        if length is None:
            continue
        batch_axis = next((i for i, name in axes if name in batch_dims), None)
        if v.type.dtype in INDEX_DTYPES or len(axes) - 1 - (batch_axis is not None) < 1:
            continue   # an attention mask or positions ([batch, total_len] ints): no per-token features
        dim = axes[length][1]
        if v.name not in windows:
            length_dim = length_dim or dim
        batch = batch_axis
        skip = {length} | ({batch} if batch is not None else set())
        tensors.append(KvTensor(v.name, batch, length, _per_token(v, skip), v.type.dtype.value, windows.get(v.name),
                                dim))
    if tensors:
        unwindowed = [d for d in kv_dims if d not in {t.length_dim for t in tensors if t.window}]
        return KvCache(tuple(tensors), length_dim or (unwindowed[0] if unwindowed else tensors[0].length_dim))
    return _static_cache(graph, windows)


def _static_cache(graph: Graph, windows: Mapping[str, int]) -> KvCache | None:
    listed = graph.meta.get(STATIC_CACHE_META) or []
    if not listed:
        return None
    by_name = {v.name: v for v in graph.inputs}
    tensors, lengths, batches = [], set(), set()
    for entry in listed:
        v = by_name.get(entry["name"])
        if v is None:
            raise NarrowpipeError(f"graph.meta['{STATIC_CACHE_META}'] names {entry['name']!r}, not an input")
        b, ax = entry.get("batch_axis"), int(entry["length_axis"])
        lengths.add(_static(v, ax))
        if b is not None:
            batches.add(_static(v, int(b)))
        skip = {ax} | ({int(b)} if b is not None else set())
        tensors.append(KvTensor(v.name, b, ax, _per_token(v, skip), v.type.dtype.value, windows.get(v.name)))
    return KvCache(tuple(tensors), None, static_length=max(lengths),
                   static_batch=max(batches) if batches else 1)


def kv_dtype_of(cache: KvCache) -> DType:
    """The cache's (first) storage type."""
    return DType.parse(cache.tensors[0].dtype)
