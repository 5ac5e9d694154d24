"""``serve`` on an ONNX export made without a KV cache that serving cannot rebuild (the QA's GPT-2
dynamo export: eager MatMul-Softmax-MatMul attention, so no head count to read) is refused saying
which part it could not read and what to export instead, not by naming GPT-2 as a layout it
rebuilds."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
from narrowpipe.costmodel.serving import serving_graph


def test_an_unrebuildable_graph_says_why_and_what_to_export() -> None:
    """MatMul, Softmax, MatMul over 2-D tensors: no head count to read, so the refusal says so."""
    w = numpy_helper.from_array(np.zeros((8, 8), np.float32), "transformer.wte.weight")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "transformer.wte.weight"], ["s"], name="qk"),
                           helper.make_node("Softmax", ["s"], ["p"], name="sm"),
                           helper.make_node("MatMul", ["p", "x"], ["y"], name="pv")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(narrowpipe.NarrowpipeError) as info:
        serving_graph(narrowpipe.load(model))
    text = str(info.value)
    assert "no attention node to read the head count" in text and "past key/value inputs" in text
    assert "GPT-2 layout" not in text
