"""Pure lowerings are recorded once per node signature and stamped (``frontends/onnx/stamp.py``).

Reference: the same model lowered node by node through the whole-model path
(``frontend.TYPING = "full"``, no stamping), compared as whole graphs; what each stamped node
reads and whether it is tagged causal are checked against the model as built.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
from narrowpipe.frontends.onnx import frontend
from narrowpipe.frontends.onnx.lowering import OnnxLowerer
from narrowpipe.ir import CAUSAL, Op, ValueKind
from narrowpipe.ir.serialize import graph_to_dict

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes: list, inputs: list, outputs: list, inits: list | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "stamps", inputs, outputs, inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _same_as_whole_model_path(model: onnx.ModelProto) -> narrowpipe.Graph:
    graph = narrowpipe.load(model)
    frontend.TYPING = "full"
    try:
        reference = narrowpipe.load(model)
    finally:
        frontend.TYPING = "auto"
    assert graph_to_dict(graph) == graph_to_dict(reference)
    return graph


@pytest.fixture
def lowered_alone(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the nodes lowered through a NodeCx (recorded or impure), not stamped."""
    names: list[str] = []
    real = OnnxLowerer.lower_node

    def spy(self: OnnxLowerer, node: Any, *args: Any, **kwargs: Any) -> None:
        names.append(node.name)
        real(self, node, *args, **kwargs)

    monkeypatch.setattr(OnnxLowerer, "lower_node", spy)
    return names


def test_repeated_nodes_are_lowered_once_per_signature(lowered_alone: list[str]) -> None:
    n = 40
    nodes = []
    for i in range(n):
        nodes += [helper.make_node("Relu", [f"x{i}"], [f"r{i}"], name=f"relu{i}"),
                  helper.make_node("Transpose", [f"r{i}"], [f"x{i + 1}"], perm=[1, 0], name=f"t{i}")]
    model = _model(nodes, [helper.make_tensor_value_info("x0", F, ["batch", "batch"])],
                   [helper.make_tensor_value_info(f"x{n}", F, None)])
    narrowpipe.load(model)
    assert lowered_alone == ["relu0", "t0"]   # the 78 others are stamped
    graph = _same_as_whole_model_path(model)
    assert [node.name for node in graph.nodes] == [node.name for node in model.graph.node]
    produced = [o for node in model.graph.node[:-1] for o in node.output]
    assert [node.inputs[0].name for node in graph.nodes[1:]] == produced


def test_a_node_reading_one_value_twice_is_not_stamped_for_two_values() -> None:
    """x * x and y * z have the same operand types; each node keeps its own operands."""
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
             helper.make_node("Mul", ["y", "z"], ["yz"], name="product"),
             helper.make_node("Mul", ["sq", "yz"], ["out"], name="both")]
    ins = [helper.make_tensor_value_info(n, F, [4]) for n in ("x", "y", "z")]
    graph = _same_as_whole_model_path(_model(nodes, ins, [helper.make_tensor_value_info("out", F, None)]))
    reads = {node.name: [v.name for v in node.inputs] for node in graph.nodes}
    assert reads == {"square": ["x", "x"], "product": ["y", "z"], "both": ["sq", "yz"]}


def test_an_impure_lowering_runs_for_every_node(lowered_alone: list[str]) -> None:
    """Identity of a weight re-exposes the weight (an exporter's dedup): no node to stamp."""
    inits = [numpy_helper.from_array(np.full((4, 4), 0.5, np.float32), "w")]
    nodes = [helper.make_node("Identity", ["w"], [f"w{i}"], name=f"id{i}") for i in range(5)]
    nodes += [helper.make_node("MatMul", ["x", f"w{i}"], [f"y{i}"], name=f"mm{i}") for i in range(5)]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [2, 4])],
                   [helper.make_tensor_value_info(f"y{i}", F, None) for i in range(5)], inits)
    narrowpipe.load(model)
    assert lowered_alone == [f"id{i}" for i in range(5)] + ["mm0"]
    graph = _same_as_whole_model_path(model)
    assert sum(v.kind is ValueKind.PARAM for v in graph.weights) == 6


def test_a_stamped_softmax_still_tags_its_causal_mask_step() -> None:
    """Four eager-attention steps share one Hugging Face additive causal mask; each mask add
    feeding a softmax is tagged causal, the stamped ones too."""
    inits = [numpy_helper.from_array(np.array(v, dtype), k) for k, v, dtype in (
        ("zero", 0, np.int64), ("one", 1, np.int64), ("idx2", 2, np.int64), ("axis0", [0], np.int64),
        ("axis1", [1], np.int64), ("fzero", 0.0, np.float32), ("neg_inf", -np.inf, np.float32))]
    nodes = [helper.make_node("Shape", ["s0"], ["shape"]),
             helper.make_node("Gather", ["shape", "idx2"], ["n"], axis=0),
             helper.make_node("Range", ["zero", "n", "one"], ["i"]),
             helper.make_node("Unsqueeze", ["i", "axis1"], ["q_idx"]),
             helper.make_node("Unsqueeze", ["i", "axis0"], ["kv_idx"]),
             helper.make_node("LessOrEqual", ["kv_idx", "q_idx"], ["allowed"]),
             helper.make_node("Where", ["allowed", "fzero", "neg_inf"], ["mask"])]
    for k in range(4):
        nodes += [helper.make_node("Add", [f"s{k}", "mask"], [f"m{k}"], name=f"mask_step{k}"),
                  helper.make_node("Softmax", [f"m{k}"], [f"s{k + 1}"], axis=-1, name=f"softmax{k}")]
    model = _model(nodes, [helper.make_tensor_value_info("s0", F, ["batch", 2, "seq", "seq"])],
                   [helper.make_tensor_value_info("s4", F, None)], inits)
    graph = _same_as_whole_model_path(model)
    tagged = [node.name for node in graph.nodes if node.attrs.get(CAUSAL)]
    assert tagged == [f"mask_step{k}" for k in range(4)]
    assert all(node.op is Op.ADD for node in graph.nodes if node.name in tagged)
