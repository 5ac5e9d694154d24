"""ONNX BatchNormalization's mode decides its fusion: ``training_mode=0`` (running statistics, one
output) is a per-channel affine that fuses into the Conv before it, as onnxruntime's basic
optimisation folds it; ``training_mode=1`` computes batch statistics and stays a kernel of its own."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import narrowpipe

C, K = 4, 8


def _model(training: int | None, opset: int):
    rng = np.random.default_rng(0)
    outs = ["n", "run_mean", "run_var"] if training else ["n"]
    attrs = {} if training is None else {"training_mode": training}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "mean", "var"], outs, **attrs),
             helper.make_node("Relu", ["n"], ["y"])]
    inits = [numpy_helper.from_array(rng.standard_normal((K, C, 3, 3)).astype(np.float32), "w")] + \
        [numpy_helper.from_array(np.ones(K, np.float32), n) for n in ("s", "b", "mean", "var")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, C, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return narrowpipe.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]))


def _kernel_of(report):
    return {row.op: row.kernel for row in report.ops}


@pytest.mark.parametrize("training,opset", [(0, 15), (None, 15), (None, 9)])
def test_inference_batch_norm_fuses_into_the_conv(training, opset):
    k = _kernel_of(narrowpipe.analyze(_model(training, opset), "h100", fusion="full"))
    assert k["batch_norm"] == k["conv"] == k["relu"]


def test_training_batch_norm_is_its_own_kernel():
    k = _kernel_of(narrowpipe.analyze(_model(1, 15), "h100", fusion="full"))
    assert k["batch_norm"] != k["conv"]
