"""Every opset from 7 to the newest the installed onnx knows: the same small network, converted by
onnx's version converter, loads and costs the same at each."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper, version_converter

import narrowpipe

NEWEST = onnx.defs.onnx_opset_version()


def _net(opset: int = 7) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in
             (("w", (8, 3, 3, 3)), ("b", (8,)), ("fc", (10, 8 * 4 * 4)), ("fcb", (10,)))]
    inits.append(numpy_helper.from_array(np.array([-1, 8 * 4 * 4], np.int64), "shape"))
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Reshape", ["p", "shape"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], transB=1),
             helper.make_node("Softmax", ["logits"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


EXPECTED = 2 * 8 * 3 * 9 * 64 + 2 * 10 * 128  # conv (torch convention) + gemm, per image


@pytest.mark.parametrize("opset", range(7, NEWEST + 1))
def test_same_costs_at_every_opset(opset: int) -> None:
    model = _net() if opset == 7 else version_converter.convert_version(_net(), opset)  # converts upwards
    assert model.opset_import[0].version == opset
    report = narrowpipe.analyze(narrowpipe.load(model), batch=3)
    assert report.modeled_flops == 3 * EXPECTED
    assert report.params == 8 * 27 + 8 + 10 * 128 + 10
    assert not report.unmodeled
