"""A report's rows on a class-costed graph are built on first read, and are the rows (and totals)
of the node-by-node walk, which builds every row at once."""

import pickle

import numpy as np
import pytest

import narrowpipe
from narrowpipe.costmodel.costcache import graph_index
from narrowpipe.costmodel.lazy_rows import LazyRows
from narrowpipe.ir import DimSpec, DType, Graph, Op, Sym, TensorType, ValueKind


def t(*shape) -> TensorType:
    return TensorType(DType.FP32, tuple(shape))


def _graph(layers: int = 5) -> Graph:
    """Repeated blocks (few classes) plus one node per block whose attrs hold an array, which no
    class can key: those are costed alone (class -1), so both paths of the totals run."""
    b = Sym("batch")
    g = Graph("lazy")
    g.declare_dim(DimSpec("batch", default=2))
    x = g.add_input("x", t(b, 16))
    for i in range(layers):
        w = g.add_input(f"w{i}", t(16, 32), ValueKind.PARAM)
        h = g.add_node(Op.DOT, [x, w], [t(b, 32)], {"lhs_contract": (1,), "rhs_contract": (0,)}).outputs[0]
        r = g.add_node(Op.RELU, [h], [t(b, 32)], {"table": np.arange(i + 1)}).outputs[0]
        e = g.add_node(Op.EXP, [r], [t(b, 32)]).outputs[0]
        x = g.add_node(Op.RESHAPE, [e], [t(b, 2, 16)]).outputs[0]
        x = g.add_node(Op.REDUCE_SUM, [x], [t(b, 16)], {"axes": (1,)}).outputs[0]
    g.set_outputs([x])
    return g


def _walked(graph: Graph, **dims) -> narrowpipe.Report:
    index = graph_index(graph)
    index.flat = False     # the node-by-node walk: eager rows, totals summed node by node
    try:
        return narrowpipe.analyze(graph, **dims)
    finally:
        index.flat = True


def test_rows_wait_for_a_reader_and_totals_do_not_need_them():
    g = _graph()
    narrowpipe.analyze(g, batch=4)               # indexes the graph
    assert -1 in graph_index(g).node_class and len(graph_index(g).counts) < len(g.nodes)
    report = narrowpipe.analyze(g, batch=8)
    assert isinstance(report.ops, LazyRows) and not report.ops.built
    walked = _walked(g, batch=8)
    assert isinstance(walked.ops, list)
    # by hand: each block's dot is 2*8*16*32 FLOPs, its exp 8*32 transcendentals
    assert report.flops == walked.flops and report.flops >= 5 * 2 * 8 * 16 * 32
    assert report.transcendentals == walked.transcendentals == 5 * 8 * 32
    assert (report.bytes, report.comm_bytes) == (walked.bytes, walked.comm_bytes)
    assert report.flops_by_group == walked.flops_by_group
    assert report.bytes_by_group == walked.bytes_by_group
    assert not report.ops.built                   # none of that read a row
    assert len(report.ops) == len(g.nodes) and report.ops.built
    assert list(report.ops) == walked.ops
    assert report == walked and report.to_dict() == walked.to_dict()


def test_rows_read_as_a_sequence_and_pickle_as_a_list():
    g = _graph(layers=3)
    narrowpipe.analyze(g, batch=2)
    report = narrowpipe.analyze(g, batch=3)
    ops = report.ops
    assert ops[0].op == "dot" and ops[-1].name == g.nodes[-1].name
    assert ops[1:3] == list(ops)[1:3]
    back = pickle.loads(pickle.dumps(report))
    assert isinstance(back.ops, list) and back.ops == ops
    assert [r.flops for r in ops if r.op == "dot"] == [2 * 3 * 16 * 32] * 3


def test_a_timed_report_reads_the_rows_once_and_they_add_up():
    g = _graph(layers=3)
    narrowpipe.analyze(g, batch=2)
    report = narrowpipe.analyze(g, "h100", batch=64)
    assert sum(r.time_s or 0.0 for r in report.ops) == pytest.approx(report.timing.time_s, rel=1e-12)
    assert sum(r.flops for r in report.ops) == report.flops
