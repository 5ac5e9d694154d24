"""Shapes the file computes at run time are never invented: a Reshape whose target is a tensor value
keeps its input's element count, takes the sizes its consumers pin, and asks for the rest; a binding
that breaks a reshape, a matmul's contraction or an Expand is refused, naming the node.

References: hand-counted FLOPs (2*M*K*N for a matmul), and onnxruntime's own refusals (a reshape to
another element count, an expand past what broadcasting allows) where it is installed.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
from narrowpipe.errors import ShapeError, UnboundDimError

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _vi(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def _w(rows: int, cols: int):
    return numpy_helper.from_array(np.zeros((rows, cols), np.float32), "W")


def test_reshape_to_a_graph_input_shape_takes_the_matmuls_k() -> None:
    """X[4, 64] reshaped by an input S[2], then @ W[64, 32]: the matmul pins dim 1 to 64, the element
    count gives dim 0 = 4: 2*4*64*32 FLOPs (it was 256 x 256 with defaults, 4,194,304 FLOPs)."""
    m = _model([helper.make_node("Reshape", ["X", "S"], ["R"], name="rs"),
                helper.make_node("MatMul", ["R", "W"], ["Y"], name="mm")],
               [_vi("X", [4, 64]), _vi("S", [2], I64)], [_vi("Y", None)], [_w(64, 32)])
    g = narrowpipe.load(m)
    assert [n.outputs[0].type.shape for n in g.nodes if n.name == "rs"] == [(4, 64)]
    assert narrowpipe.analyze(g).flops == 2 * 4 * 64 * 32


def _datadep(k: int = 64):
    """The QA model: target Concat(-1, ReduceMax(L)) of a symbolic-batch X[batch, 64]."""
    return _model([helper.make_node("ReduceMax", ["L"], ["m"], keepdims=1, name="rmax"),
                   helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array([-1], np.int64))),
                   helper.make_node("Concat", ["c", "m"], ["shp"], axis=0, name="cat"),
                   helper.make_node("Reshape", ["X", "shp"], ["R"], name="rs"),
                   helper.make_node("MatMul", ["R", "R2"], ["Y"], name="mm")],
                  [_vi("X", ["batch", 64]), _vi("L", ["batch"], I64), _vi("R2", [k, 32])], [_vi("Y", None)])


def test_reshape_to_concat_of_minus_one_and_a_runtime_size() -> None:
    """[-1, max(L)] @ R2[64, 32]: dim 1 pinned to 64, the -1 solved as batch (it was [64*batch, 64*batch])."""
    g = narrowpipe.load(_datadep())
    (rs,) = [n for n in g.nodes if n.name == "rs"]
    assert [str(d) for d in rs.outputs[0].type.shape] == ["batch", "64"]
    r = narrowpipe.analyze(g, dims={"batch": 4})
    assert r.flops - 4 == 2 * 4 * 64 * 32    # the ReduceMax over 4 lengths adds 4


def test_reshape_whose_element_count_cannot_fit_the_consumer_is_named() -> None:
    """X[batch, 64] to [-1, k] with k pinned to 48 by the weight: 64*batch // 48 is no exact size,
    so the binding that leaves a remainder is refused at the reshape."""
    g = narrowpipe.load(_datadep(k=48))
    with pytest.raises(ShapeError, match="'rs'"):
        narrowpipe.analyze(g, dims={"batch": 4})
    assert narrowpipe.analyze(g, dims={"batch": 3}).flops - 3 == 2 * 4 * 48 * 32


def _open3():
    return _model([helper.make_node("Reshape", ["X", "S"], ["R"], name="rs"),
                   helper.make_node("Relu", ["R"], ["Y"], name="relu")],
                  [_vi("X", [4, 64]), _vi("S", [3], I64)], [_vi("Y", None)])


def test_unpinned_runtime_reshape_asks_for_its_dims() -> None:
    """Nothing pins a [?, ?, ?] target: two dims must be bound (the error names the reshape node),
    the third follows from the 256 elements; a binding that does not divide them is refused."""
    g = narrowpipe.load(_open3())
    with pytest.raises(UnboundDimError, match="R_d0.*Reshape node 'rs'"):
        narrowpipe.analyze(g)
    assert narrowpipe.analyze(g, dims={"R_d0": 2, "R_d1": 4}).flops == 256
    with pytest.raises(ShapeError, match=r"'rs'.*256 elements.*255 elements"):
        narrowpipe.analyze(g, dims={"R_d0": 3, "R_d1": 5})


def test_matmul_contraction_that_disagrees_once_bound_is_named() -> None:
    """X[batch, k] @ W[64, 32] at k=63: onnxruntime refuses it; so does the cost model, naming mm."""
    m = _model([helper.make_node("MatMul", ["X", "W"], ["Y"], name="mm")],
               [_vi("X", ["batch", "k"])], [_vi("Y", None)], [_w(64, 32)])
    g = narrowpipe.load(m)
    assert narrowpipe.analyze(g, dims={"batch": 4, "k": 64}).flops == 2 * 4 * 64 * 32
    with pytest.raises(ShapeError, match=r"'mm'.*\[63\] with \[64\]"):
        narrowpipe.analyze(g, dims={"batch": 4, "k": 63})


def _positions(table: int = 8):
    """A BERT-style buffer: ids[1, table] sliced to the sequence, then expanded to [batch, seq]
    (the token-type ids of transformers' BERT): past the table the expand cannot broadcast."""
    nodes = [helper.make_node("Shape", ["X"], ["xs"]),
             helper.make_node("Gather", ["xs", "one"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
             helper.make_node("Slice", ["ids", "zero1", "n1", "ax1"], ["pos"]),
             helper.make_node("Expand", ["pos", "xs"], ["E"], name="expand_ids"),
             helper.make_node("Cast", ["E"], ["Y"], to=F)]
    inits = [numpy_helper.from_array(np.arange(table, dtype=np.int64)[None], "ids"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.array([1], np.int64), "ax1"),
             numpy_helper.from_array(np.array([0], np.int64), "zero1")]
    return _model(nodes, [_vi("X", ["batch", "seq"], I64)], [_vi("Y", None)], inits)


def test_expand_past_the_position_table_is_refused() -> None:
    g = narrowpipe.load(_positions(8))
    assert narrowpipe.analyze(g, dims={"batch": 2, "seq": 8}).flops > 0
    with pytest.raises(ShapeError, match=r"'expand_ids'.*cannot expand \[1, 8\] to \[2, 9\]"):
        narrowpipe.analyze(g, dims={"batch": 2, "seq": 9})


def test_onnxruntime_agrees_on_the_refusals() -> None:
    """The independent reference: onnxruntime runs what we count and refuses what we refuse."""
    ort = pytest.importorskip("onnxruntime")

    def run(model, **feeds):
        s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return s.run(None, feeds)

    run(_positions(8), X=np.zeros((2, 8), np.int64))
    with pytest.raises(Exception, match="(?i)expand|broadcast|invalid"):
        run(_positions(8), X=np.zeros((2, 9), np.int64))
    run(_open3(), X=np.zeros((4, 64), np.float32), S=np.array([2, 4, 32], np.int64))
    with pytest.raises(Exception, match="(?i)reshape|shape"):
        run(_open3(), X=np.zeros((4, 64), np.float32), S=np.array([3, 5, 17], np.int64))


def _position_lookup() -> onnx.ModelProto:
    """GPT-2's position embedding as exporters write it: Range(0, len(ids), 1) indexes an 8-row table."""
    zero = numpy_helper.from_array(np.array(0, np.int64), "zero")
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    axis0 = numpy_helper.from_array(np.array([0], np.int64), "axis0")
    return _model([helper.make_node("Shape", ["ids"], ["shape"], name="shape"),
                   helper.make_node("Gather", ["shape", "zero"], ["n"], name="n", axis=0),
                   helper.make_node("Range", ["zero", "n", "one"], ["pos"], name="range"),
                   helper.make_node("Gather", ["W", "pos"], ["rows"], name="wpe", axis=0),
                   helper.make_node("Unsqueeze", ["rows", "axis0"], ["out"], name="unsq")],
                  [_vi("ids", ["sequence"], I64)], [_vi("out", None)], [_w(8, 4), zero, one, axis0])


def test_a_range_past_the_position_table_is_refused_naming_the_gather() -> None:
    """Positions 0..n-1 of an 8-row table: n = 8 is the last that fits (onnxruntime: 'indices element
    out of data bounds' past it); n = 9 read a row the model does not have and was costed."""
    g = narrowpipe.load(_position_lookup())
    assert narrowpipe.analyze(g, dims={"sequence": 8}).bytes > 0
    with pytest.raises(ShapeError, match=r"wpe.*indices 0\.\.8 \(a range of 9\) fall outside the 8 rows"):
        narrowpipe.analyze(g, dims={"sequence": 9})


def _reduce_over_runtime_axes() -> onnx.ModelProto:
    """ReduceSum(data[3, 4, 5], axes: a graph input) with keepdims=0, then Log declared [3] and Exp
    undeclared: the reduced length is data-dependent, and the file's declaration of Log says it is 3."""
    return helper.make_model(helper.make_graph(
        [helper.make_node("ReduceSum", ["data", "axes"], ["s"], keepdims=0, name="rs"),
         helper.make_node("Log", ["s"], ["r"], name="lg"), helper.make_node("Exp", ["s"], ["e"], name="ex")],
        "g", [_vi("data", [3, 4, 5]), _vi("axes", [2], I64)], [_vi("r", [3]), _vi("e", ["k"])]),
        opset_imports=[helper.make_opsetid("", 18)])


def test_a_declared_output_settles_a_size_that_runtime_axes_leave_open() -> None:
    """It was refused as an edited graph file (output [3] is not the broadcast [5] of its operand: the
    unknown length defaulted to its bound, 5). The reference evaluator gives (3,) for axes [1, 2]."""
    from onnx.reference import ReferenceEvaluator

    m = _reduce_over_runtime_axes()
    onnx.checker.check_model(m, full_check=True)
    data = np.ones((3, 4, 5), np.float32)
    r, e = ReferenceEvaluator(m).run(None, {"data": data, "axes": np.array([1, 2], np.int64)})
    assert r.shape == e.shape == (3,)
    g = narrowpipe.load(m)
    (dim,) = [d for d in g.dims if d.endswith("_d0")]
    assert g.dims[dim].default == 3
    report = narrowpipe.analyze(g)
    ex = next(row for row in report.ops if row.name == "ex")
    assert ex.bytes == 2 * 3 * 4          # 3 fp32 read, 3 written
    with pytest.raises(ShapeError, match="lg"):       # bound against the declaration: refused
        narrowpipe.analyze(g, dims={dim: 5})
