import networkx as nx
import pytest

from narrowpipe.errors import VerificationError
from narrowpipe.ir import (
    DimSpec,
    DType,
    Graph,
    Op,
    Placement,
    Sym,
    TensorType,
    ValueKind,
    format_graph,
    from_json,
    problems,
    to_json,
    to_networkx,
    verify,
)


def small_graph() -> Graph:
    g = Graph("mlp")
    n = Sym("batch")
    g.declare_dim(DimSpec("batch", 4, 1, 64))
    x = g.add_input("x", TensorType(DType.FP32, (n, 8)))
    w = g.add_input("w", TensorType(DType.FP32, (16, 8)), ValueKind.PARAM)
    dot = g.add_node(Op.DOT, [x, w], [TensorType(DType.FP32, (n, 16))],
                     {"lhs_contract": (1,), "rhs_contract": (1,), "lhs_batch": (), "rhs_batch": ()})
    relu = g.add_node(Op.RELU, dot.outputs, [TensorType(DType.FP32, (n, 16))])
    relu.placement = Placement((0, 1), ("tp",), ((1, "tp"),), 0)
    body = Graph("then")
    body.add_node(Op.NEG, [relu.outputs[0]], [TensorType(DType.FP32, (n, 16))])
    body.set_outputs(body.nodes[0].outputs)
    cond = g.add_input("c", TensorType(DType.BOOL, ()))
    branch = g.add_node(Op.IF, [cond], [TensorType(DType.FP32, (n, 16))], {"then_branch": body, "else_branch": body})
    g.set_outputs(branch.outputs)
    return g


def test_verifier_accepts_a_well_formed_graph_with_outer_captures():
    assert problems(small_graph()) == []


def test_verifier_reports_every_problem():
    g = Graph("bad")
    x = g.add_input("x", TensorType(DType.FP32, (2, 3)))
    stray = Graph("other").add_input("y", TensorType(DType.FP32, (3,)))
    g.add_node(Op.DOT, [x, stray], [TensorType(DType.FP32, (2,))], {"lhs_contract": (5,), "rhs_contract": (0,)})
    g.add_node(Op.CONV, [x], [TensorType(DType.FP32, (-1,))])
    with pytest.raises(VerificationError) as err:
        verify(g)
    text = str(err.value)
    assert "used before it is defined" in text
    assert "negative dim" in text
    assert "missing attribute 'stride'" in text
    assert "needs at least 2 inputs" in text


def test_json_round_trip_prints_identically():
    g = small_graph()
    back = from_json(to_json(g))
    assert format_graph(back) == format_graph(g)
    assert back.nodes[1].placement == g.nodes[1].placement
    assert back.dims == g.dims
    assert problems(back) == []


def test_printer_shows_ops_types_and_nested_bodies():
    text = format_graph(small_graph())
    assert "fp32[batch, 16] = dot(%x, %w)" in text
    assert "graph then(" in text


def test_networkx_view_has_value_edges():
    g = to_networkx(small_graph())
    assert isinstance(g, nx.MultiDiGraph)
    assert g.nodes["dot"]["op"] == "dot"
    assert g.has_edge("x", "dot") and g.has_edge("dot", "relu")
    assert nx.is_directed_acyclic_graph(g)


def test_param_count_counts_only_parameters():
    g = small_graph()
    g.add_input("running_mean", TensorType(DType.FP32, (100,)), ValueKind.BUFFER)
    assert g.param_count() == 16 * 8
