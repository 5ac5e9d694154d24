"""onnxruntime's saved optimized graph turns the torch exporter's ``Constant`` nodes into initializers
under their output names (``/m/final_norm/Constant_output_0``: a zero LayerNorm bias, a rotary
``inv_freq``). They are constants of the export, not parameters: ``params`` must stay the source
model's (ModernBERT's optimized file counted 336 more, GPT-J's 512)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import narrowpipe


def _layer_norm_model(bias_name: str):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal(16).astype(np.float32), "m.norm.weight")
    bias = numpy_helper.from_array(np.zeros(16, np.float32), bias_name)
    node = helper.make_node("LayerNormalization", ["x", "m.norm.weight", bias_name], ["y"], axis=-1,
                            name="/m/norm/LayerNormalization")
    graph = helper.make_graph([node], "ln", [x], [y], initializer=[weight, bias])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_constant_nodes_output_turned_initializer_is_no_parameter():
    for name in ("/m/norm/Constant_output_0", "/m/norm/Constant_3_output_0"):
        report = narrowpipe.analyze(narrowpipe.load(_layer_norm_model(name)), dims={"batch": 2})
        assert report.params == 16        # the weight only


def test_a_parameter_named_otherwise_still_counts():
    for name in ("m.norm.bias", "/m/Constant_output_0_bias", "m.ConstantScale"):
        report = narrowpipe.analyze(narrowpipe.load(_layer_norm_model(name)), dims={"batch": 2})
        assert report.params == 32
