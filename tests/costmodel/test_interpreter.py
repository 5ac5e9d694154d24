import pytest

import narrowpipe
from narrowpipe.errors import NarrowpipeError, UnboundDimError
from narrowpipe.ir import DimSpec, DType, Graph, Op, Sym, TensorType


def vec(n) -> TensorType:
    return TensorType(DType.FP32, (n,))


def test_peak_activation_memory_from_last_use():
    g = Graph()
    x = g.add_input("x", vec(1000))
    a = g.add_node(Op.RELU, [x], [vec(1000)]).outputs[0]      # x dies here
    b = g.add_node(Op.RELU, [a], [vec(1000)]).outputs[0]
    c = g.add_node(Op.ADD, [a, b], [vec(1000)]).outputs[0]    # a, b, c live together
    g.set_outputs([c])
    assert narrowpipe.analyze(g).peak_activation_bytes == 3 * 4000


def test_views_share_their_input_storage():
    g = Graph()
    x = g.add_input("x", vec(1000))
    v = g.add_node(Op.RESHAPE, [x], [TensorType(DType.FP32, (10, 100))]).outputs[0]
    y = g.add_node(Op.RELU, [v], [TensorType(DType.FP32, (10, 100))]).outputs[0]
    g.set_outputs([y])
    assert narrowpipe.analyze(g).peak_activation_bytes == 2 * 4000


def symbolic_graph() -> Graph:
    g = Graph()
    n = Sym("n")
    g.declare_dim(DimSpec("n", 8))
    x = g.add_input("x", vec(n))
    g.set_outputs(g.add_node(Op.RELU, [x], [vec(n)]).outputs)
    return g


def test_symbolic_dims_use_defaults_and_overrides():
    g = symbolic_graph()
    assert narrowpipe.analyze(g).flops == 8
    assert narrowpipe.analyze(g, n=100).flops == 100
    assert narrowpipe.analyze(g, n=100).dims == {"n": 100}


def test_unbound_and_unknown_dims_are_clear_errors():
    g = Graph()
    x = g.add_input("x", vec(Sym("seq")))
    g.set_outputs(g.add_node(Op.RELU, [x], [vec(Sym("seq"))]).outputs)
    with pytest.raises(UnboundDimError, match="seq"):
        narrowpipe.analyze(g)
    with pytest.raises(NarrowpipeError, match="unknown dim.*batch"):
        narrowpipe.analyze(g, seq=4, batch=2)


def test_report_json_round_trips():
    r = narrowpipe.analyze(symbolic_graph(), n=3)
    back = narrowpipe.Report.from_dict(__import__("json").loads(r.to_json()))
    assert back.flops == r.flops and back.ops == r.ops and back.dims == r.dims


def test_bindings_outside_the_exported_range_are_noted():
    g = symbolic_graph()
    g.declare_dim(__import__("narrowpipe").ir.DimSpec("n", 8, 2, 64))
    assert narrowpipe.analyze(g, n=32).notes == []
    with pytest.warns(UserWarning, match="above the range"):
        assert "above the range" in narrowpipe.analyze(g, n=100).notes[0]
    assert "outside the range" in narrowpipe.analyze(g, n=1).notes[0]
