"""The parameter rule: which initializers count as parameters (see ``frontends/onnx_params.py``)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
from narrowpipe.ir import ValueKind

F = TensorProto.FLOAT


def _load(nodes, inputs, inits):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                          [helper.make_tensor_value_info(nodes[-1].output[0], F, None)],
                          [numpy_helper.from_array(a, n) for n, a in inits])
    graph = narrowpipe.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    return graph, {v.source_name.split(" ")[0]: v.kind for v in graph.weights}


def test_transposed_copy_of_a_parameter_is_a_tied_constant() -> None:
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((50, 8)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"]), helper.make_node("MatMul", ["e", "head"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
                          [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(emb, "emb"), numpy_helper.from_array(emb.T.copy(), "head")])
    graph = narrowpipe.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert narrowpipe.analyze(graph).params == 400
    head = next(v for v in graph.weights if v.name == "head")
    assert head.kind is ValueKind.CONST and "tied to emb" in head.source_name


def test_zero_initialized_twins_are_two_parameters() -> None:
    nodes = [helper.make_node("Add", ["x", "b1"], ["h"]), helper.make_node("Add", ["h", "b2"], ["y"])]
    graph, kinds = _load(nodes, [("x", [4])], [("b1", np.zeros(4, np.float32)), ("b2", np.zeros(4, np.float32))])
    assert kinds == {"b1": ValueKind.PARAM, "b2": ValueKind.PARAM}


def test_batch_norm_statistics_and_named_buffers_are_buffers() -> None:
    c = 3
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "mean", "var"], ["n"]),
             helper.make_node("Mul", ["n", "rotary.inv_freq"], ["y"])]
    graph, kinds = _load(nodes, [("x", [1, c, 2, 2])], [
        ("s", np.ones(c, np.float32)), ("b", np.zeros(c, np.float32)), ("mean", np.zeros(c, np.float32)),
        ("var", np.ones(c, np.float32)), ("rotary.inv_freq", np.arange(2, dtype=np.float32))])
    assert kinds["mean"] is kinds["var"] is kinds["rotary.inv_freq"] is ValueKind.BUFFER
    assert kinds["s"] is kinds["b"] is ValueKind.PARAM
    assert narrowpipe.analyze(graph).params == 2 * c


def test_scalars_and_integer_tensors_are_constants() -> None:
    nodes = [helper.make_node("Mul", ["x", "scale"], ["m"]), helper.make_node("Reshape", ["m", "shape"], ["y"])]
    graph, kinds = _load(nodes, [("x", [2, 3])], [("scale", np.array(0.5, np.float32)),
                                                  ("shape", np.array([3, 2], np.int64))])
    assert kinds == {"scale": ValueKind.CONST, "shape": ValueKind.CONST}


def test_identity_reexposed_parameters_count_again() -> None:
    """The legacy exporter keeps one of several byte-identical parameters and re-exposes the rest
    through Identity nodes; each is a parameter of the source model."""
    nodes = [helper.make_node("Identity", ["ln0.weight"], ["ln1.weight"]),
             helper.make_node("LayerNormalization", ["x", "ln0.weight"], ["h"]),
             helper.make_node("LayerNormalization", ["h", "ln1.weight"], ["y"])]
    graph, kinds = _load(nodes, [("x", [2, 8])], [("ln0.weight", np.ones(8, np.float32))])
    assert narrowpipe.analyze(graph).params == 16
