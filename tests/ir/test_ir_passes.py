from dataclasses import dataclass

import pytest

from narrowpipe.errors import PassError
from narrowpipe.ir import (
    AnalysisManager,
    DType,
    Graph,
    Op,
    PassResult,
    TensorType,
    parse_pipeline,
    register_analysis,
    register_pass,
)


@register_analysis("test.node-count")
def node_count(graph: Graph, am: AnalysisManager) -> int:
    return len(graph.nodes)


@register_pass("test.append-relu")
@dataclass(frozen=True)
class AppendRelu:
    times: int = 1

    def run(self, graph: Graph, am: AnalysisManager) -> PassResult:
        for _ in range(self.times):
            last = graph.outputs[0]
            node = graph.add_node(Op.RELU, [last], [last.type])
            graph.set_outputs(node.outputs)
        return PassResult(graph)


@register_pass("test.noop")
def noop(graph: Graph, am: AnalysisManager) -> PassResult:
    return PassResult(graph, frozenset({"test.node-count"}))


def _graph() -> Graph:
    g = Graph()
    x = g.add_input("x", TensorType(DType.FP32, (4,)))
    g.set_outputs([x])
    return g


def test_pipeline_text_with_options_runs_passes_in_order():
    g = parse_pipeline("test.append-relu{times=3},test.noop").run(_graph())
    assert [n.op for n in g.nodes] == [Op.RELU] * 3


def test_analyses_are_cached_until_a_pass_invalidates_them():
    am = AnalysisManager()
    g = _graph()
    assert am.get("test.node-count", g) == 0
    assert am.get("test.node-count", g) == 0
    assert am.computed == ["test.node-count"]
    parse_pipeline("test.noop").run(g, am)          # preserves it
    am.get("test.node-count", g)
    assert am.computed == ["test.node-count"]
    parse_pipeline("test.append-relu").run(g, am)   # changes the graph, preserves nothing
    assert am.get("test.node-count", g) == 1
    assert am.computed == ["test.node-count", "test.node-count"]


def test_unknown_pass_option_and_syntax_errors_are_pass_errors():
    with pytest.raises(PassError, match="unknown pass"):
        parse_pipeline("nope")
    with pytest.raises(PassError, match="unknown option"):
        parse_pipeline("test.append-relu{color=red}")
    with pytest.raises(PassError, match="takes no options"):
        parse_pipeline("test.noop{x=1}")
