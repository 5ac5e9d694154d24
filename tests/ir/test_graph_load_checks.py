"""A graph JSON is input nobody checked: loading refuses what would count wrong numbers.

Each case edits one field of a good file (x[4,8] @ w[8,16] -> relu) and expects a ModelLoadError that
names the file and what is wrong; the good file's numbers are checked by hand first, so the edits
are the only difference.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import narrowpipe
from narrowpipe.errors import IRError, ModelLoadError
from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind, graph_from_dict, graph_to_dict, to_networkx


def _good() -> dict[str, Any]:
    g = Graph("mlp")
    x = g.add_input("x", TensorType(DType.FP32, (4, 8)))
    w = g.add_input("w", TensorType(DType.FP32, (8, 16)), ValueKind.PARAM)
    mm = g.add_node(Op.DOT, [x, w], [TensorType(DType.FP32, (4, 16))],
                    {"lhs_contract": (1,), "rhs_contract": (0,)}, name="mm")
    act = g.add_node(Op.RELU, [mm.outputs[0]], [TensorType(DType.FP32, (4, 16))], name="act")
    g.set_outputs(act.outputs)
    return graph_to_dict(g)


def _load(tmp_path: Path, edit: Callable[[dict[str, Any]], object]) -> Graph:
    d = copy.deepcopy(_good())
    edit(d)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    return narrowpipe.load(path)


def test_the_good_file_loads_with_hand_counted_numbers(tmp_path):
    """dot: 2*4*8*16 = 1024 FLOPs, relu: 4*16 = 64; params: 8*16 = 128."""
    r = narrowpipe.analyze(_load(tmp_path, lambda d: None))
    assert (r.flops, r.params) == (1024 + 64, 128)
    assert [n["outputs"][0]["name"] for n in _good()["nodes"]] == ["mm_1", "act_1"]   # the names below


CASES: dict[str, tuple[Callable[[dict[str, Any]], object], str]] = {
    "input declared twice": (
        lambda d: d["inputs"].append(dict(d["inputs"][0], shape=[100, 8])),
        r"value name 'x' is defined twice \(input 'x' and input 'x'\)"),
    "a node output reusing a name": (
        lambda d: (d["nodes"][1]["outputs"][0].update(name="mm_1"), d.update(outputs=["mm_1"])),
        r"value name 'mm_1' is defined twice \(an output of node 'mm' and an output of node 'act'\)"),
    "node name used twice": (
        lambda d: d["nodes"][1].update(name="mm"), r"node name 'mm' is used twice"),
    "undefined reference": (
        lambda d: d["nodes"][1].update(inputs=["nope"]),
        r"node 'act' reads 'nope', which no input, weight or earlier node defines"),
    "cycle": (
        lambda d: d["nodes"][0].update(inputs=["act_1", "w"]),
        r"node 'mm' reads 'act_1', which node 'act' defines only later"),
    "undefined graph output": (
        lambda d: d.update(outputs=["ghost"]), r"the graph's outputs reads 'ghost'"),
    "dot K mismatch": (
        lambda d: d["weights"][0].update(shape=[9, 16]), r"contracting dims differ: lhs dim 1 is 8, rhs dim 0 is 9"),
    "wrong dot output shape": (
        lambda d: d["nodes"][0]["outputs"][0].update(shape=[4, 1600]), r"output shape \[4, 1600\]"),
    "negative static dim": (
        lambda d: [d["inputs"][0].update(shape=[-4, 8])] + [n["outputs"][0].update(shape=[-4, 16])
                                                            for n in d["nodes"]],
        r"value 'x' has a negative dim -4"),
    "weight listed with kind input": (
        lambda d: d["weights"][0].update(kind="input"),
        r"weight 'w' has kind 'input', which contradicts the 'weights' list"),
    "input listed with kind param": (
        lambda d: d["inputs"][0].update(kind="param"),
        r"input 'x' has kind 'param', which contradicts the 'inputs' list"),
    "unknown kind": (
        lambda d: d["weights"][0].update(kind="banana"), r"unknown kind 'banana'; kinds: input, param"),
    "unknown op": (
        lambda d: d["nodes"][1].update(op="banana"), r"node 'act': unknown op 'banana'"),
    "dim default not an integer": (
        lambda d: d.update(dims=[{"name": "seq", "default": "x"}]),
        r"dim 'seq': default must be an integer or null, got 'x'"),
    "negative dim default": (
        lambda d: d.update(dims=[{"name": "seq", "default": -3}]),
        r"dim 'seq': default -3 is below 1"),
    "unknown dim role": (
        lambda d: d.update(dims=[{"name": "seq", "default": 4, "role": "banana"}]),
        r"dim 'seq': unknown dim role 'banana'; roles: batch, sequence, kv_length, other"),
    "dim min above max": (
        lambda d: d.update(dims=[{"name": "seq", "min": 8, "max": 4}]), r"dim 'seq': min 8 is above max 4"),
    "a node named like an input": (   # to_networkx merged node 'x' with input 'x': mm read its own output
        lambda d: d["nodes"][1].update(name="x"), r"node name 'x' is also the name of a value"),
    "a node named like a later output": (
        lambda d: d["nodes"][0].update(name="act_1"), r"node name 'act_1' is also the name of a value"),
    "a node named like its own output": (
        lambda d: (d["nodes"][0]["outputs"][0].update(name="mm"), d["nodes"][1].update(inputs=["mm"])),
        r"node name 'mm' is also the name of a value"),
    "a dim spelt in its source as a number": (
        lambda d: d.update(dims=[{"name": "seq", "source_name": 7}]), r"dim 'seq': source_name must be a string"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_bad_graph_file_is_a_load_error_naming_file_and_reason(tmp_path, case):
    edit, reason = CASES[case]
    with pytest.raises(ModelLoadError, match=r"file '.*bad\.json': invalid graph JSON: ") as info:
        _load(tmp_path, edit)
    assert info.match(reason)


def test_names_from_the_file_are_kept_not_renamed(tmp_path):
    """Names the API would not have chosen (an output named ``mm`` by a node ``matmul``) are kept as
    written, and a reference means the value of that name."""
    def edit(d: dict[str, Any]) -> None:
        d["nodes"][0]["name"] = "matmul"
        d["nodes"][0]["outputs"][0]["name"] = "mm"
        d["nodes"][1]["inputs"] = ["mm"]
    g = _load(tmp_path, edit)
    mm, act = g.nodes
    assert (mm.name, mm.outputs[0].name) == ("matmul", "mm") and act.inputs[0] is mm.outputs[0]
    assert narrowpipe.analyze(g).flops == 1024 + 64


def test_the_networkx_view_refuses_a_node_and_a_value_of_one_name():
    """Keyed by name, node 'x' and input 'x' would be one networkx node, and the acyclic program a
    cycle (x -> mm -> act=x -> mm); a graph whose names were edited into that clash is refused."""
    nx = pytest.importorskip("networkx")
    g = graph_from_dict(_good())
    assert nx.is_directed_acyclic_graph(to_networkx(g))
    g.nodes[1].name = "x"
    with pytest.raises(IRError, match=r"a relu node and a value of kind input are both named 'x'|"
                                      r"a value of kind input and a relu node are both named 'x'"):
        to_networkx(g)


def test_a_zero_default_loads_where_the_dims_own_range_allows_it(tmp_path):
    """The binding rule (DimSpec.least: the role's 1, or the dim's min where lower) is the loader's:
    a data-dependent count declared min 0 may default to 0, as the ONNX frontend writes it for
    ``StringSplit`` of an empty tensor; without the min, 0 is still refused."""
    def edit(d: dict[str, Any]) -> None:
        d["dims"] = [{"name": "n", "default": 0, "min": 0}]
        d["inputs"][0]["shape"] = ["n", 8]
        for n in d["nodes"]:
            n["outputs"][0]["shape"] = ["n", 16]
    g = _load(tmp_path, edit)
    assert (g.dims["n"].default, narrowpipe.analyze(g).flops) == (0, 0)
    assert narrowpipe.analyze(g, n=3).flops == 3 * (2 * 8 * 16 + 16)
    with pytest.raises(ModelLoadError, match=r"dim 'n': default 0 is below 1, the least size of a other dim"):
        _load(tmp_path, lambda d: (edit(d), d["dims"][0].pop("min")))


def test_an_onnx_empty_split_saves_to_a_file_that_loads(tmp_path):
    """ONNX's node test ``test_string_split_empty_tensor``: StringSplit of a [0] tensor has a
    data-dependent second dim bounded by 0 substrings; graph.save wrote it and load refused it."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    node = helper.make_node("StringSplit", ["x"], ["substrings", "length"], maxsplit=0)
    m = helper.make_model(helper.make_graph(
        [node], "split", [helper.make_tensor_value_info("x", TensorProto.STRING, [0])],
        [helper.make_tensor_value_info("substrings", TensorProto.STRING, None),
         helper.make_tensor_value_info("length", TensorProto.INT64, None)]),
        opset_imports=[helper.make_opsetid("", 20)])
    g = narrowpipe.load(m)
    (spec,) = g.dims.values()
    assert (spec.default, spec.min) == (0, 0)
    again = narrowpipe.load(g.save(tmp_path / "split.json"))
    assert again.dims == g.dims
    assert narrowpipe.analyze(again).bytes == narrowpipe.analyze(g).bytes


def test_a_kv_length_default_may_be_zero_and_a_zero_dim_is_legal(tmp_path):
    """An empty KV cache is the prefill step; a dim of 0 is an empty tensor (0 FLOPs), not an error."""
    def edit(d: dict[str, Any]) -> None:
        d["dims"] = [{"name": "past", "default": 0, "role": "kv_length"}]
        d["inputs"][0]["shape"] = ["past", 8]
        for n in d["nodes"]:
            n["outputs"][0]["shape"] = ["past", 16]
    g = _load(tmp_path, edit)
    assert narrowpipe.analyze(g).flops == 0
    assert narrowpipe.analyze(g, past=2).flops == 2 * 2 * 8 * 16 + 2 * 16


def test_a_symbolic_dim_going_negative_at_binding_is_refused(tmp_path):
    """``batch - 10`` loads (it is positive for batch > 10) but at batch=4 it is -6: an error, not
    negative FLOPs and bytes."""
    def edit(d: dict[str, Any]) -> None:
        d["dims"] = [{"name": "batch", "default": 12, "role": "batch"}]
        d["inputs"][0]["shape"] = ["batch - 10", 8]
        for n in d["nodes"]:
            n["outputs"][0]["shape"] = ["batch - 10", 16]
    g = _load(tmp_path, edit)
    assert narrowpipe.analyze(g).flops == 2 * (2 * 8 * 16 + 16)
    with pytest.raises(narrowpipe.NarrowpipeError, match=r"input 'x': dim 'batch - 10' is -6 at batch=4"):
        narrowpipe.analyze(g, batch=4)


def test_graph_from_dict_raises_irerror_and_can_skip_the_verifier():
    d = _good()
    d["weights"][0]["shape"] = [9, 16]
    with pytest.raises(IRError, match="failed verification after loading it from JSON"):
        graph_from_dict(d)
    assert graph_from_dict(d, check=False).weights[0].type.shape == (9, 16)
