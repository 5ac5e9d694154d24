"""Small graphs the execution-model tests time by hand: one GEMM of a weight.

One definition, so the hand computations in several test files read the same graph.
"""

from __future__ import annotations

from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind


def gemm_graph(m: int, n: int, k: int, dtype: DType = DType.BF16) -> Graph:
    """``[m, k] @ [k, n]`` with the right-hand side a weight (a linear layer without bias)."""
    g = Graph(f"gemm{m}x{n}x{k}")
    a = g.add_input("a", TensorType(dtype, (m, k)))
    w = g.add_input("w", TensorType(dtype, (k, n)), ValueKind.PARAM)
    g.set_outputs(g.add_node(Op.DOT, [a, w], [TensorType(dtype, (m, n))],
                             {"lhs_contract": (1,), "rhs_contract": (0,)}).outputs)
    return g


def conv_graph(n: int, c: int, hw: tuple[int, ...], k: int, kernel: tuple[int, ...], stride: int = 1, *,
               pad: int = 0, dilation: int = 1, groups: int = 1, role: str | None = None,
               dtype: DType = DType.FP32) -> Graph:
    """A convolution of ``n`` images of ``c`` channels and spatial size ``hw`` (1-D, 2-D or 3-D) by
    ``k`` filters of size ``kernel``, with the same stride, padding and dilation on every axis;
    ``role="grad_input"``: its data gradient (a transposed convolution from dy to dx), as the
    training graphs hold it."""
    d = len(hw)
    out = tuple((h + 2 * pad - dilation * (r - 1) - 1) // stride + 1 for h, r in zip(hw, kernel))
    attrs = {"stride": (stride,) * d, "padding": (pad,) * d, "dilation": (dilation,) * d, "groups": groups,
             "output_padding": (0,) * d}
    x_t, y_t = TensorType(dtype, (n, c, *hw)), TensorType(dtype, (n, k, *out))
    w_t = TensorType(dtype, (k, c // groups, *kernel))
    g = Graph("conv")
    if role == "grad_input":
        dy, w = g.add_input("grad_out", y_t), g.add_input("w", w_t, ValueKind.PARAM)
        node = g.add_node(Op.CONV, [dy, w], [x_t], {**attrs, "transposed": True, "role": role})
    else:
        x, w = g.add_input("x", x_t), g.add_input("w", w_t, ValueKind.PARAM)
        node = g.add_node(Op.CONV, [x, w], [y_t], {**attrs, "transposed": False})
    g.set_outputs(node.outputs)
    return g
