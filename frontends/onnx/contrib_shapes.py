"""Output-shape rules of the ``com.microsoft`` contrib ops (ONNX's inference does not know them).

The shapes follow onnxruntime's contrib op schemas; ``tests/onnx`` checks them against what
onnxruntime actually returns for the attention ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import ShapeError
from ...ir import DType
from .fold import as_dims
from .node import NodeCx
from .shape_base import broadcast
from .shape_windows import WINDOW_RULES
from .shapes import OutSpec
from .symdims import dim_add, dim_floordiv, dim_mul, to_dim

__all__ = ["CONTRIB_SHAPE_RULES", "MS", "heads", "gqa_geometry", "as_dims_tuple", "fused_matmul_axes"]

MS = "com.microsoft::"


def heads(cx: NodeCx) -> int:
    n = int(cx.attr("num_heads", 0) or 0)
    if n <= 0:
        raise cx.error("num_heads must be a positive integer")
    return n


def as_dims_tuple(*ds: Any) -> tuple[Any, ...]:
    return tuple(to_dim(d) for d in ds)


def _same(cx: NodeCx) -> list[OutSpec | None]:
    return [(cx.dtype(0), cx.shape(0))] * max(cx.n_outputs(), 1)


def _skip_ln_shapes(cx: NodeCx) -> list[OutSpec | None]:
    x = cx.shape(0)
    if x is None:
        return [None] * cx.n_outputs()
    stats: OutSpec = (DType.FP32, tuple(x[:-1]) + (1,))
    specs: list[OutSpec | None] = [(cx.dtype(0), x), stats, stats, (cx.dtype(0), x)]
    return specs[:cx.n_outputs()]


def _attention_shapes(cx: NodeCx) -> list[OutSpec | None]:
    x, w = cx.shape(0), cx.shape(1)
    if x is None or w is None:
        return [None, None]
    sizes = cx.attr("qkv_hidden_sizes")
    hidden_v = sizes[2] if sizes else dim_floordiv(w[1], 3)
    hidden_k = sizes[1] if sizes else hidden_v
    n = heads(cx)
    past = cx.shape(4)
    total = dim_add(past[3], x[1]) if past is not None else x[1]
    return [(cx.dtype(0), as_dims_tuple(x[0], x[1], hidden_v)),
            (cx.dtype(0), as_dims_tuple(2, x[0], n, total, dim_floordiv(hidden_k, n)))]


def _mha_shapes(cx: NodeCx) -> list[OutSpec | None]:
    q, k, v = cx.shape(0), cx.shape(1), cx.shape(2)
    n = heads(cx)
    if q is None:
        return [None] * 4
    if k is None and len(q) == 5:  # packed QKV [B, S, N, 3, H]
        b, s, hd = q[0], q[1], q[4]
        out_hidden, kv_len = dim_mul(n, hd), q[1]
        head_dim = hd
    else:
        b, s = q[0], q[1]
        if v is not None and len(v) == 3:
            out_hidden = v[2]
        elif v is not None and len(v) == 4:
            out_hidden = dim_mul(v[1], v[3])
        elif k is not None and len(k) == 5:  # packed KV [B, L, N, 2, H]
            out_hidden = dim_mul(n, k[4])
        else:
            out_hidden = q[2]
        head_dim = dim_floordiv(q[2], n) if len(q) == 3 else q[-1]
        kv_len = k[1] if k is not None and len(k) in (3, 5) else (k[2] if k is not None else s)
    past = cx.shape(6)
    total = dim_add(past[2], kv_len) if past is not None and not (k is not None and len(k) == 4) else kv_len
    present = (cx.dtype(0), as_dims_tuple(b, n, total, head_dim))
    qk = (cx.dtype(0), as_dims_tuple(b, n, s, total))
    return [(cx.dtype(0), as_dims_tuple(b, s, out_hidden)), present, present, qk]


def _int_attr(cx: NodeCx, name: str) -> int:
    """A positive INT attribute: a FLOAT or STRING head count is a malformed node (ORT's checker refuses it)."""
    v = cx.attr(name)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise cx.error(f"GroupQueryAttention attribute {name}={v!r} must be a positive INT")
    return v


def _static(d: Any) -> int | None:
    return d if isinstance(d, int) else None


def gqa_geometry(cx: NodeCx) -> tuple[Any, Any, int, int, Any, Any]:
    """(batch, q len, q heads, kv heads, head dim, total kv len) of a GroupQueryAttention node.

    The head attributes are checked as onnxruntime checks them (``group_query_attention_helper.h``
    and its shape inference), since a floor division would otherwise give a silently wrong head
    dim: ``num_heads`` a multiple of ``kv_num_heads``; a packed query's width divisible by
    ``num_heads + 2 * kv_num_heads``; the past cache's heads and head dim equal to the node's;
    ``do_rotary=1`` needs ``cos_cache`` and ``sin_cache``.
    """
    q = cx.shape(0)
    assert q is not None
    hq, hk = _int_attr(cx, "num_heads"), _int_attr(cx, "kv_num_heads")
    said = f"num_heads={hq}, kv_num_heads={hk}"
    if hq % hk:
        raise cx.error(f"GroupQueryAttention {said}: num_heads must be a multiple of kv_num_heads")
    packed = cx.input(1) is None
    groups = hq + 2 * hk if packed else hq
    width = _static(q[2])
    if width is not None and width % groups:
        what = "packed query hidden size" if packed else "query hidden size"
        raise cx.error(f"GroupQueryAttention {said}: {what} {width} is not divisible by "
                       f"{'num_heads + 2 * kv_num_heads = ' if packed else 'num_heads = '}{groups}")
    head_dim = dim_floordiv(q[2], groups)
    key = None if packed else cx.shape(1)
    if key is not None and width is not None and _static(key[-1]) is not None and key[-1] != hk * (width // groups):
        raise cx.error(f"GroupQueryAttention {said}: key hidden size {key[-1]} is not kv_num_heads x head dim "
                       f"{hk} x {width // groups}")
    past = cx.shape(3)
    if past is not None and len(past) == 4:
        for axis, want, what in ((1, hk, "heads (kv_num_heads)"), (3, head_dim, "head dim")):
            if _static(past[axis]) is not None and _static(want) is not None and past[axis] != want:
                shown = ", ".join(map(str, past))
                raise cx.error(f"GroupQueryAttention {said}: past_key [{shown}] has {past[axis]} {what}, "
                               f"the node {want}")
    if cx.attr("do_rotary", 0) and (cx.input(7) is None or cx.input(8) is None):
        raise cx.error("GroupQueryAttention do_rotary=1 needs cos_cache and sin_cache (inputs 7 and 8)")
    total_known = as_dims(cx.known(6)) if cx.n_inputs() > 6 else None
    if total_known:
        total = total_known[0]
    elif past is not None:
        total = dim_add(past[2], q[1])
    else:
        total = q[1]
    return q[0], q[1], hq, hk, head_dim, total


def _gqa_shapes(cx: NodeCx) -> list[OutSpec | None]:
    if cx.shape(0) is None:
        return [None] * 3
    b, s, hq, hk, hd, total = gqa_geometry(cx)
    present = (cx.dtype(0), as_dims_tuple(b, hk, total, hd))
    return [(cx.dtype(0), as_dims_tuple(b, s, dim_mul(hq, hd))), present, present]


def fused_matmul_axes(cx: NodeCx, ra: int, rb: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The axis order in which FusedMatMul reads A and B, both brought to rank ``max(ra, rb)`` by
    leading 1s: ``[..batch, rows, cols]`` of the matrices it multiplies (onnxruntime's contrib
    schema, checked against its output). ``transBatchA`` moves A's first dim to just before its
    last (A [d0, d1..dr-2, dr-1] is read as [d1..dr-2, d0, dr-1]), then ``transA`` swaps the last
    two; likewise B. onnxruntime refuses a transBatch flag unless both ranks are equal and >= 3."""
    tba, tbb = int(cx.attr("transBatchA", 0)), int(cx.attr("transBatchB", 0))
    if (tba or tbb) and (ra != rb or ra < 3):
        raise cx.error(f"FusedMatMul transBatchA={tba}, transBatchB={tbb} needs both inputs of the same rank >= 3, "
                       f"got ranks {ra} and {rb} (onnxruntime refuses it too)", ShapeError)
    r = max(ra, rb)

    def order(batch_first: int, trans: int) -> tuple[int, ...]:
        axes = [*range(1, r - 1), 0, r - 1] if batch_first else list(range(r))
        if trans:
            axes[-2], axes[-1] = axes[-1], axes[-2]
        return tuple(axes)
    return order(tba, int(cx.attr("transA", 0))), order(tbb, int(cx.attr("transB", 0)))


def _fused_matmul_shapes(cx: NodeCx) -> list[OutSpec | None]:
    a, b = cx.shape(0), cx.shape(1)
    if a is None or b is None or len(a) < 2 or len(b) < 2:
        return [None]
    pa, pb = fused_matmul_axes(cx, len(a), len(b))
    r = len(pa)
    a, b = (1,) * (r - len(a)) + tuple(a), (1,) * (r - len(b)) + tuple(b)
    batch = broadcast(cx, [tuple(a[i] for i in pa[:-2]), tuple(b[i] for i in pb[:-2])])
    return [(cx.dtype(0), tuple(batch) + (a[pa[-2]], b[pb[-1]]))]


def _matmul_nbits_shapes(cx: NodeCx) -> list[OutSpec | None]:
    a = cx.shape(0)
    n = cx.attr("N")
    if a is None or n is None:
        return [None]
    return [(cx.dtype(0), tuple(a[:-1]) + (int(n),))]


def _matmul_like_shapes(cx: NodeCx) -> list[OutSpec | None]:
    a, b = cx.shape(0), cx.shape(1)
    if a is None or b is None:
        return [None]
    dt = cx.dtype(2) if cx.key.endswith("MatMulIntegerToFloat") else cx.dtype(0)
    return [(dt if dt is not None and dt.is_float else DType.FP32, tuple(a[:-1]) + (b[-1],))]


def _embed_ln_shapes(cx: NodeCx) -> list[OutSpec | None]:
    ids, word = cx.shape(0), cx.shape(2)
    if ids is None or word is None:
        return [None] * 3
    out = (cx.dtype(2), as_dims_tuple(ids[0], ids[1], word[1]))
    return [out, (DType.INT32, (ids[0],)), out]


def _gemm_gelu_shapes(cx: NodeCx) -> list[OutSpec | None]:
    a, b = cx.shape(0), cx.shape(1)
    if a is None or b is None:
        return [None]
    return [(cx.dtype(0), tuple(a[:-1]) + (b[-1],))]


def _gather_block_shapes(cx: NodeCx) -> list[OutSpec | None]:
    data, idx = cx.shape(0), cx.shape(1)
    if data is None or idx is None:
        return [None]
    axis = int(cx.attr("gather_axis", 0))
    axis = axis + len(data) if axis < 0 else axis
    dt = cx.dtype(2) or DType.FP32
    last = list(data)
    bits = int(cx.attr("bits", 4))
    if cx.dtype(0) in (DType.UINT8,) and bits == 4:
        last[-1] = dim_mul(last[-1], 2)
    return [(dt, tuple(last[:axis]) + tuple(idx) + tuple(last[axis + 1:]))]


def _qgemm_shapes(cx: NodeCx) -> list[OutSpec | None]:
    """QGemm: [M, N] (transA/transB), y_zero_point's type when requantized (y_scale given), else float."""
    a, b = cx.shape(0), cx.shape(3)
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return [None]
    m = a[1] if int(cx.attr("transA", 0)) else a[0]
    n = b[0] if int(cx.attr("transB", 0)) else b[1]
    quantized = cx.n_inputs() > 7 and cx.input(7) is not None
    dt = (cx.dtype(8) or DType.UINT8) if quantized else DType.FP32
    return [(dt, (m, n))]


def _data_rule(rule: Callable[[NodeCx], list[OutSpec | None]]) -> Callable[[NodeCx], list[OutSpec | None]]:
    """A QLinear op's output: its float op's shape rule over the data operand, in the data's type."""
    def fn(cx: NodeCx) -> list[OutSpec | None]:
        spec = rule(cx)[:1]
        return [(cx.dtype(0), spec[0][1]) if spec and spec[0] else None]
    return fn


def _qlinear_global_pool_shapes(cx: NodeCx) -> list[OutSpec | None]:
    x = cx.shape(0)
    if x is None:
        return [None]
    if cx.attr("channels_last", 0):   # [N, spatial..., C]
        return [(cx.dtype(0), (x[0],) + (1,) * (len(x) - 2) + (x[-1],))]
    return [(cx.dtype(0), tuple(x[:2]) + (1,) * (len(x) - 2))]


def _qlinear_reduce_mean_shapes(cx: NodeCx) -> list[OutSpec | None]:
    x = cx.shape(0)
    if x is None:
        return [None]
    axes = {a + len(x) if a < 0 else a for a in (cx.attr("axes") or range(len(x)))}
    if cx.attr("keepdims", 1):
        return [(cx.dtype(0), tuple(1 if i in axes else d for i, d in enumerate(x)))]
    return [(cx.dtype(0), tuple(d for i, d in enumerate(x) if i not in axes))]


def _qlinear_concat_shapes(cx: NodeCx) -> list[OutSpec | None]:
    shapes = [cx.shape(i) for i in range(2, cx.n_inputs(), 3)]
    if not shapes or any(s is None for s in shapes):
        return [None]
    first = shapes[0]
    assert first is not None
    axis = int(cx.attr("axis", 0))
    axis = axis + len(first) if axis < 0 else axis
    if not 0 <= axis < len(first) or any(s is not None and len(s) != len(first) for s in shapes):
        raise cx.error(f"QLinearConcat inputs of ranks {[len(s or ()) for s in shapes]} on axis {axis}")
    total: Any = 0
    for s in shapes:
        assert s is not None
        total = dim_add(total, s[axis])
    return [(cx.dtype(2), tuple(first[:axis]) + (to_dim(total),) + tuple(first[axis + 1:]))]


def _qlinear_where_shapes(cx: NodeCx) -> list[OutSpec | None]:
    shapes = [s for s in (cx.shape(0), cx.shape(1), cx.shape(4)) if s is not None]
    return [(cx.dtype(1), broadcast(cx, shapes))] if len(shapes) == 3 else [None]


def _broadcast_shapes(cx: NodeCx) -> list[OutSpec | None]:
    shapes = [s for s in (cx.shape(0), cx.shape(3) if cx.n_inputs() > 3 else None) if s is not None]
    return [(cx.dtype(0), broadcast(cx, shapes))] if shapes else [None]


def _fused_conv_shapes(cx: NodeCx) -> list[OutSpec | None]:
    spec = WINDOW_RULES["Conv"](cx)
    return [(cx.dtype(0), spec[0][1]) if spec and spec[0] else None]


CONTRIB_SHAPE_RULES: dict[str, Callable[[NodeCx], list[OutSpec | None]]] = {
    MS + "Attention": _attention_shapes, MS + "MultiHeadAttention": _mha_shapes,
    MS + "DecoderMaskedMultiHeadAttention": _mha_shapes, MS + "GroupQueryAttention": _gqa_shapes,
    MS + "SkipLayerNormalization": _skip_ln_shapes, MS + "SkipSimplifiedLayerNormalization": _skip_ln_shapes,
    MS + "FusedMatMul": _fused_matmul_shapes, MS + "MatMulNBits": _matmul_nbits_shapes,
    MS + "MatMulIntegerToFloat": _matmul_like_shapes, MS + "DynamicQuantizeMatMul": _matmul_like_shapes,
    MS + "EmbedLayerNormalization": _embed_ln_shapes, MS + "GemmFastGelu": _gemm_gelu_shapes,
    MS + "GatherBlockQuantized": _gather_block_shapes, MS + "FusedConv": _fused_conv_shapes,
    **{MS + op: _same for op in ("BiasGelu", "FastGelu", "Gelu", "QuickGelu", "BiasAdd", "RotaryEmbedding",
                                 "BiasSoftmax", "BiasDropout", "SimplifiedLayerNormalization",
                                 "LayerNormalization", "QLinearSigmoid", "QLinearLeakyRelu", "Trilu")},
    MS + "QLinearAdd": _broadcast_shapes, MS + "QLinearMul": _broadcast_shapes,
    MS + "QGemm": _qgemm_shapes, MS + "QLinearSoftmax": _same, MS + "QLinearConcat": _qlinear_concat_shapes,
    MS + "QLinearGlobalAveragePool": _qlinear_global_pool_shapes, MS + "QLinearWhere": _qlinear_where_shapes,
    MS + "QLinearAveragePool": _data_rule(WINDOW_RULES["AveragePool"]),
    MS + "QLinearReduceMean": _qlinear_reduce_mean_shapes,
}
