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
