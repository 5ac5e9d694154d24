"""Lowerings of ONNX contractions and convolutions: MatMul, Gemm, Einsum, Conv, ConvTranspose and
their integer and quantized forms.

Every one becomes :attr:`Op.DOT` (dot_general) or :attr:`Op.CONV`, with biases and scales as
separate elementwise nodes, so contraction FLOPs match ``torch.utils.flop_counter`` exactly
whatever the exporter chose (``Gemm`` with ``transB`` or ``MatMul`` with a pre-transposed weight
give the same count).

Zero points of integer contractions (``MatMulInteger``, ``ConvInteger``, ``QLinearMatMul``,
``QLinearConv``, com.microsoft ``QGemm``) are extra operands of the DOT or CONV itself, after its two
operands, named by its ``zero_points`` attr (``("lhs", "rhs")``, or the one given): their bytes are
read, but no ``A - zp`` or ``W - zp`` tensor is formed. Integer GEMM libraries (MLAS, oneDNN,
cuBLASLt) fold zero points into the int32 accumulator through the row sums of A and the column sums
of W (``sum_k (a - za)(w - zw) = sum a w - zw sum a - za sum w + K za zw``), computed while the
operands are packed; an elementwise pass over a 4096x4096 weight would cost a 16.8 MB round trip
that no such kernel makes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...ir import OPERAND_MAJOR, DType, Node, Op, TensorType, Value
from .node import NodeCx
from .stamp import pure
from .symdims import dim_eq
from .windows import check_window_attrs, window_attrs

__all__ = ["CONTRACTION_LOWERINGS", "dot", "matmul", "unsqueeze_front", "conv_attrs", "zero_points", "ZeroPoints"]


#: Zero points a contraction reads: (the values, which operand each belongs to: "lhs" or "rhs").
ZeroPoints = tuple[tuple[Value, ...], tuple[str, ...]]


def dot(cx: NodeCx, lhs: Value, rhs: Value, lc: tuple[int, ...], rc: tuple[int, ...],
        lb: tuple[int, ...] = (), rb: tuple[int, ...] = (), *, types: list[TensorType] | None = None,
        bind: bool = True, suffix: str = "", extra: dict[str, Any] | None = None,
        zero_points: ZeroPoints = ((), ())) -> Node:
    """One dot_general; ``zero_points``: (values, sides) read by the integer GEMM (module docstring)."""
    attrs = {"lhs_contract": lc, "rhs_contract": rc, "lhs_batch": lb, "rhs_batch": rb, **(extra or {})}
    zps, sides = zero_points
    if zps:
        attrs["zero_points"] = sides
    return cx.emit(Op.DOT, [lhs, rhs, *zps], attrs, types=types, bind=bind, suffix=suffix)


def unsqueeze_front(cx: NodeCx, v: Value, rank: int, suffix: str) -> Value:
    """``v`` with leading 1s up to ``rank`` (a free view), as a broadcasting matmul reads it."""
    if v.type.rank == rank:
        return v
    t = v.type.with_shape((1,) * (rank - v.type.rank) + tuple(v.type.shape))
    return cx.emit(Op.RESHAPE, [v], types=[t], bind=False, suffix=suffix).outputs[0]


def matmul(cx: NodeCx, a: Value, b: Value, *, types: list[TensorType] | None = None, bind: bool = True,
           suffix: str = "", zero_points: ZeroPoints = ((), ())) -> Node:
    """numpy/torch matmul semantics: 1-D operands, 2-D folding and broadcast batch dims."""
    ra, rb = a.type.rank, b.type.rank
    if ra == 0 or rb == 0:
        raise cx.error("MatMul operands must have rank >= 1")
    kw: dict[str, Any] = {"types": types, "bind": bind, "suffix": suffix, "zero_points": zero_points}
    if ra == 1 and rb == 1:
        return dot(cx, a, b, (0,), (0,), **kw)
    if rb == 1:
        return dot(cx, a, b, (ra - 1,), (0,), **kw)
    if ra == 1:
        return dot(cx, a, b, (0,), (rb - 2,), **kw)
    if rb == 2:
        return dot(cx, a, b, (ra - 1,), (0,), **kw)
    r = max(ra, rb)
    a = unsqueeze_front(cx, a, r, f"{suffix}lhs_unsqueeze")
    b = unsqueeze_front(cx, b, r, f"{suffix}rhs_unsqueeze")
    batch = tuple(range(r - 2))
    return dot(cx, a, b, (r - 1,), (r - 2,), batch, batch, **kw)


@pure
def _matmul(cx: NodeCx) -> None:
    a, b = cx.input(0), cx.input(1)
    if a is None or b is None:
        raise cx.error("MatMul needs two inputs")
    matmul(cx, a, b)


def zero_points(cx: NodeCx, lhs_index: int | None, rhs_index: int | None) -> ZeroPoints:
    """The zero points at inputs ``lhs_index`` and ``rhs_index`` (those given), as operands of the
    contraction itself: read, never subtracted from a whole operand (module docstring)."""
    slots = ((lhs_index, "lhs"), (rhs_index, "rhs"))
    found = [(v, side) for v, side in ((cx.input(i) if i is not None else None, s) for i, s in slots) if v is not None]
    return tuple(v for v, _ in found), tuple(side for _, side in found)


def int32_matmul(cx: NodeCx, a: Value, b: Value, zps: ZeroPoints, suffix: str = "int") -> Value:
    """An integer matmul accumulating in int32 (the node's own output type), its zero points read
    by the contraction: the first step of every ONNX quantized matmul."""
    out = cx.out_types()[0]
    return matmul(cx, a, b, types=[TensorType(DType.INT32, out.shape)], bind=False, suffix=suffix,
                  zero_points=zps).outputs[0]


@pure
def _matmul_integer(cx: NodeCx) -> None:
    a, b = cx.input(0), cx.input(1)
    assert a is not None and b is not None
    matmul(cx, a, b, zero_points=zero_points(cx, 2, 3))


@pure
def _qlinear_matmul(cx: NodeCx) -> None:
    """QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp): an int32 matmul, requantized."""
    a, b = cx.input(0), cx.input(3)
    assert a is not None and b is not None
    acc = int32_matmul(cx, a, b, zero_points(cx, 2, 5), "int32")
    cx.emit(Op.QUANTIZE, [acc, *cx.inputs(1, 4, 6, 7)], {"role": "requantize"})


@pure
def _gemm(cx: NodeCx) -> None:
    a, b, c = cx.input(0), cx.input(1), cx.input(2)
    assert a is not None and b is not None
    if a.type.rank != 2 or b.type.rank != 2:
        raise cx.error(f"Gemm needs 2-D operands, got ranks {a.type.rank} and {b.type.rank}")
    ta, tb = int(cx.attr("transA", 0)), int(cx.attr("transB", 0))
    alpha, beta = float(cx.attr("alpha", 1.0)), float(cx.attr("beta", 1.0))
    out = cx.out_types()
    last = c is None and alpha == 1.0
    # ONNX tensors are dense row-major, so the flags state the storage: A [M, K] is K-major, its
    # transA=1 form [K, M] M-major; B [K, N] is N-major, its transB=1 form [N, K] K-major
    major = ("mn" if ta else "k", "k" if tb else "mn")
    y = dot(cx, a, b, (0,) if ta else (1,), (1,) if tb else (0,), types=out, bind=last,
            extra={"transA": bool(ta), "transB": bool(tb), OPERAND_MAJOR: major}).outputs[0]
    if alpha != 1.0:
        y = cx.emit(Op.MUL, [y], {"scalar": alpha, "role": "alpha"}, types=out, bind=c is None,
                    suffix="alpha").outputs[0]
    if c is not None:
        if beta != 1.0:
            c = cx.emit(Op.MUL, [c], {"scalar": beta, "role": "beta"}, types=[c.type], bind=False,
                        suffix="beta").outputs[0]
        cx.emit(Op.ADD, [y, c], {"role": "bias"}, suffix="bias")


# -- einsum -----------------------------------------------------------------------------------

@pure
def _einsum(cx: NodeCx) -> None:
    """Any einsum as pairwise dot_generals (left to right), summing out letters no one needs."""
    equation = str(cx.attr("equation", "")).replace(" ", "")
    operands = cx.inputs()
    lhs, _, out_spec = equation.partition("->")
    specs = lhs.split(",")
    if len(specs) != len(operands) or not operands:
        raise cx.error(f"einsum equation {equation!r} names {len(specs)} operands, got {len(operands)}")
    specs = [_expand_ellipsis(s, v.type.rank, cx) for s, v in zip(specs, operands)]
    ell = max((sum(1 for c in s if c in _ELL) for s in specs), default=0)
    if "->" in equation:
        out = _expand_ellipsis(out_spec, None, cx, ell)
    else:
        counts: dict[str, int] = {}
        for s in specs:
            for ch in s:
                counts[ch] = counts.get(ch, 0) + 1
        out = "".join(sorted(c for c in counts if c in _ELL)) + \
            "".join(sorted(c for c, k in counts.items() if k == 1 and c not in _ELL))
    dims: dict[str, Any] = {}
    for s, v in zip(specs, operands):
        if len(s) != v.type.rank:
            raise cx.error(f"einsum operand {s!r} has rank {v.type.rank}")
        for ch, d in zip(s, v.type.shape):
            if ch not in dims or (isinstance(dims[ch], int) and dims[ch] == 1):
                dims[ch] = d
            elif not (isinstance(d, int) and d == 1) and dim_eq(dims[ch], d) is False:
                raise cx.error(f"einsum letter {ch!r} has sizes {dims[ch]} and {d}")
    dtype = cx.out_types()[0].dtype
    cur, spec = _dedupe(cx, operands[0], specs[0], dims, dtype, "op0")
    for k in range(1, len(operands)):
        nxt, nspec = _dedupe(cx, operands[k], specs[k], dims, dtype, f"op{k}")
        later = set(out).union(*specs[k + 1:]) if k + 1 < len(specs) else set(out)
        cur, spec = _sum_out(cx, cur, spec, later | set(nspec), dims, dtype, f"sum{k}a")
        nxt, nspec = _sum_out(cx, nxt, nspec, later | set(spec), dims, dtype, f"sum{k}b")
        batch = [c for c in spec if c in nspec and c in later]
        contract = [c for c in spec if c in nspec and c not in later]
        free_a = [c for c in spec if c not in nspec]
        free_b = [c for c in nspec if c not in spec]
        natural = "".join(batch + free_a + free_b)
        last = k == len(operands) - 1 and natural == out
        cur = dot(cx, cur, nxt, tuple(spec.index(c) for c in contract), tuple(nspec.index(c) for c in contract),
                  tuple(spec.index(c) for c in batch), tuple(nspec.index(c) for c in batch),
                  types=None if last else [cx.tensor(dtype, [dims[c] for c in natural])], bind=last,
                  suffix="" if last else f"dot{k}", extra={"equation": equation}).outputs[0]
        spec = natural
        if last:
            return
    cur, spec = _sum_out(cx, cur, spec, set(out), dims, dtype, "sum_out")
    if spec == out:
        cx.emit(Op.IDENTITY, [cur])
    elif sorted(spec) == sorted(out):
        cx.emit(Op.PERMUTE, [cur], {"perm": tuple(spec.index(c) for c in out)})
    else:
        raise cx.error(f"einsum output {out!r} cannot be formed from {spec!r}")


#: Letters standing for the dims an ellipsis covers (right-aligned, as numpy broadcasts them).
_ELL = "".join(chr(0x100 + i) for i in range(64))


def _expand_ellipsis(spec: str, rank: int | None, cx: NodeCx, ell: int = 0) -> str:
    if "..." not in spec:
        return spec
    head, tail = spec.split("...")
    n = (rank - len(head) - len(tail)) if rank is not None else ell
    if n < 0:
        raise cx.error(f"einsum term {spec!r} does not fit rank {rank}")
    return head + (_ELL[len(_ELL) - n:] if n else "") + tail


def _dedupe(cx: NodeCx, v: Value, spec: str, dims: dict[str, Any], dtype: DType, suffix: str) -> tuple[Value, str]:
    """A repeated letter in one term (a diagonal, ``ii->i``) becomes a gather of the diagonal."""
    if len(set(spec)) == len(spec):
        return v, spec
    uniq = "".join(dict.fromkeys(spec))
    out = cx.emit(Op.GATHER, [v], {"diagonal": True}, types=[cx.tensor(v.type.dtype, [dims[c] for c in uniq])],
                  bind=False, suffix=f"{suffix}_diag").outputs[0]
    return out, uniq


def _sum_out(cx: NodeCx, v: Value, spec: str, keep: set[str], dims: dict[str, Any], dtype: DType,
             suffix: str) -> tuple[Value, str]:
    drop = [i for i, c in enumerate(spec) if c not in keep]
    if not drop:
        return v, spec
    rest = "".join(c for i, c in enumerate(spec) if i not in drop)
    out = cx.emit(Op.REDUCE_SUM, [v], {"axes": tuple(drop), "keepdims": False},
                  types=[cx.tensor(v.type.dtype, [dims[c] for c in rest])], bind=False, suffix=suffix).outputs[0]
    return out, rest


# -- convolution ------------------------------------------------------------------------------

def conv_attrs(cx: NodeCx, x: Value, w: Value, transposed: bool) -> dict[str, Any]:
    """The IR's conv attributes (symmetric pads as one value per dim, as torch states them), checked
    before the shape rules read them. A ConvTranspose's ``output_shape`` is kept: its pads are derived
    from it, so it is the output's size."""
    n_sp = max(w.type.rank - 2, 1)
    window = window_attrs(cx, n_sp, w.type.shape[2:])
    pads = window.pop("padding")
    attrs: dict[str, Any] = {"stride": window.pop("stride"),
                             "padding": pads[:n_sp] if pads[:n_sp] == pads[n_sp:] else pads,
                             "dilation": window.pop("dilation"), "groups": int(cx.attr("group", 1)),
                             "transposed": transposed, **window}
    if transposed:
        attrs["output_padding"] = tuple(int(p) for p in cx.attr("output_padding", [0] * n_sp))
        if cx.attr("output_shape") is not None:
            attrs["output_shape"] = tuple(int(d) for d in cx.attr("output_shape"))
    return check_window_attrs(cx, attrs, n_sp, conv=True)


def _check_channels(cx: NodeCx, channels: object, w_shape: tuple[object, ...], groups: int, transposed: bool) -> None:
    """The input's channels must be what the weight expects (W is M x C/group x k... for Conv, C x
    M/group x k... for ConvTranspose): a mismatch is a broken model, not something to cost from
    the weight's shape."""
    expected = w_shape[0] if transposed else (w_shape[1] * groups if isinstance(w_shape[1], int) else None)
    if isinstance(channels, int) and isinstance(expected, int) and channels != expected:
        what = f"weight {list(map(str, w_shape))}" + ("" if transposed else f" with group={groups}")
        raise cx.error(f"convolution input has {channels} channels but its {what} expects {expected}")


def _conv(transposed: bool = False, x_i: int = 0, w_i: int = 1, b_i: int | None = 2,
          zp: tuple[int, int] | None = None, requant: tuple[int, ...] | None = None) -> Callable[[NodeCx], None]:
    def fn(cx: NodeCx) -> None:
        x, w = cx.input(x_i), cx.input(w_i)
        if x is None or w is None:
            raise cx.error("convolution needs an input and a weight")
        if x.type.rank < 3 or w.type.rank != x.type.rank:
            raise cx.error(f"convolution input rank {x.type.rank} and weight rank {w.type.rank} do not fit")
        attrs = conv_attrs(cx, x, w, transposed)
        _check_channels(cx, x.type.shape[1], w.type.shape, attrs["groups"], transposed)
        zps, sides = zero_points(cx, *zp) if zp is not None else ((), ())
        if zps:
            attrs["zero_points"] = sides
        out = cx.out_types()
        bias = cx.input(b_i) if b_i is not None else None
        acc_types = [TensorType(DType.INT32, out[0].shape)] if requant is not None else out
        last = bias is None and requant is None
        y = cx.emit(Op.CONV, [x, w, *zps], attrs, types=acc_types, bind=last).outputs[0]
        if bias is not None:
            y = cx.emit(Op.ADD, [y, bias], {"role": "bias", "axis": 1}, types=acc_types, bind=requant is None,
                        suffix="bias").outputs[0]
        if requant is not None:
            cx.emit(Op.QUANTIZE, [y, *cx.inputs(*requant)], {"role": "requantize"})
    return pure(fn)


@pure
def _deform_conv(cx: NodeCx) -> None:
    """DeformConv: the convolution's FLOPs, plus a bilinear sample per kernel tap (a resize)."""
    x, w, offset = cx.input(0), cx.input(1), cx.input(2)
    assert x is not None and w is not None and offset is not None
    attrs = conv_attrs(cx, x, w, False)
    out = cx.out_types()
    sampled = cx.emit(Op.RESIZE, [x, offset], {"mode": "linear", "spatial_dims": x.type.rank - 2, "role": "deform"},
                      types=[offset.type], bind=False, suffix="sample").outputs[0]
    bias = cx.input(3)
    y = cx.emit(Op.CONV, [x, w, sampled], attrs, types=out, bind=bias is None).outputs[0]
    if bias is not None:
        cx.emit(Op.ADD, [y, bias], {"role": "bias", "axis": 1}, suffix="bias")


CONTRACTION_LOWERINGS: dict[str, Callable[[NodeCx], None]] = {
    "MatMul": _matmul, "MatMulInteger": _matmul_integer, "QLinearMatMul": _qlinear_matmul, "Gemm": _gemm,
    "Einsum": _einsum, "Conv": _conv(), "ConvTranspose": _conv(True),
    "ConvInteger": _conv(zp=(2, 3), b_i=None),
    "QLinearConv": _conv(x_i=0, w_i=3, b_i=8, zp=(2, 5), requant=(6, 7)), "DeformConv": _deform_conv,
}
