"""Lowerings of the aten matrix ops (mm, bmm, matmul, linear, einsum, ...) and convolutions.

Every one becomes a single :attr:`Op.DOT` (dot_general) or :attr:`Op.CONV`; biases become a
separate elementwise add so the contraction's FLOPs match ``torch.utils.flop_counter`` exactly.
"""

from __future__ import annotations

from typing import Any

import torch.fx as fx

from ...ir import OPERAND_MAJOR, STRIDED_VIEW, Op, TensorType, Value
from ..moe_routing import routed_top_k
from .aten_args import arg, ints, rank_of
from .blas_layout import matmul_majors, stored_major
from .lowering import AtenLowerer

__all__ = ["CONTRACTION_LOWERINGS"]


def _dot(cx: AtenLowerer, n: fx.Node, lhs: Value, rhs: Value, lc: tuple[int, ...], rc: tuple[int, ...],
         lb: tuple[int, ...] = (), rb: tuple[int, ...] = (), bias: Value | None = None,
         types: list[TensorType] | None = None, extra: dict[str, Any] | None = None,
         major: tuple[str | None, str | None] = (None, None)) -> None:
    """One DOT; ``major``: how the BLAS call reads each operand (:mod:`.blas_layout`), stated as
    ``operand_major`` when both are known."""
    attrs = {"lhs_contract": lc, "rhs_contract": rc, "lhs_batch": lb, "rhs_batch": rb, **(extra or {})}
    if major[0] is not None and major[1] is not None:
        attrs[OPERAND_MAJOR] = major
    out_types = types or cx.out_types(n)
    dot = cx.emit(Op.DOT, [lhs, rhs], n, attrs, types=out_types[:1], bind=bias is None)
    if bias is not None:
        cx.emit(Op.ADD, [dot.outputs[0], bias], n, {"role": "bias"}, name=f"{n.name}_bias")


def _stored(a: Any, b: Any, batched: bool = False) -> tuple[str | None, str | None]:
    """mm/bmm operands ``[(B,) M, K]`` and ``[(B,) K, N]``, read in place."""
    pre = ["b"] if batched else []
    return stored_major(a, [*pre, "mn", "k"]), stored_major(b, [*pre, "k", "mn"])


def _linear(cx: AtenLowerer, n: fx.Node) -> None:
    """``x @ w.T + b``: the weight ``[N, K]`` is read in place (K-major), as eager torch's BLAS call
    does (aten's linear is ``addmm(b, x, w.t())`` or ``matmul(x, w.t())``)."""
    x, w, b = cx.value(n.args[0]), cx.value(n.args[1]), cx.value(arg(n, 2, "bias"))
    assert x is not None and w is not None
    rc = (1,) if w.type.rank == 2 else (0,)
    _dot(cx, n, x, w, (x.type.rank - 1,), rc, bias=b, major=matmul_majors(n, linear=True))


def _mm(cx: AtenLowerer, n: fx.Node) -> None:
    a, b = cx.value(n.args[0]), cx.value(n.args[1])
    assert a is not None and b is not None
    _dot(cx, n, a, b, (1,), (0,), major=_stored(n.args[0], n.args[1]))


def _addmm(cx: AtenLowerer, n: fx.Node) -> None:
    bias, a, b = (cx.value(x) for x in n.args[:3])
    assert a is not None and b is not None
    _dot(cx, n, a, b, (a.type.rank - 1,), (0,), bias=bias, major=_stored(n.args[1], n.args[2]))


def _bmm(cx: AtenLowerer, n: fx.Node) -> None:
    a, b = cx.value(n.args[0]), cx.value(n.args[1])
    assert a is not None and b is not None
    _dot(cx, n, a, b, (2,), (1,), (0,), (0,), major=_stored(n.args[0], n.args[1], batched=True))


def _baddbmm(cx: AtenLowerer, n: fx.Node) -> None:
    bias, a, b = (cx.value(x) for x in n.args[:3])
    assert a is not None and b is not None
    _dot(cx, n, a, b, (2,), (1,), (0,), (0,), bias=bias, major=_stored(n.args[1], n.args[2], batched=True))


def _mv(cx: AtenLowerer, n: fx.Node) -> None:
    a, b = cx.value(n.args[0]), cx.value(n.args[1])
    assert a is not None and b is not None
    _dot(cx, n, a, b, (1,), (0,))


def _addmv(cx: AtenLowerer, n: fx.Node) -> None:
    bias, a, b = (cx.value(x) for x in n.args[:3])
    assert a is not None and b is not None
    _dot(cx, n, a, b, (1,), (0,), bias=bias)


def _vdot(cx: AtenLowerer, n: fx.Node) -> None:
    a, b = cx.value(n.args[0]), cx.value(n.args[1])
    assert a is not None and b is not None
    _dot(cx, n, a, b, (0,), (0,))


def _addbmm(cx: AtenLowerer, n: fx.Node) -> None:
    """``c + sum_b a[b] @ b[b]``: one dot contracting the batch with K (2 B M N K FLOPs), then the add."""
    bias, a, b = (cx.value(x) for x in n.args[:3])
    assert a is not None and b is not None
    _dot(cx, n, a, b, (0, 2), (0, 1), bias=bias)


def _addr(cx: AtenLowerer, n: fx.Node) -> None:
    """``c + outer(u, v)``: the outer product is a broadcast multiply (as ``outer`` lowers), then the add."""
    c, u, v = (cx.value(x) for x in n.args[:3])
    assert c is not None and u is not None and v is not None
    column = cx.emit(Op.RESHAPE, [u], n, types=[u.type.with_shape((*u.type.shape, 1))], bind=False,
                     name=f"{n.name}_column").outputs[0]
    out_t = cx.out_types(n)
    outer = cx.emit(Op.MUL, [column, v], n, types=out_t, bind=False, name=f"{n.name}_outer").outputs[0]
    cx.emit(Op.ADD, [c, outer], n)


def _bilinear(cx: AtenLowerer, n: fx.Node) -> None:
    """``y[..., o] = x1[..., i] W[o, i, j] x2[..., j] + b[o]`` as torch's ``_trilinear`` runs it: ``x1 W``
    (2 R O I1 I2 FLOPs over the R leading rows), then that times ``x2`` row by row (2 R O I2)."""
    x1, x2, w, b = cx.value(n.args[0]), cx.value(n.args[1]), cx.value(n.args[2]), cx.value(arg(n, 3, "bias"))
    assert x1 is not None and x2 is not None and w is not None
    r = x1.type.rank - 1
    lead = tuple(x1.type.shape[:-1])
    mid = cx.out_types(n)[0].with_shape((*lead, *w.type.shape[0:1], *w.type.shape[2:]))
    left = cx.emit(Op.DOT, [x1, w], n, {"lhs_contract": (r,), "rhs_contract": (1,), "lhs_batch": (), "rhs_batch": ()},
                   types=[mid], bind=False, name=f"{n.name}_left").outputs[0]
    rows = tuple(range(r))
    _dot(cx, n, left, x2, (r + 1,), (r,), rows, rows, bias=b)


def _tensordot(cx: AtenLowerer, n: fx.Node) -> None:
    """``tensordot(a, b, dims_a, dims_b)``: one dot_general, whose output (a's free dims, then b's) is
    tensordot's; torch runs it as a reshape and an mm of the same FLOPs."""
    a, b = cx.value(n.args[0]), cx.value(n.args[1])
    assert a is not None and b is not None
    lc = tuple(d % a.type.rank for d in arg(n, 2, "dims_self"))
    rc = tuple(d % b.type.rank for d in arg(n, 3, "dims_other"))
    _dot(cx, n, a, b, lc, rc)


def _matmul(cx: AtenLowerer, n: fx.Node) -> None:
    """torch.matmul semantics: 1-D operands, 2-D folding and broadcast batch dims."""
    a, b = cx.value(n.args[0]), cx.value(n.args[1])
    assert a is not None and b is not None
    ra, rb = a.type.rank, b.type.rank
    if ra == 1 and rb == 1:
        return _dot(cx, n, a, b, (0,), (0,))
    if rb == 1:
        return _dot(cx, n, a, b, (ra - 1,), (0,))
    if ra == 1:
        return _dot(cx, n, a, b, (0,), (rb - 2,))
    if rb == 2:
        return _dot(cx, n, a, b, (ra - 1,), (0,), major=matmul_majors(n))
    # Both have matrix dims and at least one has batch dims: align ranks with free unsqueezes.
    r = max(ra, rb)
    a = _unsqueeze_front(cx, n, a, r)
    b = _unsqueeze_front(cx, n, b, r)
    batch = tuple(range(r - 2))
    _dot(cx, n, a, b, (r - 1,), (r - 2,), batch, batch, major=matmul_majors(n))


def _unsqueeze_front(cx: AtenLowerer, n: fx.Node, v: Value, rank: int) -> Value:
    if v.type.rank == rank:
        return v
    t = v.type.with_shape((1,) * (rank - v.type.rank) + tuple(v.type.shape))
    return cx.emit(Op.RESHAPE, [v], n, types=[t], bind=False, name=f"{n.name}_unsqueeze").outputs[0]


def _einsum(cx: AtenLowerer, n: fx.Node) -> None:
    """einsum as dot_generals, one per pair of operands, in the order torch contracts them: the
    ``path`` torch's Python einsum computed with opt_einsum (flattened pairs of positions in the
    operand list, each result appended at its end) when the call carries one, else left to right.
    A letter no later operand or the output reads is summed out at the first pair that can (letters
    in one operand only before that), as torch's ``sumproduct_pair`` does; the last pair's output is
    permuted to the equation's order when it differs."""
    equation = str(n.args[0]).replace(" ", "")
    operands = [cx.value(x) for x in arg(n, 1, "tensors")]
    lhs_spec, out_spec = equation.split("->") if "->" in equation else (equation, None)
    specs = lhs_spec.split(",")
    path = arg(n, 2, "path")
    if len(operands) < 2 or len(specs) != len(operands) or "." in equation or any(v is None for v in operands):
        cx.emit(Op.UNKNOWN, [v for v in operands if v is not None], n,
                {"source_op": "aten.einsum", "equation": equation})
        return
    if out_spec is None:
        out_spec = "".join(sorted(c for c in set(lhs_spec) - {","} if lhs_spec.count(c) == 1))
    pairs = [tuple(path[k:k + 2]) for k in range(0, len(path), 2)] if path else [(0, 1)] * (len(operands) - 1)
    live: list[tuple[Value, str]] = [(v, sp) for v, sp in zip(operands, specs) if v is not None]
    out_t = cx.out_types(n)[0]
    for step, pair in enumerate(pairs):
        i, j = sorted(int(k) for k in pair)
        (b, sb), (a, sa) = live.pop(j), live.pop(i)
        last = step == len(pairs) - 1
        keep = out_spec + "".join(sp for _, sp in live)
        result = _einsum_pair(cx, n, a, sa, b, sb, keep, out_spec if last else None, out_t, equation, step)
        live.insert(len(live) if path else 0, result)   # opt_einsum's paths append; left to right goes on


def _einsum_pair(cx: AtenLowerer, n: fx.Node, a: Value, sa: str, b: Value, sb: str, keep: str,
                 out_spec: str | None, out_t: TensorType, equation: str, step: int) -> tuple[Value, str]:
    """One dot_general of an einsum: letters in both operands that ``keep`` reads are batch dims,
    the others contracted. ``out_spec``: this is the last pair, bound to the fx node in that order."""
    a, sa = _sum_out(cx, n, a, sa, sb + keep)
    b, sb = _sum_out(cx, n, b, sb, sa + keep)
    batch = [c for c in sa if c in sb and c in keep]
    contract = [c for c in sa if c in sb and c not in keep]
    natural = "".join(batch + [c for c in sa if c not in sb] + [c for c in sb if c not in sa])
    attrs = {"lhs_contract": tuple(sa.index(c) for c in contract), "rhs_contract": tuple(sb.index(c) for c in contract),
             "lhs_batch": tuple(sa.index(c) for c in batch), "rhs_batch": tuple(sb.index(c) for c in batch),
             "equation": equation}
    name = n.name if step == 0 else f"{n.name}_{step}"
    dims = {c: d for c, d in zip(sa, a.type.shape)} | {c: d for c, d in zip(sb, b.type.shape)}
    mid = out_t.with_shape(tuple(dims[c] for c in natural))
    bind = out_spec is not None and natural == out_spec
    if not contract:   # nothing summed: torch's sumproduct_pair multiplies the broadcast operands
        operands = [_aligned(cx, n, v, sp, natural, dims) for v, sp in ((a, sa), (b, sb))]
        dot = cx.emit(Op.MUL, operands, n, {"equation": equation}, types=[mid], bind=bind, name=name)
    else:
        dot = cx.emit(Op.DOT, [a, b], n, attrs, types=[mid], bind=bind, name=name)
    if bind:
        return dot.outputs[0], natural
    if out_spec is None:
        return dot.outputs[0], natural
    return cx.emit(Op.PERMUTE, dot.outputs, n, {"perm": tuple(natural.index(c) for c in out_spec)},
                   name=f"{n.name}_permute").outputs[0], out_spec


def _aligned(cx: AtenLowerer, n: fx.Node, v: Value, spec: str, natural: str, dims: dict[str, Any]) -> Value:
    """``v`` (letters ``spec``) laid out for a broadcast against ``natural``: its letters in that order
    (a strided view, as torch permutes) and a size-1 dim for each letter it lacks (a free view)."""
    order = "".join(c for c in natural if c in spec)
    if order != spec:
        perm = tuple(spec.index(c) for c in order)
        v = cx.emit(Op.PERMUTE, [v], n, {"perm": perm, STRIDED_VIEW: True}, bind=False, name=f"{n.name}_align",
                    types=[v.type.with_shape(tuple(dims[c] for c in order))]).outputs[0]
    shape = tuple(dims[c] if c in order else 1 for c in natural)
    if tuple(v.type.shape) == shape:
        return v
    return cx.emit(Op.RESHAPE, [v], n, types=[v.type.with_shape(shape)], bind=False, name=f"{n.name}_align").outputs[0]


def _sum_out(cx: AtenLowerer, n: fx.Node, v: Value, spec: str, others: str) -> tuple[Value, str]:
    drop = [i for i, c in enumerate(spec) if c not in others]
    if not drop:
        return v, spec
    keep = tuple(d for i, d in enumerate(v.type.shape) if i not in drop)
    out = cx.emit(Op.REDUCE_SUM, [v], n, {"axes": tuple(drop), "keepdims": False},
                  types=[v.type.with_shape(keep)], bind=False, name=f"{n.name}_sum").outputs[0]
    return out, "".join(c for i, c in enumerate(spec) if i not in drop)


def _scaled_mm(cx: AtenLowerer, n: fx.Node) -> None:
    a, b = cx.value(n.args[0]), cx.value(n.args[1])
    bias = cx.value(arg(n, 4, "bias"))
    assert a is not None and b is not None
    _dot(cx, n, a, b, (1,), (0,), bias=bias, extra={"scaled": True})


# -- grouped GEMM (mixture-of-experts experts) --------------------------------------------------

def _grouped_mm(cx: AtenLowerer, n: fx.Node) -> None:
    """``_grouped_mm(x [S, K], w [G, K, N], offs [G])`` (and transformers' ``grouped_mm_fallback``, the
    same contract): a :attr:`Op.GROUPED_DOT`. Hugging Face passes ``w.transpose(-2, -1)`` of the stored
    ``[G, N, K]`` experts; a kernel reads that strided, so the transpose is looked through
    (``rhs_contract=2``) rather than counted as a copy of every expert. ``x [G, M, K]`` by ``w [G, K, N]``
    without offsets is a plain batched matmul; the other modes (grouped K, for weight gradients) are
    left unmodeled, by name."""
    x, w = cx.value(n.args[0]), cx.value(n.args[1])
    offs, bias = cx.value(arg(n, 2, "offs")), cx.value(arg(n, 3, "bias"))
    assert x is not None and w is not None
    if x.type.rank == 3 and w.type.rank == 3 and offs is None:
        return _dot(cx, n, x, w, (2,), (1,), (0,), (0,), bias=bias)
    if x.type.rank != 2 or w.type.rank != 3 or offs is None:
        cx.emit(Op.UNKNOWN, [v for v in (x, w, offs, bias) if v is not None], n,
                {"source_op": f"{n.target} (ranks {x.type.rank}x{w.type.rank}, grouped along K)"})
        return
    w, rc = _stored_experts(cx, n.args[1], w)
    attrs = {"rhs_contract": rc}
    top_k = routed_top_k(offs, w.type.shape[0])
    if top_k is not None:
        attrs["top_k"] = top_k
    out = cx.emit(Op.GROUPED_DOT, [x, w, offs], n, attrs, types=cx.out_types(n)[:1], bind=bias is None)
    if bias is not None:   # [G, N]: each row adds its group's row, read by position
        cx.emit(Op.ADD, [out.outputs[0], bias], n, {"role": "bias", "lookup_operands": 1}, name=f"{n.name}_bias")


def _stored_experts(cx: AtenLowerer, arg_node: object, w: Value) -> tuple[Value, int]:
    """The experts as stored and their contracting dim: through a transpose of the last two dims that
    only this matmul reads (the transpose node is dropped), else ``w`` with ``rhs_contract=1``."""
    p = w.producer
    if (p is None or p.op is not Op.PERMUTE or tuple(p.attrs.get("perm", ())) != (0, 2, 1)
            or not isinstance(arg_node, fx.Node) or len(arg_node.users) != 1 or len(w.uses) != 0):
        return w, 1
    stored = p.inputs[0]
    if stored is None:
        return w, 1
    cx.graph.remove(p)
    cx.env[arg_node] = None
    return stored, 2


def _histc(cx: AtenLowerer, n: fx.Node) -> None:
    """A histogram is a scatter-add of ones into the bins: reads the input, one add per element."""
    cx.emit(Op.SCATTER_ELEMENTS, [cx.value(n.args[0])], n, {"reduce": "add", "role": "histogram"})


# -- convolution ----------------------------------------------------------------------------------

def _conv(cx: AtenLowerer, n: fx.Node, x: Any, w: Any, b: Any, stride: Any, padding: Any,
          dilation: Any, transposed: bool, output_padding: Any, groups: Any) -> None:
    xv, wv, bv = cx.value(x), cx.value(w), cx.value(b)
    assert xv is not None and wv is not None
    spatial = max(rank_of(w) - 2, 1)   # the weight's kernel dims (an unbatched input has rank spatial + 1)
    attrs = {"stride": ints(stride, spatial) or (1,) * spatial,
             "padding": padding if isinstance(padding, str) else (ints(padding, spatial) or (0,) * spatial),
             "dilation": ints(dilation, spatial) or (1,) * spatial, "groups": int(groups or 1),
             "transposed": bool(transposed), "output_padding": ints(output_padding, spatial) or (0,) * spatial}
    out_t = cx.out_types(n)[:1]
    unbatched = xv.type.rank == spatial + 1   # torch accepts [C, *spatial]: run as a batch of one
    if unbatched:
        xv = _unsqueeze_front(cx, n, xv, spatial + 2)
        out_t = [out_t[0].with_shape((1, *out_t[0].shape))]
    conv = cx.emit(Op.CONV, [xv, wv], n, attrs, types=out_t, bind=bv is None and not unbatched)
    y = conv.outputs[0]
    if bv is not None:
        y = cx.emit(Op.ADD, [y, bv], n, {"role": "bias", "axis": 1}, types=out_t, bind=not unbatched,
                    name=f"{n.name}_bias").outputs[0]
    if unbatched:   # and the batch of one squeezed away again (a free view)
        cx.emit(Op.RESHAPE, [y], n, name=f"{n.name}_squeeze")


def _convolution(cx: AtenLowerer, n: fx.Node) -> None:
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = n.args[:9]
    _conv(cx, n, x, w, b, stride, padding, dilation, bool(transposed), output_padding, groups)


def _convnd(cx: AtenLowerer, n: fx.Node) -> None:
    _conv(cx, n, n.args[0], n.args[1], arg(n, 2, "bias"), arg(n, 3, "stride", 1), arg(n, 4, "padding", 0),
          arg(n, 5, "dilation", 1), False, 0, arg(n, 6, "groups", 1))


def _conv_transpose(cx: AtenLowerer, n: fx.Node) -> None:
    _conv(cx, n, n.args[0], n.args[1], arg(n, 2, "bias"), arg(n, 3, "stride", 1), arg(n, 4, "padding", 0),
          arg(n, 7, "dilation", 1), True, arg(n, 5, "output_padding", 0), arg(n, 6, "groups", 1))


def _convolution_backward(cx: AtenLowerer, n: fx.Node) -> None:
    """grad_input as the opposite-direction conv, grad_weight as a correlation of input and grad."""
    grad_out, x, w = (cx.value(v) for v in n.args[:3])
    assert grad_out is not None and x is not None and w is not None
    transposed = bool(n.args[6])
    mask = list(arg(n, 10, "output_mask")) if len(n.args) > 10 else [True, True, True]
    base = {"stride": ints(n.args[3]), "padding": ints(n.args[4]), "dilation": ints(n.args[5]),
            "groups": int(arg(n, 9, "groups")), "output_padding": ints(n.args[7])}
    val: Any = n.meta.get("val")
    outs: list[Value | None] = [None, None, None]
    if mask[0] and val[0] is not None:
        outs[0] = cx.emit(Op.CONV, [grad_out, w], n, {**base, "transposed": not transposed, "role": "grad_input"},
                          types=[cx.type_of(val[0])], bind=False, name=f"{n.name}_grad_input").outputs[0]
    if mask[1] and val[1] is not None:
        outs[1] = cx.emit(Op.CONV, [x, grad_out], n, {**base, "transposed": transposed, "role": "grad_weight"},
                          types=[cx.type_of(val[1])], bind=False, name=f"{n.name}_grad_weight").outputs[0]
    if len(mask) > 2 and mask[2] and val[2] is not None:
        outs[2] = cx.emit(Op.REDUCE_SUM, [grad_out], n, {"axes": (0, *range(2, grad_out.type.rank))},
                          types=[cx.type_of(val[2])], bind=False, name=f"{n.name}_grad_bias").outputs[0]
    cx.env[n] = outs


CONTRACTION_LOWERINGS = {
    "linear": _linear, "mm": _mm, "addmm": _addmm, "bmm": _bmm, "baddbmm": _baddbmm, "mv": _mv,
    "addmv": _addmv, "addbmm": _addbmm, "addr": _addr, "bilinear": _bilinear, "tensordot": _tensordot,
    "dot": _vdot, "vdot": _vdot, "inner": _vdot, "matmul": _matmul, "einsum": _einsum,
    "_scaled_mm": _scaled_mm, "_grouped_mm": _grouped_mm, "transformers::grouped_mm_fallback": _grouped_mm,
    "histc": _histc, "convolution": _convolution, "_convolution": _convolution,
    "conv1d": _convnd, "conv2d": _convnd, "conv3d": _convnd, "conv1d.padding": _convnd,
    "conv2d.padding": _convnd, "conv3d.padding": _convnd, "conv_transpose1d": _conv_transpose,
    "conv_transpose2d.input": _conv_transpose, "conv_transpose3d.input": _conv_transpose,
    "conv_transpose2d": _conv_transpose, "conv_transpose3d": _conv_transpose,
    "convolution_backward": _convolution_backward,
}
