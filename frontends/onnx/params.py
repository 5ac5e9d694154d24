"""Which ONNX initializers are parameters: the rule that makes ``params`` match the source model.

An ONNX file does not say which initializers were trainable parameters, which were buffers and
which are constants the exporter folded, so the frontend decides, in this order:

1. **Constants** (``CONST``): initializers with at most one element (scales, epsilons, fill
   values), non-float initializers (shapes, axes, indices, masks) unless they are the quantized
   weight operand of a quantized op (``DequantizeLinear`` x, ``QLinearMatMul`` b, ``MatMulNBits``
   B, a ``Gather``'s 8-bit table, ...), quantization scales and zero points (read only in the scale
   and zero-point slots of quantized ops, :data:`QUANT_SCALE_SLOTS`: they are bytes of the model,
   not parameters of the float model it quantizes), and ``Constant`` nodes (lowered as constant
   weights elsewhere), also once an optimizer turned them into initializers under their output's
   name (onnxruntime's saved optimized graph keeps the torch exporter's
   ``/model/norm/Constant_output_0``: a zero LayerNorm bias, a rotary table, not a parameter).
2. **Buffers** (``BUFFER``): float initializers read only as batch-norm statistics (inputs 3 and 4
   of ``BatchNormalization``), or named like the persistent buffers torch modules register
   (``running_mean``, ``running_var``, ``num_batches_tracked``, ``inv_freq``, ``position_ids``,
   ``freqs_cis``, ``cos_cached``/``sin_cached``, ...): exporters keep module paths as names.
3. **Tied copies** (``CONST``, noted ``tied to <name>``): a second copy of a tied embedding. When
   an embedding table (the data of a ``Gather``) and a matmul weight have the same or the
   transposed shape and the same values, the matmul weight is the table again (the legacy
   exporter folds ``wte.T`` of GPT-2's tied LM head into a second initializer). Values are
   compared at 256 positions spread over the matrix, and uniform data (all zeros, all ones) is
   never called tied. Either may be read through a ``DequantizeLinear`` (a QDQ model quantizes
   the table and the LM head's copy separately, often one per tensor and one per channel): then
   the dequantized values are compared, equal within half a quantization step of each side. Two
   initializers naming the same region of the same external file are the same tensor; external
   data itself is never read.
4. Every other float initializer is a **parameter** (``PARAM``).

Identity nodes that re-expose a parameter (the legacy exporter's dedup of byte-identical
parameters, e.g. every norm weight still at 1.0) become parameters again in the lowering, also
when the Identity reads the parameter's DequantizeLinear (a QDQ model).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from math import prod

import numpy as np
import onnx
from onnx import GraphProto, TensorProto

from ...ir import DType, ValueKind
from .read import InitFields, NodeFields, initializer_fields, node_fields
from .types import DTYPES

__all__ = ["classify_initializers", "BUFFER_NAMES", "QUANT_WEIGHT_SLOTS", "QUANT_SCALE_SLOTS"]

BUFFER_NAMES: tuple[str, ...] = (
    "running_mean", "running_var", "num_batches_tracked", "inv_freq", "original_inv_freq", "position_ids",
    "token_type_ids", "freqs_cis", "cos_cached", "sin_cached", "_cos_cached", "_sin_cached", "cos_cache", "sin_cache",
    "masked_bias",
    "relative_position_index", "causal_mask", "attn_mask_buffer",
)

#: (domain, op) -> input slots holding a quantized weight (integer, yet a parameter).
QUANT_WEIGHT_SLOTS: dict[tuple[str, str], frozenset[int]] = {
    ("", "DequantizeLinear"): frozenset({0}), ("", "QLinearMatMul"): frozenset({0, 3}),
    ("", "QLinearConv"): frozenset({3, 8}), ("", "MatMulInteger"): frozenset({0, 1}),
    ("", "ConvInteger"): frozenset({1}), ("com.microsoft", "MatMulNBits"): frozenset({1}),
    ("com.microsoft", "GatherBlockQuantized"): frozenset({0}),
    ("com.microsoft", "DynamicQuantizeMatMul"): frozenset({1}),
    ("com.microsoft", "MatMulIntegerToFloat"): frozenset({1}), ("com.microsoft", "QGemm"): frozenset({3, 6}),
    ("com.microsoft", "QAttention"): frozenset({1}), ("com.microsoft", "QMoE"): frozenset({2, 5, 8}),
}
#: Quantized weight slots that hold a parameter only for integers of at most 8 bits (a quantized table;
#: a ``Gather`` of an int64 lookup table is a constant).
_NARROW_ONLY = {("", "Gather")}
QUANT_WEIGHT_SLOTS[("", "Gather")] = frozenset({0})
_MS = "com.microsoft"
_QLINEAR_UNARY = frozenset({1, 2, 3, 4})
#: (domain, op) -> input slots holding quantization scales and zero points (never parameters).
QUANT_SCALE_SLOTS: dict[tuple[str, str], frozenset[int]] = {
    ("", "DequantizeLinear"): frozenset({1, 2}), ("", "QuantizeLinear"): frozenset({1, 2}),
    ("", "QLinearMatMul"): frozenset({1, 2, 4, 5, 6, 7}), ("", "QLinearConv"): frozenset({1, 2, 4, 5, 6, 7}),
    ("", "MatMulInteger"): frozenset({2, 3}), ("", "ConvInteger"): frozenset({2, 3}),
    (_MS, "MatMulNBits"): frozenset({2, 3}), (_MS, "GatherBlockQuantized"): frozenset({2, 3}),
    (_MS, "DynamicQuantizeMatMul"): frozenset({2, 3}), (_MS, "MatMulIntegerToFloat"): frozenset({2, 3, 4, 5}),
    (_MS, "QGemm"): frozenset({1, 2, 4, 5, 7, 8}), (_MS, "QAttention"): frozenset({3, 4, 6, 7}),
    (_MS, "QMoE"): frozenset({3, 6, 9}), (_MS, "QLinearAdd"): frozenset({1, 2, 4, 5, 6, 7}),
    (_MS, "QLinearMul"): frozenset({1, 2, 4, 5, 6, 7}), (_MS, "QLinearWhere"): frozenset({2, 3, 5, 6, 7, 8}),
    **{(_MS, op): _QLINEAR_UNARY for op in ("QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax",
                                            "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearReduceMean")},
}
#: (domain, op) -> input slots holding buffers: batch-norm statistics, rotary cos/sin caches (tables
#: computed from the positions, as torch's ``inv_freq``/``cos_cached`` buffers are; GenAI's ``cos_cache``).
_BUFFER_SLOTS: dict[tuple[str, str], frozenset[int]] = {
    ("", "BatchNormalization"): frozenset({3, 4}), (_MS, "GroupQueryAttention"): frozenset({7, 8}),
    (_MS, "RotaryEmbedding"): frozenset({2, 3}), ("", "RotaryEmbedding"): frozenset({1, 2}),
}
#: Where an embedding table is read (``Gather`` data) and where a tied copy can be read as a weight.
_EMBEDDING_SLOTS = {("", "Gather"): 0, ("com.microsoft", "GatherBlockQuantized"): 0}
_MATMUL_SLOTS = {("", "MatMul"): (0, 1), ("", "Gemm"): (0, 1), ("com.microsoft", "FusedMatMul"): (0, 1)}
_SAMPLES = 256

Uses = dict[str, list[tuple[str, str, int]]]


#: The ops whose input slots decide a weight's class; any other reader only makes a weight "used".
_SLOTTED = {*QUANT_WEIGHT_SLOTS, *QUANT_SCALE_SLOTS, *_BUFFER_SLOTS, *_EMBEDDING_SLOTS, *_MATMUL_SLOTS}
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


#: the output name the torch exporter gives a ``Constant`` node (``/m/norm/Constant_3_output_0``)
_CONSTANT_OUTPUT = re.compile(r"(^|/)Constant(_\d+)?_output_\d+$")


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
    if top is None:
        top = node_fields(graph)
    names = {f[1] for f in inits}
    uses, read_elsewhere = _uses(graphs if graphs is not None else [graph], names, top)
    out: dict[str, tuple[ValueKind, str]] = {}
    params: list[InitFields] = []
    for f in inits:
        _t, name, data_type, dims, _external = f
        n = prod(dims) if not dims or min(dims) >= 0 else 0
        dt = DTYPES.get(data_type)
        used = uses.get(name, [])
        if dt is None or n <= 1 or _CONSTANT_OUTPUT.search(name) or (used and name not in read_elsewhere and
                                    all(i in QUANT_SCALE_SLOTS.get((d, op), ()) for d, op, i in used)):
            out[name] = (ValueKind.CONST, "")
        elif not dt.is_float:
            quant = any(i in QUANT_WEIGHT_SLOTS.get((d, op), ()) and
                        ((d, op) not in _NARROW_ONLY or (dt.bits <= 8 and dt is not DType.BOOL)) for d, op, i in used)
            if quant:
                params.append(f)
            else:
                out[name] = (ValueKind.CONST, "")
        elif _is_buffer_name(name) or (used and name not in read_elsewhere and
                                       all(i in _BUFFER_SLOTS.get((d, op), ()) for d, op, i in used)):
            out[name] = (ValueKind.BUFFER, "")
        else:
            params.append(f)
    through, deq = _dequantized_uses(top, {f[1] for f in params})
    tied = _tied(params, uses, payloads or dict, through, deq, {f[1]: f[0] for f in inits})
    for f in params:
        name = f[1]
        if name in tied:
            out[name] = (ValueKind.CONST, f"{name} (tied to {tied[name]})")
        else:
            out[name] = (ValueKind.PARAM, "")
    return out


#: How an initializer is read through a DequantizeLinear: (scale name, zero point name or "", axis,
#: block size).
Dequant = tuple[str, str, int, int]


def _dequantized_uses(rows: list[NodeFields], names: set[str]) -> tuple[Uses, dict[str, Dequant]]:
    """Initializer -> the embedding and matmul reads of its DequantizeLinear's output (a QDQ model's
    quantized table and LM head), and how each such initializer is dequantized."""
    deq: dict[str, tuple[str, Dequant]] = {}
    for op_type, domain, _name, ins, outs, attrs in rows:
        if op_type == "DequantizeLinear" and not domain and len(ins) > 1 and ins[0] in names and outs:
            a = {x.name: x.i for x in attrs}
            deq[outs[0]] = (ins[0], (ins[1], ins[2] if len(ins) > 2 else "", int(a.get("axis", 1)),
                                     int(a.get("block_size", 0))))
    through: Uses = {}
    if deq:
        for op_type, domain, _name, ins, _outs, _attrs in rows:
            key = (domain, op_type)
            for i, x in enumerate(ins):
                hit = deq.get(x)
                if hit is not None and (_EMBEDDING_SLOTS.get(key) == i or i in _MATMUL_SLOTS.get(key, ())):
                    through.setdefault(hit[0], []).append((domain, op_type, i))
    return through, {init: how for init, how in deq.values()}


def _tied(params: list[InitFields], uses: Uses, payloads: Callable[[], Mapping[str, memoryview]],
          through: Uses, deq: dict[str, Dequant], protos: dict[str, TensorProto]) -> dict[str, str]:
    """Copy name -> the name of the parameter it repeats (see the module docstring); ``through``:
    reads through a DequantizeLinear (:func:`_dequantized_uses`), dequantized as ``deq`` says."""
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

    def reads(name: str) -> list[tuple[str, str, int]]:
        return uses.get(name, []) + through.get(name, [])

    tables = [f for f in params if len(f[3]) == 2 and not f[4] and
              any(_EMBEDDING_SLOTS.get((d, op)) == i for d, op, i in reads(f[1]))]
    if not tables:
        return out
    table_names = {f[1] for f in tables}
    views: Mapping[str, memoryview] | None = None
    for t, name, data_type, dims, external in params:
        if name in out or name in table_names or len(dims) != 2 or external:
            continue
        if not any(i in _MATMUL_SLOTS.get((d, op), ()) for d, op, i in reads(name)):
            continue
        for table, table_name, table_type, table_dims, _ in tables:
            quantized = name in deq or table_name in deq
            if (table_type != data_type and not quantized) or table_dims not in (dims, dims[::-1]):
                continue
            if views is None:
                views = payloads()
            if _same_dequantized(table, t, views, deq, protos) if quantized else _same_values(table, t, views):
                out[name] = table_name
                break
    return out


#: Element types whose payload is read as numbers for a dequantized comparison.
_NUMPY: dict[int, str] = {
    TensorProto.FLOAT: "<f4", TensorProto.FLOAT16: "<f2", TensorProto.DOUBLE: "<f8", TensorProto.INT8: "<i1",
    TensorProto.UINT8: "<u1", TensorProto.INT16: "<i2", TensorProto.UINT16: "<u2", TensorProto.INT32: "<i4"}


def _numeric(t: TensorProto, payloads: Mapping[str, memoryview]) -> np.ndarray | None:
    """The payload of a 2-D tensor as numbers of its own type (a view into the file's bytes when
    there is one); None for types without a plain numpy layout (bf16, sub-byte ints)."""
    code = _NUMPY.get(t.data_type)
    if code is None:
        return None
    try:
        view: memoryview | bytes | None = payloads.get(t.name)
        n = prod(t.dims)
        if view is None or len(view) != n * np.dtype(code).itemsize:
            view = t.raw_data if t.HasField("raw_data") else None
        if view is not None:
            return np.frombuffer(view, dtype=code).reshape(tuple(t.dims))
        return onnx.numpy_helper.to_array(t).reshape(tuple(t.dims))
    except Exception:  # malformed payloads are reported elsewhere; they are just not compared
        return None


def _at(values: np.ndarray | None, pos: np.ndarray, default: float) -> np.ndarray | None:
    """A per-tensor or per-axis scale (or zero point) at each sampled position along its axis."""
    if values is None:
        return np.full(pos.shape, default)
    flat = values.astype(np.float64).reshape(-1)
    if flat.size == 1:
        return np.full(pos.shape, flat[0])
    return flat[pos] if values.ndim == 1 and flat.size > int(pos.max(initial=0)) else None


def _sampled(t: TensorProto, how: Dequant | None, protos: dict[str, TensorProto], payloads: Mapping[str, memoryview],
             rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The (dequantized) values of ``t`` at (rows, cols), and half a quantization step at each
    (zero for a float tensor); None when they cannot be read (blocked scales, odd types)."""
    m = _numeric(t, payloads)
    if m is None or m.ndim != 2:
        return None
    v = m[rows, cols].astype(np.float64)
    if how is None:
        return v, np.zeros_like(v)
    scale_name, zp_name, axis, block = how
    if block or scale_name not in protos or (zp_name and zp_name not in protos):
        return None
    pos = rows if axis in (0, -2) else cols
    try:
        scale = onnx.numpy_helper.to_array(protos[scale_name])
        zp = onnx.numpy_helper.to_array(protos[zp_name]) if zp_name else None
    except Exception:
        return None
    s, z = _at(scale, pos, 1.0), _at(zp, pos, 0.0)
    if s is None or z is None:
        return None
    return (v - z) * s, np.abs(s) / 2


def _same_dequantized(table: TensorProto, other: TensorProto, payloads: Mapping[str, memoryview],
                      deq: dict[str, Dequant], protos: dict[str, TensorProto]) -> bool:
    """Tied through quantization: at every sampled position the two dequantized values agree within
    half a quantization step of each (the rounding each quantization made), and the sample is not
    uniform."""
    rng = np.random.default_rng(0)
    rows = rng.integers(0, other.dims[0], _SAMPLES)
    cols = rng.integers(0, other.dims[1], _SAMPLES)
    flip = tuple(table.dims) != tuple(other.dims)
    a = _sampled(table, deq.get(table.name), protos, payloads, *((cols, rows) if flip else (rows, cols)))
    b = _sampled(other, deq.get(other.name), protos, payloads, rows, cols)
    if a is None or b is None or (a[0] == a[0][0]).all():
        return False
    tol = a[1] + b[1] + 1e-6 * np.maximum(np.abs(a[0]), np.abs(b[0]))
    return bool((np.abs(a[0] - b[0]) <= tol).all())


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
