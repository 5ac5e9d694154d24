"""Costmodel work under the pass manager: precision clones (and equals the old JSON round trip),
fusion is a pass and a cached analysis, and the verifier runs after every pass in tests."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import narrowpipe  # noqa: F401  (registers the costmodel passes)
from narrowpipe.costmodel.kernels import fuse
from narrowpipe.costmodel.precision import with_precision
from narrowpipe.errors import PassError, VerificationError
from narrowpipe.ir import (
    AnalysisManager,
    DType,
    Graph,
    Op,
    PassResult,
    TensorType,
    graph_from_dict,
    graph_to_dict,
    parse_pipeline,
    register_pass,
)
from narrowpipe.models.examples import load_example


def _json_round_trip_precision(graph: Graph, w: DType | None, a: DType | None) -> dict:
    """What ``with_precision`` did before it cloned: retype the JSON form and read it back."""
    data = graph_to_dict(graph)

    def apply(d: dict) -> None:
        for key, to in (("weights", w), ("inputs", a)):
            for v in d[key]:
                if to is not None and DType(v["dtype"]).is_float:
                    v["dtype"] = to.value
        for node in d["nodes"]:
            for v in node["outputs"]:
                if a is not None and DType(v["dtype"]).is_float:
                    v["dtype"] = a.value
            attrs = node.get("attrs", {})
            if attrs.get("to") and a is not None and DType.parse(str(attrs["to"])).is_float:
                attrs["to"] = a.value
            for attr in attrs.values():
                if isinstance(attr, dict) and "$graph" in attr:
                    apply(attr["$graph"])

    apply(data)
    out = graph_from_dict(data)
    out.meta["precision"] = {"weights": w.value if w else None, "activations": a.value if a else None}
    return graph_to_dict(out)


@pytest.mark.parametrize("w,a", [(DType.FP8_E4M3, None), (DType.FP8_E4M3, DType.BF16), (None, DType.FP16)])
def test_precision_by_cloning_equals_the_json_round_trip(w, a):
    graph = load_example("gpt2")
    before = graph_to_dict(graph)
    out = with_precision(graph, weights=w, activations=a)
    assert graph_to_dict(out) == _json_round_trip_precision(graph, w, a)
    assert graph_to_dict(graph) == before          # the input is untouched
    assert out is not graph and not set(out.nodes) & set(graph.nodes)


def test_the_precision_pass_returns_a_new_graph_and_keeps_the_inputs_analyses():
    graph = load_example("gpt2")
    am = AnalysisManager()
    kernels = am.get("kernels", graph)
    out = parse_pipeline("precision{weights=fp8_e4m3},verify").run(graph, am)
    assert out is not graph
    assert am.get("kernels", graph) is kernels     # the input graph was not mutated
    assert out.weights[0].dtype is DType.FP8_E4M3


def test_fuse_pass_hands_its_kernels_on_as_the_kernels_analysis():
    graph = load_example("gpt2")
    am = AnalysisManager()
    table = am.get("cost-table", graph)
    parse_pipeline("fuse{mode=none}").run(graph, am)
    eager = am.get("kernels", graph)
    assert [k.name for k in eager] == [k.name for k in fuse(table, "none")]
    assert am.computed.count("kernels") == 0       # served from what the pass put there
    parse_pipeline("fuse").run(graph, am)
    assert [k.name for k in am.get("kernels", graph)] == [k.name for k in fuse(table, "full")]
    with pytest.raises(PassError, match="unknown mode"):
        parse_pipeline("fuse{mode=sideways}")


def test_kernels_analysis_is_recomputed_after_a_mutation():
    g = Graph("tiny")
    x = g.add_input("x", TensorType(DType.FP32, (8,)))
    r = g.add_node(Op.RELU, [x], [x.type])
    g.set_outputs(r.outputs)
    am = AnalysisManager()
    assert len(am.get("kernels", g)) == 1
    n = g.add_node(Op.NEG, r.outputs, [x.type])
    g.set_outputs(n.outputs)
    kernels = am.get("kernels", g)
    assert [k.nodes for k in kernels] == [[r, n]]  # fused into one elementwise kernel


@register_pass("test.break-a-dot")
@dataclass(frozen=True)
class BreakADot:
    """Adds a DOT whose output shape is wrong, as a buggy rewrite would."""

    def run(self, graph: Graph, am: AnalysisManager) -> PassResult:
        x = graph.inputs[0]
        graph.add_node(Op.DOT, [x, x], [TensorType(DType.FP32, (3,))], {"lhs_contract": (0,), "rhs_contract": (0,)})
        return PassResult(graph)


def test_the_verifier_runs_after_every_pass_under_the_flag(monkeypatch):
    g = Graph("tiny")
    g.set_outputs([g.add_input("x", TensorType(DType.FP32, (8,)))])
    monkeypatch.setenv("NARROWPIPE_VERIFY", "1")
    with pytest.raises(VerificationError, match="after pass test.break-a-dot"):
        parse_pipeline("test.break-a-dot").run(g)
    monkeypatch.setenv("NARROWPIPE_VERIFY", "0")
    parse_pipeline("test.break-a-dot").run(g)      # off: no check
    with pytest.raises(VerificationError, match="the verify pass"):
        parse_pipeline("verify").run(g)
