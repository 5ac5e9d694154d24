"""Which ONNX initializers are parameters: the rule that makes ``params`` match the source model.

An ONNX file does not say which initializers were trainable parameters, which were buffers and
which are constants the exporter folded, so the frontend decides, in this order:

1. **Constants** (``CONST``): initializers with at most one element (scales, epsilons, fill
   values), non-float initializers (shapes, axes, indices, masks) unless they are the quantized
   weight operand of a quantized op (``DequantizeLinear`` x, ``QLinearMatMul`` b, ``MatMulNBits``
   B, ...), and ``Constant`` nodes (lowered as constant weights elsewhere).
2. **Buffers** (``BUFFER``): float initializers read only as batch-norm statistics (inputs 3 and 4
   of ``BatchNormalization``), or named like the persistent buffers torch modules register
   (``running_mean``, ``running_var``, ``num_batches_tracked``, ``inv_freq``, ``position_ids``,
   ``freqs_cis``, ``cos_cached``/``sin_cached``, ...): exporters keep module paths as names.
3. **Tied copies** (``CONST``, noted ``tied to <name>``): a second copy of a tied embedding. When
   an embedding table (the data of a ``Gather``) and a matmul weight have the same or the
   transposed shape and the same values, the matmul weight is the table again (the legacy
   exporter folds ``wte.T`` of GPT-2's tied LM head into a second initializer). Values are
   compared at 256 positions spread over the matrix, and uniform data (all zeros, all ones) is
   never called tied. Two initializers naming the same region of the same external file are the
   same tensor; external data itself is never read.
4. Every other float initializer is a **parameter** (``PARAM``).

Identity nodes that re-expose a parameter (the legacy exporter's dedup of byte-identical
parameters, e.g. every norm weight still at 1.0) become parameters again in the lowering.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from math import prod

import numpy as np
import onnx
from onnx import GraphProto, TensorProto

from ...ir import ValueKind
from .read import InitFields, NodeFields, initializer_fields, node_fields
from .types import DTYPES

__all__ = ["classify_initializers", "BUFFER_NAMES", "QUANT_WEIGHT_SLOTS"]

BUFFER_NAMES: tuple[str, ...] = (
    "running_mean", "running_var", "num_batches_tracked", "inv_freq", "original_inv_freq", "position_ids",
    "token_type_ids", "freqs_cis", "cos_cached", "sin_cached", "_cos_cached", "_sin_cached", "masked_bias",
    "relative_position_index", "causal_mask", "attn_mask_buffer",
)

#: (domain, op) -> input slots holding a quantized weight (integer, yet a parameter).
QUANT_WEIGHT_SLOTS: dict[tuple[str, str], frozenset[int]] = {
    ("", "DequantizeLinear"): frozenset({0}), ("", "QLinearMatMul"): frozenset({0, 3}),
    ("", "QLinearConv"): frozenset({3}), ("", "MatMulInteger"): frozenset({0, 1}),
    ("", "ConvInteger"): frozenset({1}), ("com.microsoft", "MatMulNBits"): frozenset({1}),
    ("com.microsoft", "GatherBlockQuantized"): frozenset({0}),
    ("com.microsoft", "DynamicQuantizeMatMul"): frozenset({1}),
    ("com.microsoft", "MatMulIntegerToFloat"): frozenset({1}), ("com.microsoft", "QGemm"): frozenset({3}),
    ("com.microsoft", "QAttention"): frozenset({1}), ("com.microsoft", "QMoE"): frozenset({2, 5, 8}),
}
_BUFFER_SLOTS: dict[tuple[str, str], frozenset[int]] = {("", "BatchNormalization"): frozenset({3, 4})}
#: Where an embedding table is read (``Gather`` data) and where a tied copy can be read as a weight.
_EMBEDDING_SLOTS = {("", "Gather"): 0, ("com.microsoft", "GatherBlockQuantized"): 0}
_MATMUL_SLOTS = {("", "MatMul"): (0, 1), ("", "Gemm"): (0, 1), ("com.microsoft", "FusedMatMul"): (0, 1)}
_SAMPLES = 256

Uses = dict[str, list[tuple[str, str, int]]]


#: The ops whose input slots decide a weight's class; any other reader only makes a weight "used".
_SLOTTED = {*QUANT_WEIGHT_SLOTS, *_BUFFER_SLOTS, *_EMBEDDING_SLOTS, *_MATMUL_SLOTS}
_SLOTTED_OPS = {op for _domain, op in _SLOTTED}


def _uses(graphs: list[GraphProto], names: set[str], top: list[NodeFields] | None = None) -> tuple[Uses, set[str]]:
    """Initializer name -> (domain, op type, input slot) of each reader whose slot matters (the
    ops of ``_SLOTTED``), and the names any other op reads. ``top``: the main graph's (the first
    of ``graphs``) node fields when the caller has read them.

    Why two tables: the classes only ask which slotted ops read a weight, and whether anything
    else does; recording every read of a 100,000-node graph cost a fifth of a second.
    """
    out: Uses = {}
    other: set[str] = set()
    read_elsewhere = other.update
    for k, g in enumerate(graphs):
        rows = top if k == 0 and top is not None else node_fields(g)
        for op_type, domain, _name, ins, _outs, _attrs in rows:
            if op_type not in _SLOTTED_OPS or (domain, op_type) not in _SLOTTED:
                read_elsewhere(ins)
                continue
            for i, x in enumerate(ins):
                if x in names:
                    out.setdefault(x, []).append((domain, op_type, i))
    return out, other & names


def _is_buffer_name(name: str) -> bool:
    """Named like a persistent buffer: its last path component (after ``/`` or ``.``) or its tail
    is one of :data:`BUFFER_NAMES` (the last component is a tail too, so one test covers both)."""
    return name.endswith(BUFFER_NAMES)


def classify_initializers(graph: GraphProto, graphs: list[GraphProto] | None = None,
                          payloads: Callable[[], Mapping[str, memoryview]] | None = None,
                          top: list[NodeFields] | None = None,
                          inits: list[InitFields] | None = None) -> dict[str, tuple[ValueKind, str]]:
    """Initializer name -> (kind, note) for the top-level graph (see the module docstring);
    ``graphs`` are all graphs whose nodes may read the initializers (the main one and its bodies),
    ``payloads`` gives zero-copy views of raw payloads in the file's bytes (:mod:`.wire`),
    asked for only when there are embeddings to compare; ``top`` and ``inits``: :func:`.read.node_fields`
    and :func:`.read.initializer_fields` of ``graph``, when the caller has read them."""
    if inits is None:
        inits = initializer_fields(graph)
    uses, read_elsewhere = _uses(graphs if graphs is not None else [graph], {f[1] for f in inits}, top)
    out: dict[str, tuple[ValueKind, str]] = {}
    params: list[InitFields] = []
    for f in inits:
        _t, name, data_type, dims, _external = f
        n = prod(dims) if not dims or min(dims) >= 0 else 0
        dt = DTYPES.get(data_type)
        used = uses.get(name, [])
        if dt is None or n <= 1:
            out[name] = (ValueKind.CONST, "")
        elif not dt.is_float:
            quant = any(i in QUANT_WEIGHT_SLOTS.get((d, op), ()) for d, op, i in used)
            if quant:
                params.append(f)
            else:
                out[name] = (ValueKind.CONST, "")
        elif _is_buffer_name(name) or (used and name not in read_elsewhere and
                                       all(i in _BUFFER_SLOTS.get((d, op), ()) for d, op, i in used)):
            out[name] = (ValueKind.BUFFER, "")
        else:
            params.append(f)
    tied = _tied(params, uses, payloads or dict)
    for f in params:
        name = f[1]
        if name in tied:
            out[name] = (ValueKind.CONST, f"{name} (tied to {tied[name]})")
        else:
            out[name] = (ValueKind.PARAM, "")
    return out


def _tied(params: list[InitFields], uses: Uses, payloads: Callable[[], Mapping[str, memoryview]]) -> dict[str, str]:
    """Copy name -> the name of the parameter it repeats (see the module docstring)."""
    out: dict[str, str] = {}
    regions: dict[tuple, str] = {}
    for t, name, data_type, dims, external in params:  # the same region of the same external file
        if external:
            ext = {e.key: e.value for e in t.external_data}
            key = (ext.get("location"), ext.get("offset", "0"), data_type, dims)
            if key in regions:
                out[name] = regions[key]
            else:
                regions[key] = name
    tables = [f for f in params if len(f[3]) == 2 and not f[4] and
              any(_EMBEDDING_SLOTS.get((d, op)) == i for d, op, i in uses.get(f[1], ()))]
    if not tables:
        return out
    table_names = {f[1] for f in tables}
    views: Mapping[str, memoryview] | None = None
    for t, name, data_type, dims, external in params:
        if name in out or name in table_names or len(dims) != 2 or external:
            continue
        if not any(i in _MATMUL_SLOTS.get((d, op), ()) for d, op, i in uses.get(name, ())):
            continue
        for table, table_name, table_type, table_dims, _ in tables:
            if table_type != data_type or table_dims not in (dims, dims[::-1]):
                continue
            if views is None:
                views = payloads()
            if _same_values(table, t, views):
                out[name] = table_name
                break
    return out


def _same_values(table: TensorProto, other: TensorProto, payloads: Mapping[str, memoryview]) -> bool:
    a, b = _matrix(table, payloads), _matrix(other, payloads)
    if a is None or b is None:
        return False
    if a.shape != b.shape:
        a = a.T
    if a.shape != b.shape:
        return False
    rng = np.random.default_rng(0)
    rows = rng.integers(0, a.shape[0], _SAMPLES)
    cols = rng.integers(0, a.shape[1], _SAMPLES)
    sample = a[rows, cols]
    if (sample == sample[0]).all():
        return False  # uniform data: equal by coincidence, not the same parameter
    return bool(np.array_equal(sample, b[rows, cols]))


def _matrix(t: TensorProto, payloads: Mapping[str, memoryview]) -> np.ndarray | None:
    """The payload's bit patterns as a 2-D array of same-width unsigned ints (exact comparison);
    a view into the file's bytes when there is one (reading ``raw_data`` copies it)."""
    dt = DTYPES.get(t.data_type)
    try:
        if dt is not None and dt.bits in (8, 16, 32, 64) and (t.name in payloads or t.HasField("raw_data")):
            view: memoryview | bytes | None = payloads.get(t.name)
            if view is None or len(view) != dt.nbytes(prod(t.dims)):
                view = t.raw_data
            return np.frombuffer(view, dtype=f"<u{dt.bits // 8}").reshape(tuple(t.dims))
        if not t.HasField("raw_data"):
            return onnx.numpy_helper.to_array(t).reshape(tuple(t.dims))
    except Exception:  # malformed payloads are reported elsewhere; they are just not compared
        return None
    return None
