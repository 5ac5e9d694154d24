"""Control flow states what it assumes: an If counts its costlier branch and says so; a Loop whose
trip count is read at run time gives its scan outputs the trip count as their leading dim, one dim
(``<loop>_trips``) that sizes the outputs and the body's repeats together, taking a size the file
declares. References: hand counts (a [M, K] x [K, N] MatMul is 2*M*K*N FLOPs; an Add of [1] per
iteration is 1 FLOP) and the ONNX backend test ``test_loop11``'s declared output ``[5, 1]``."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import narrowpipe

F = TensorProto.FLOAT


def _if_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.zeros((64, 32), np.float32), "w")
    then_g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", F, [16, 32])])
    else_g = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["e"], keepdims=1)], "else", [],
                               [helper.make_tensor_value_info("e", F, [1, 1])])
    node = helper.make_node("If", ["c"], ["y"], name="if1", then_branch=then_g, else_branch=else_g)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                        helper.make_tensor_value_info("x", F, [16, 64])],
                          [helper.make_tensor_value_info("y", F, None)], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_if_counts_the_costlier_branch_and_says_so() -> None:
    r = narrowpipe.analyze(narrowpipe.load(_if_model()))
    assert r.flops_by_group["contraction"] == 2 * 16 * 64 * 32
    assert any("if1" in n and "costlier branch" in n for n in r.notes), r.notes


def _loop_model(declared: list | None) -> onnx.ModelProto:
    """Loop_0 adds [1] to a carried [1] each iteration and emits it as a scan output; the trip count
    is a graph input, so only a binding (or a declaration) says how many times it runs."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["y_in", "y_in"], ["y_out"]),
         helper.make_node("Identity", ["y_out"], ["scan_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_in", F, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_out", F, [1]), helper.make_tensor_value_info("scan_out", F, [1])])
    node = helper.make_node("Loop", ["n", "cond", "y"], ["res_y", "res_scan"], name="Loop_0", body=body)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("n", TensorProto.INT64, []),
                                        helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                                        helper.make_tensor_value_info("y", F, [1])],
                          [helper.make_tensor_value_info("res_y", F, [1]),
                           helper.make_tensor_value_info("res_scan", F, declared)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _scan_shape(graph: narrowpipe.Graph, dims: dict[str, int]) -> tuple[int, ...]:
    (loop,) = [n for n in graph.nodes if n.name == "Loop_0"]
    return tuple(d if isinstance(d, int) else d.evaluate(dims) for d in loop.outputs[1].type.shape)


def test_scan_output_leading_dim_follows_the_bound_trip_count() -> None:
    g = narrowpipe.load(_loop_model(None))
    r = narrowpipe.analyze(g, dims={"Loop_0_trips": 7})
    assert _scan_shape(g, {"Loop_0_trips": 7}) == (7, 1)
    assert r.flops == 7     # one [1] Add per iteration
    assert not any("Loop_0" in n for n in r.notes)


def test_scan_output_takes_the_declared_trip_count_and_notes_it() -> None:
    """test_loop11 declares res_scan [5, 1]: 5 iterations unless bound otherwise (it was 1)."""
    g = narrowpipe.load(_loop_model([5, 1]))
    r = narrowpipe.analyze(g)
    assert r.flops == 5
    assert any("Loop_0_trips" in n and "5 time(s)" in n for n in r.notes), r.notes
    assert narrowpipe.analyze(g, dims={"Loop_0_trips": 3}).flops == 3


def test_an_unknown_trip_count_is_counted_once_with_a_note() -> None:
    r = narrowpipe.analyze(narrowpipe.load(_loop_model(None)))
    assert r.flops == 1
    assert any("Loop_0" in n and "1 time(s)" in n for n in r.notes), r.notes
