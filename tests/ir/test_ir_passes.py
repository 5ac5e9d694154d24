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


@register_pass("test.forgets-return")
def forgets_return(graph: Graph, am: AnalysisManager) -> PassResult:
    graph.meta["touched"] = True
    return None  # type: ignore[return-value]   # the bug under test


@register_pass("test.flagged")
@dataclass(frozen=True)
class Flagged:
    on: bool = False
    ratio: float = 1.0

    def __post_init__(self) -> None:
        if self.ratio <= 0:
            raise ValueError(f"ratio must be > 0, got {self.ratio}")

    def run(self, graph: Graph, am: AnalysisManager) -> PassResult:
        return PassResult(graph)


def test_a_pass_returning_none_is_a_pass_error_naming_it():
    """It was a raw AttributeError ('NoneType' object has no attribute ...) from the manager."""
    with pytest.raises(PassError, match=r"pass 'test.forgets-return' returned NoneType instead of a Graph"):
        parse_pipeline("test.forgets-return").run(_graph())


def test_bad_option_values_are_pass_errors_naming_pass_and_option():
    with pytest.raises(PassError, match=r"pass 'test.append-relu': option times='three' is not an integer"):
        parse_pipeline("test.append-relu{times=three}")
    with pytest.raises(PassError, match=r"option ratio='half' is not a number"):
        parse_pipeline("test.flagged{ratio=half}")
    with pytest.raises(PassError, match=r"option on='ture' is not a boolean"):   # read as False before
        parse_pipeline("test.flagged{on=ture}")
    with pytest.raises(PassError, match=r"pass 'test.flagged': ratio must be > 0, got -1.0"):
        parse_pipeline("test.flagged{ratio=-1}")
    assert parse_pipeline("test.flagged{on=yes,ratio=0.5}").passes[0] == Flagged(True, 0.5)
    assert parse_pipeline("test.flagged{on=off}").passes[0] == Flagged(False)


def test_precision_with_an_unknown_dtype_is_a_pass_error_listing_the_dtypes():
    """precision{weights=int3} raised builtins.ValueError, while fuse{mode=banana} was a PassError."""
    from narrowpipe.costmodel.precision import with_precision
    from narrowpipe.ir import run_passes
    with pytest.raises(PassError, match=r"pass 'precision': option weights='int3' is not a number format it "
                                        r"can take; choose from fp64, fp32"):
        run_passes(_graph(), "precision{weights=int3}")
    with pytest.raises(PassError, match=r"option activations='fp7'"):
        parse_pipeline("precision{activations=fp7}")
    with pytest.raises(PassError, match=r"option weights='int3'"):
        with_precision(_graph(), weights="int3")
    with pytest.raises(PassError, match=r"pass 'fuse': unknown mode 'banana'; choose from"):
        parse_pipeline("fuse{mode=banana}")
