"""Absurd or invalid Conv, pool and shape declarations in ONNX files are ShapeErrors naming the file,
the node and the reason, never FLOPs (the QA report's attribute fuzz); the legitimate forms next to
them (begin/end pads, auto_pad, ConvTranspose's output_shape, ceil_mode) still load with hand-counted
numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
from narrowpipe.errors import ShapeError


def _vi(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _file(tmp_path: Path, node: onnx.NodeProto, x_shape, w_shape=None, name: str = "m.onnx") -> str:
    inits = [numpy_helper.from_array(np.zeros(w_shape, np.float32), "w")] if w_shape is not None else []
    graph = helper.make_graph([node], "g", [_vi("x", x_shape)], [_vi(node.output[0], None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / name
    onnx.save(model, str(path))
    return str(path)


def _conv(**attrs) -> onnx.NodeProto:
    return helper.make_node("Conv", ["x", "w"], ["y"], name="conv_0", **attrs)


def _refused(path: str, *needles: str, dims: dict[str, int] | None = None) -> None:
    with pytest.raises(ShapeError) as info:
        narrowpipe.analyze(narrowpipe.load(path), dims=dims or {})
    text = str(info.value)
    for needle in (path, *needles):
        assert needle in text, text


@pytest.mark.parametrize("attrs, needle", [
    ({"dilations": [0, 0]}, "dilation [0, 0] has a value below 1"),
    ({"strides": [0, 0]}, "stride [0, 0] has a value below 1"),
    ({"strides": [1, 1, 1]}, "strides [1, 1, 1] has 3 values; 2 spatial dims need 2"),
    ({"pads": [1, 1]}, "pads [1, 1] has 2 values; 2 spatial dims need 4"),
    ({"pads": [-1, -1, -1, -1]}, "padding [-1, -1] has a value below 0"),
    ({"kernel_shape": [5, 5]}, "kernel_shape [5, 5] disagrees with the weight's kernel [3, 3]"),
    ({"group": 0}, "groups 0 is not a positive integer"),
])
def test_invalid_conv_attributes_name_the_node(tmp_path, attrs, needle):
    _refused(_file(tmp_path, _conv(**attrs), [1, 4, 8, 8], [8, 4, 3, 3]), "node 'conv_0'", needle)


def test_huge_pads_are_an_absurd_size_not_1e27_flops(tmp_path):
    # (8 + 2e12 - 3) + 1 = 2_000_000_000_006 per side: above the 2**40 any axis may have
    _refused(_file(tmp_path, _conv(pads=[10**12] * 4), [1, 4, 8, 8], [8, 4, 3, 3]), "conv_0", "2000000000006")


def test_a_kernel_larger_than_its_input_is_refused_at_load(tmp_path):
    _refused(_file(tmp_path, _conv(), [1, 4, 2, 2], [8, 4, 3, 3]), "conv_0", "would have size 0")


def test_a_declared_input_of_2_to_the_90_elements_is_refused(tmp_path):
    relu = helper.make_node("Relu", ["x"], ["y"], name="relu_0")
    _refused(_file(tmp_path, relu, [2**40, 2**40, 1024]), "'x'", "1237940039285380274899124224 elements")


def test_a_conv1d_bound_to_an_empty_output_is_refused(tmp_path):
    """Kernel 5 over seq: seq - 4 outputs; at seq=5 one, 2 * 8 * 4 * 5 = 320 FLOPs; torch refuses 4 and 2."""
    path = _file(tmp_path, _conv(), ["batch", 4, "seq"], [8, 4, 5])
    g = narrowpipe.load(path)
    assert narrowpipe.analyze(g, dims={"batch": 1, "seq": 5}).flops == 2 * 8 * 4 * 5
    _refused(path, "conv_0", "output spatial dim 0 would have size 0", dims={"batch": 1, "seq": 4})
    with pytest.raises(ShapeError):
        narrowpipe.analyze(g, dims={"batch": 1, "seq": 2})


@pytest.mark.parametrize("node, x, w, out", [
    # asymmetric pads: (8 + 0 + 2 - 3) + 1 = 8 and (8 + 1 + 1 - 3) + 1 = 8
    (_conv(pads=[0, 1, 2, 1]), [1, 4, 8, 8], [8, 4, 3, 3], [1, 8, 8, 8]),
    # SAME_UPPER at stride 2: ceil(9 / 2) = 5
    (_conv(auto_pad="SAME_UPPER", strides=[2, 2]), [1, 4, 9, 9], [8, 4, 3, 3], [1, 8, 5, 5]),
    # output_shape sets the output; pads follow from it
    (helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="ct", strides=[3, 2], output_shape=[10, 8]),
     [1, 4, 3, 3], [4, 2, 3, 3], [1, 2, 10, 8]),
    # ceil_mode: ceil((6 - 3) / 2) + 1 = 3
    (helper.make_node("MaxPool", ["x"], ["y"], name="mp", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
     [1, 4, 6, 6], None, [1, 4, 3, 3]),
])
def test_legitimate_window_forms_load(tmp_path, node, x, w, out):
    g = narrowpipe.load(_file(tmp_path, node, x, w))
    assert [int(d) for d in g.outputs[0].type.shape] == out


def test_an_invalid_pool_stride_names_the_node(tmp_path):
    pool = helper.make_node("MaxPool", ["x"], ["y"], name="mp", kernel_shape=[2, 2], strides=[0, 1])
    _refused(_file(tmp_path, pool, [1, 4, 6, 6]), "node 'mp'", "stride [0, 1] has a value below 1")
