"""The per-graph index that lets analyze cost one node per class and re-bind dims cheaply."""

import numpy as np

import narrowpipe
from narrowpipe.costmodel import costcache, interpreter
from narrowpipe.costmodel.costcache import graph_index, node_signature
from narrowpipe.ir import DimSpec, DType, Graph, Op, Sym, TensorType


def t(*shape) -> TensorType:
    return TensorType(DType.FP32, tuple(shape))


def _block_graph(layers: int = 4) -> Graph:
    """``layers`` identical blocks over a symbolic batch: few classes, many nodes."""
    b = Sym("batch")
    g = Graph("blocks")
    g.declare_dim(DimSpec("batch", default=2))
    x = g.add_input("x", t(b, 16))
    for i in range(layers):
        w = g.add_input(f"w{i}", t(16, 16), narrowpipe.ir.ValueKind.PARAM)
        h = g.add_node(Op.DOT, [x, w], [t(b, 16)], {"lhs_contract": (1,), "rhs_contract": (0,)}).outputs[0]
        r = g.add_node(Op.RELU, [h], [t(b, 16)]).outputs[0]
        v = g.add_node(Op.RESHAPE, [r], [t(b, 4, 4)]).outputs[0]
        s = g.add_node(Op.SOFTMAX, [v], [t(b, 4, 4)], {"axis": 2}).outputs[0]
        x = g.add_node(Op.RESHAPE, [s], [t(b, 16)]).outputs[0]
    g.set_outputs([x])
    return g


def _plain(graph: Graph, **dims) -> narrowpipe.Report:
    """The node-by-node walk, for comparison: the same graph with its class path switched off."""
    index = graph_index(graph)
    index.flat = False
    try:
        return narrowpipe.analyze(graph, **dims)
    finally:
        index.flat = True


def test_rebinding_reuses_the_index_and_matches_the_plain_walk():
    g = _block_graph()
    first = narrowpipe.analyze(g, batch=8)
    index = graph_index(g)
    assert len(index.counts) == 5          # dot, relu, two reshapes, softmax: one class each
    second = narrowpipe.analyze(g, batch=64)
    assert graph_index(g) is index         # re-binding walked nothing again
    assert first.flops * 8 == second.flops
    assert first == _plain(g, batch=8)
    assert second == _plain(g, batch=64)


def test_each_rule_runs_once_per_class(monkeypatch):
    g = _block_graph(layers=6)
    calls = []
    original = interpreter._node_cost

    def counting(node, *args, **kwargs):
        calls.append(node.op)
        return original(node, *args, **kwargs)

    monkeypatch.setattr(interpreter, "_node_cost", counting)
    narrowpipe.analyze(g, batch=8)
    assert len(calls) == len(graph_index(g).counts) < len(g.nodes)


def test_nodes_with_different_attrs_or_operands_never_share_a_cost():
    g = Graph()
    a, b = g.add_input("a", t(1000)), g.add_input("b", t(1000))
    same = g.add_node(Op.ADD, [a, a], [t(1000)])      # reads one tensor once
    other = g.add_node(Op.ADD, [a, b], [t(1000)])     # reads two
    g.set_outputs([same.outputs[0], other.outputs[0]])
    costs = interpreter.interpret(g, {}).costs
    assert costs[same].bytes_read == 4000 and costs[other].bytes_read == 8000
    assert node_signature(same) != node_signature(other)

    def sig(attrs):
        return node_signature(g.add_node(Op.SOFTMAX, [a], [t(1000)], attrs))

    assert len({sig({"axis": 1}), sig({"axis": True}), sig({"axis": 1.0}), sig({"axis": [1]}),
                sig({"axis": (1,)}), sig({"axis": 0})}) == 6
    assert sig({"axis": 1}) == sig({"axis": 1})
    assert sig({"table": np.zeros(3)}) is None          # no exact key: costed on its own


def test_a_changed_graph_gets_a_new_index():
    g = _block_graph(layers=1)
    before = narrowpipe.analyze(g, batch=4)
    index = graph_index(g)
    y = g.add_node(Op.RELU, [g.outputs[0]], [t(Sym("batch"), 16)]).outputs[0]
    g.set_outputs([y])
    after = narrowpipe.analyze(g, batch=4)
    assert graph_index(g) is not index
    assert len(after.ops) == len(before.ops) + 1
    costcache.forget(g)
    assert graph_index(g) is not index
