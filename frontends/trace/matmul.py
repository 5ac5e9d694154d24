"""Lowering recorded contractions, convolutions and attention: the ops that run on matrix units.

Each builder infers the output shape from the recorded operands and scalar arguments (shape
arithmetic, never cost formulas) and emits the canonical op the torch frontend would
(``frontends/aten_*.py``): ``aten::linear`` is a ``dot`` plus its bias ``add``, ``aten::conv2d`` one
``conv``, SDPA one ``attention``. A builder returns None when the recorded shapes do not fit.
"""

from __future__ import annotations

from ...ir import DType, Graph, Op, TensorType
from ...ir.windows import conv_spatial
from .call import (
    Builder,
    Call,
    GraphBuilder,
    ImpossibleCall,
    bool_arg,
    bool_mask,
    broadcast,
    dtype_code,
    int_arg,
    per_dim,
    registrar,
)
from .read import TensorArg

__all__ = ["BUILDERS"]

#: aten name -> builder, for contractions, convolutions and attention.
BUILDERS: dict[str, Builder] = {}
_register = registrar(BUILDERS)


# -- contractions -------------------------------------------------------------------------------

def _dot(c: Call, lhs: TensorArg | None, rhs: TensorArg | None, lc: tuple[int, ...], rc: tuple[int, ...],
         lb: tuple[int, ...] = (), rb: tuple[int, ...] = (), bias: TensorArg | None = None,
         out_dtype: DType | None = None, at: tuple[int, int] = (0, 1)) -> Graph | None:
    """``at``: the call's input positions of ``lhs`` and ``rhs``, for the error that names them."""
    if lhs is None or rhs is None:
        return None
    ls, rs = lhs.shape, rhs.shape
    if any(d >= len(ls) for d in lc + lb) or any(d >= len(rs) for d in rc + rb):
        return None
    left, right = [ls[d] for d in lc], [rs[d] for d in rc]
    if left != right:
        raise ImpossibleCall(f"inputs {at[0]} {list(ls)} and {at[1]} {list(rs)} disagree on the contracted dim "
                             f"({', '.join(map(str, left))} vs {', '.join(map(str, right))}): no such call runs "
                             "(torch raises before any kernel)")
    batch = broadcast([tuple(ls[d] for d in lb), tuple(rs[d] for d in rb)])
    if batch is None:
        return None
    out = (*batch, *(d for i, d in enumerate(ls) if i not in lc + lb),
           *(d for i, d in enumerate(rs) if i not in rc + rb))
    b = GraphBuilder(c)
    dtype = out_dtype or lhs.dtype or c.default_dtype
    y = b.node(Op.DOT, [b.input(lhs), b.input(rhs)], out, dtype,
               {"lhs_contract": lc, "rhs_contract": rc, "lhs_batch": lb, "rhs_batch": rb})
    if bias is not None:
        y = b.node(Op.ADD, [y, b.input(bias)], out, dtype, {"role": "bias"})
    return b.done(y)


@_register("mm", "mv", "dot", "vdot", "inner")
def _mm(c: Call) -> Graph | None:
    a, b = c.t(0), c.t(1)
    return _dot(c, a, b, (len(a.shape) - 1,), (0,)) if a and b and a.shape else None


@_register("addmm", "addmv")
def _addmm(c: Call) -> Graph | None:
    a = c.t(1)
    return _dot(c, a, c.t(2), (len(a.shape) - 1,), (0,), bias=c.t(0), at=(1, 2)) if a and a.shape else None


@_register("bmm")
def _bmm(c: Call) -> Graph | None:
    return _dot(c, c.t(0), c.t(1), (2,), (1,), (0,), (0,))


@_register("baddbmm")
def _baddbmm(c: Call) -> Graph | None:
    return _dot(c, c.t(1), c.t(2), (2,), (1,), (0,), (0,), bias=c.t(0), at=(1, 2))


@_register("linear")
def _linear(c: Call) -> Graph | None:
    x, w = c.t(0), c.t(1)
    if x is None or w is None or not x.shape:
        return None
    return _dot(c, x, w, (len(x.shape) - 1,), (1,) if len(w.shape) == 2 else (0,), bias=c.t(2))


@_register("matmul")
def _matmul(c: Call) -> Graph | None:
    """torch.matmul: 1-D operands, 2-D folding, broadcast batch dims (as the frontend lowers it)."""
    a, b = c.t(0), c.t(1)
    if a is None or b is None or not a.shape or not b.shape:
        return None
    ra, rb = len(a.shape), len(b.shape)
    if rb == 1 or rb == 2 or ra == 1:
        return _dot(c, a, b, (ra - 1,) if ra > 1 or rb == 1 else (0,), (0,) if rb <= 2 else (rb - 2,))
    r = max(ra, rb)
    a = TensorArg((1,) * (r - ra) + a.shape, a.dtype)
    b = TensorArg((1,) * (r - rb) + b.shape, b.dtype)
    batch = tuple(range(r - 2))
    return _dot(c, a, b, (r - 1,), (r - 2,), batch, batch)


@_register("_int_mm")
def _int_mm(c: Call) -> Graph | None:
    """``_int_mm(int8 [M, K], int8 [K, N]) -> int32 [M, N]``: an int8 matmul accumulating in int32."""
    return _dot(c, c.t(0), c.t(1), (1,), (0,), out_dtype=DType.INT32)


@_register("_scaled_mm")
def _scaled_mm(c: Call) -> Graph | None:
    out = dtype_code(c.c(6), DType.BF16)
    return _dot(c, c.t(0), c.t(1), (1,), (0,), bias=c.t(4), out_dtype=out)


@_register("_grouped_mm", "grouped_mm_fallback")
def _grouped_mm(c: Call) -> Graph | None:
    """MoE experts: ``x [S, K]`` by ``w [G, K, N]`` grouped by ``offs`` (as the frontend lowers it);
    the 3-D by 3-D form without offsets is a batched matmul."""
    x, w, offs = c.t(0), c.t(1), c.t(2)
    if x is None or w is None or len(w.shape) != 3:
        return None
    if len(x.shape) == 3 and offs is None:
        return _dot(c, x, w, (2,), (1,), (0,), (0,))
    if len(x.shape) != 2 or offs is None or x.shape[1] != w.shape[1]:
        return None
    b = GraphBuilder(c)
    y = b.node(Op.GROUPED_DOT, [b.input(x), b.input(w), b.input(offs)], (x.shape[0], w.shape[2]),
               x.dtype or c.default_dtype, {"rhs_contract": 1})
    return b.done(y)


# -- convolution and attention ------------------------------------------------------------------

def _conv(c: Call, stride: str, padding: str, dilation: str, transposed: bool, out_pad: str,
          groups: str) -> Graph | None:
    x, w = c.t(0), c.t(1)
    if x is None or w is None or len(x.shape) < 3 or len(w.shape) != len(x.shape):
        return None
    n = len(x.shape) - 2
    s, dl, op_ = per_dim(stride, n, 1), per_dim(dilation, n, 1), per_dim(out_pad, n, 0)
    g = int_arg(groups, 1)
    k = w.shape[2:]
    mode = padding.strip().strip("'\"")
    if mode in ("same", "valid"):   # as pads: "same" pads d*(k-1) in all, the odd one at the end (as torch)
        total = [dd * (kk - 1) if mode == "same" else 0 for dd, kk in zip(dl, k)]
        begins, ends = tuple(t // 2 for t in total), tuple(t - t // 2 for t in total)
        p = begins if begins == ends else (*begins, *ends)
    else:
        p = per_dim(padding, n, 0)
    attrs = {"stride": s, "padding": p, "dilation": dl, "groups": g, "transposed": transposed, "output_padding": op_}
    if len(s) != n or len(dl) != n or len(op_) != n or len(p) not in (n, 2 * n):
        return None
    spatial = [d for d in conv_spatial(attrs, x.shape[2:], k) if isinstance(d, int) and d > 0]
    if len(spatial) != n:
        return None
    cout = w.shape[1] * g if transposed else w.shape[0]
    out = (x.shape[0], cout, *spatial)
    b = GraphBuilder(c)
    dtype = x.dtype or c.default_dtype
    y = b.node(Op.CONV, [b.input(x), b.input(w)], out, dtype, attrs)
    bias = c.t(2)
    if bias is not None:
        y = b.node(Op.ADD, [y, b.input(bias)], out, dtype, {"role": "bias", "axis": 1})
    return b.done(y)


@_register("convolution", "_convolution")
def _convolution(c: Call) -> Graph | None:
    return _conv(c, c.c(3), c.c(4), c.c(5), bool_arg(c.c(6)), c.c(7), c.c(8))


@_register("conv1d", "conv2d", "conv3d")
def _convnd(c: Call) -> Graph | None:
    return _conv(c, c.c(3), c.c(4), c.c(5), False, "", c.c(6))


@_register("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
def _conv_transpose(c: Call) -> Graph | None:
    return _conv(c, c.c(3), c.c(4), c.c(7), True, c.c(5), c.c(6))


@_register("convolution_backward")
def _convolution_backward(c: Call) -> Graph | None:
    """``convolution_backward(grad_out, input, weight, bias_sizes, stride, padding, dilation,
    transposed, output_padding, groups, output_mask)``: the gradients its mask asks for, in the forms
    the training pass gives them (:func:`narrowpipe.costmodel.training.grad_linear.conv_grad`): the
    input gradient as the convolution the other way over ``grad_out``, the weight gradient as the
    correlation of input and ``grad_out``, the bias gradient as ``grad_out`` summed over all but the
    channels."""
    dy, x, w = c.t(0), c.t(1), c.t(2)
    if dy is None or x is None or w is None or not len(dy.shape) == len(x.shape) == len(w.shape) >= 3:
        return None
    n = len(x.shape) - 2
    attrs = {"stride": per_dim(c.c(4), n, 1), "padding": per_dim(c.c(5), n, 0), "dilation": per_dim(c.c(6), n, 1),
             "groups": int_arg(c.c(9), 1), "output_padding": per_dim(c.c(8), n, 0)}
    if any(len(v) != n for v in attrs.values() if isinstance(v, tuple)):
        return None
    transposed = bool_arg(c.c(7))
    want = bool_mask(c.c(10), 3)
    b = GraphBuilder(c)
    ins = [b.input(t) for t in (dy, x, w)]
    dtype = x.dtype or c.default_dtype
    outs = []
    if want[0]:
        outs.append(b.node(Op.CONV, [ins[0], ins[2]], x.shape, dtype,
                           {**attrs, "transposed": not transposed, "role": "grad_input"}))
    if want[1]:
        outs.append(b.node(Op.CONV, [ins[1], ins[0]], w.shape, w.dtype or dtype,
                           {**attrs, "transposed": transposed, "role": "grad_weight"}))
    if want[2]:
        outs.append(b.node(Op.REDUCE_SUM, [ins[0]], (dy.shape[1],), dy.dtype or dtype,
                           {"axes": (0, *range(2, len(dy.shape))), "keepdims": False}))
    return b.done(*outs) if outs else None


def _attention(c: Call, mask: int | None, causal: int) -> Graph | None:
    q, k, v = c.t(0), c.t(1), c.t(2)
    if q is None or k is None or v is None or len(q.shape) != 4 or len(k.shape) != 4 or len(v.shape) != 4:
        return None
    b = GraphBuilder(c)
    ins = [b.input(q), b.input(k), b.input(v)]
    m = c.t(mask) if mask is not None else None
    if m is not None:
        ins.append(b.input(m))
    y = b.node(Op.ATTENTION, ins, (*q.shape[:-1], v.shape[-1]), q.dtype or c.default_dtype,
               {"layout": "bhsd", "causal": bool_arg(c.c(causal))})
    return b.done(y)


_register("scaled_dot_product_attention", "_scaled_dot_product_attention_math")(lambda c: _attention(c, 3, 5))
_register("_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu")(
    lambda c: _attention(c, 5 if c.key.endswith("_for_cpu") else None, 4))
_register("_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention")(
    lambda c: _attention(c, 3, 6))


@_register("_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_efficient_attention_backward",
           "_scaled_dot_product_cudnn_attention_backward", "_scaled_dot_product_flash_attention_for_cpu_backward")
def _attention_backward(c: Call) -> Graph | None:
    go, q, k, v = (c.t(i) for i in range(4))
    if go is None or q is None or k is None or v is None or len(q.shape) != 4:
        return None
    b = GraphBuilder(c)
    dt = q.dtype or c.default_dtype
    node = b.g.add_node(Op.ATTENTION_BACKWARD, [b.input(go), b.input(q), b.input(k), b.input(v)],
                        [TensorType(dt, t.shape) for t in (q, k, v)], {"layout": "bhsd"})
    return b.done(*node.outputs)
