"""``bind-dims{...}``: the pipeline step that gives the analyses after it sizes to count at.

``cost-table``, ``kernels`` and ``fuse`` count under the graph's dim defaults, and an ONNX export has
none, so ``fuse`` on a loaded ``.onnx`` raised UnboundDimError and no pipeline text could help. FLOPs
below are hand-counted: a [b, s, 64] @ [64, 256] matmul is 2*b*s*64*256, a relu on [b, s, 256] is
b*s*256.
"""

from __future__ import annotations

import re

import pytest
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
import narrowpipe.ir.passes
from narrowpipe.errors import PassError, UnboundDimError
from narrowpipe.ir import AnalysisManager, DimSpec, DType, Graph, Op, Sym, TensorType, ValueKind, run_passes


def _mlp() -> Graph:
    g = Graph("mlp")
    g.declare_dim(DimSpec("batch"))
    g.declare_dim(DimSpec("seq"))
    b, s = Sym("batch"), Sym("seq")
    x = g.add_input("x", TensorType(DType.FP32, (b, s, 64)))
    w = g.add_input("w", TensorType(DType.FP32, (64, 256)), ValueKind.PARAM)
    mm = g.add_node(Op.DOT, [x, w], [TensorType(DType.FP32, (b, s, 256))], {"lhs_contract": (2,), "rhs_contract": (0,)})
    g.set_outputs(g.add_node(Op.RELU, mm.outputs, [TensorType(DType.FP32, (b, s, 256))]).outputs)
    return g


def _onnx_mlp() -> Graph:
    import numpy as np
    w = numpy_helper.from_array(np.zeros((64, 256), np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch-size", "sequence", 64])
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                          "mlp", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return narrowpipe.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def _flops(graph: Graph, am: AnalysisManager) -> int:
    return am.get("cost-table", graph).total().flops


def test_the_pass_managers_docstring_pipeline_runs():
    """The module doc's example, read from the doc itself: b=8, s=2048."""
    (text,) = re.findall(r'``"([^"]+)"``', narrowpipe.ir.passes.__doc__ or "")
    am = AnalysisManager()
    out = run_passes(_mlp(), text, am)
    assert _flops(out, am) == 2 * 8 * 2048 * 64 * 256 + 8 * 2048 * 256
    assert len(am.get("kernels", out)) == 2   # fuse{mode=none}: a kernel per node


def test_an_onnx_graph_without_defaults_fuses_once_its_dims_are_bound():
    g = _onnx_mlp()
    with pytest.raises(UnboundDimError, match=r"bind them first in the pipeline: 'bind-dims\{batch_size=N\}"):
        run_passes(g, "fuse{mode=none}")
    am = AnalysisManager()
    out = run_passes(g, "bind-dims{batch-size=2,sequence=3},fuse{mode=none}", am)   # by the ONNX names
    assert _flops(out, am) == 2 * 2 * 3 * 64 * 256 + 2 * 3 * 256
    assert g.default_bindings() == {} and out.default_bindings() == {"batch_size": 2, "sequence": 3}


def test_a_later_bind_dims_overrides_an_earlier_one():
    am = AnalysisManager()
    out = run_passes(_mlp(), "bind-dims{batch=8,seq=4},bind-dims{seq=1}", am)
    assert _flops(out, am) == 2 * 8 * 1 * 64 * 256 + 8 * 256


def test_a_loop_trip_count_binds_too():
    """A loop of unknown trips over a 10-element negation: bound to 4 trips, 40 FLOPs."""
    g = Graph("loop")
    x = g.add_input("x", TensorType(DType.FP32, (10,)))
    body = Graph("body")
    body.set_outputs(body.add_node(Op.NEG, [x], [TensorType(DType.FP32, (10,))]).outputs)
    g.add_node(Op.LOOP, [], [TensorType(DType.FP32, (10,))], {"body": body, "trip_count": None}, name="loop0")
    am = AnalysisManager()
    assert _flops(run_passes(g, "bind-dims{loop0_trips=4}", am), am) == 40


@pytest.mark.parametrize("text, reason", [
    ("bind-dims{colour=3}", r"pass 'bind-dims': unknown dim\(s\) colour; this graph's dims: batch, seq"),
    ("bind-dims{batch=0}", r"pass 'bind-dims': dim batch must be >= 1, got 0"),
    ("bind-dims{batch=eight}", r"pass 'bind-dims': batch='eight' is not an integer size"),
    ("bind-dims", r"pass 'bind-dims' needs at least one dim"),
])
def test_bad_bindings_are_pass_errors_naming_the_dim(text, reason):
    with pytest.raises(PassError, match=reason):
        run_passes(_mlp(), text)
