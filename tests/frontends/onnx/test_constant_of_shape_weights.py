"""A ConstantOfShape over a shape stored in the file is a weight, as onnxruntime's constant folding
makes it; over a shape computed in the graph it stays a runtime fill (``frontends/onnx/filled.py``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
from narrowpipe.ir import Graph, Op, ValueKind
from narrowpipe.models.examples import load_example

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
F = TensorProto.FLOAT


def _resnet50_params() -> int:
    """torchvision's ResNet-50 by hand: conv weights (no bias), two affine BN parameters per channel,
    bottleneck blocks [3, 4, 6, 3] with expansion 4, a 1x1 projection in each stage's first block."""
    def conv(cin: int, cout: int, k: int) -> int:
        return cin * cout * k * k

    total, cin = conv(3, 64, 7) + 2 * 64, 64
    for blocks, width in zip((3, 4, 6, 3), (64, 128, 256, 512)):
        for b in range(blocks):
            total += conv(cin, width, 1) + conv(width, width, 3) + conv(width, 4 * width, 1)
            total += 2 * (width + width + 4 * width)
            if b == 0:
                total += conv(cin, 4 * width, 1) + 2 * 4 * width
            cin = 4 * width
    return total + 2048 * 1000 + 1000


def _vgg19_params() -> int:
    """VGG-19 by hand: sixteen 3x3 convs and three fc layers, each with a bias."""
    chans = [3, 64, 64, 128, 128, 256, 256, 256, 256, 512, 512, 512, 512, 512, 512, 512, 512]
    convs = sum(a * b * 9 + b for a, b in zip(chans, chans[1:]))
    fcs = sum(a * b + b for a, b in ((512 * 7 * 7, 4096), (4096, 4096), (4096, 1000)))
    return convs + fcs


def test_hand_counts_are_the_published_figures() -> None:
    """torchvision's model cards: ResNet-50 25,557,032 and VGG-19 143,667,240 parameters."""
    assert _resnet50_params() == 25_557_032
    assert _vgg19_params() == 143_667_240


def test_light_resnet50_weights_are_parameters_not_fills() -> None:
    """onnx's light_resnet50 keeps 239 stripped weights as ConstantOfShape over stored shapes: they
    are its parameters (25.6M, as the bundled ResNet-50 example reports), its batch-norm statistics
    are buffers, and no fill kernel runs at inference."""
    graph = narrowpipe.load(LIGHT / "light_resnet50.onnx")
    assert not [n for n in graph.nodes if n.op is Op.FILL]
    report = narrowpipe.analyze(graph, "h100")
    assert report.params == _resnet50_params()
    assert report.params == narrowpipe.analyze(load_example("resnet50"), "h100").params
    kinds = Counter(v.kind for v in graph.weights if v.name.endswith(("_rm_0", "_riv_0")))
    assert kinds == {ValueKind.BUFFER: 2 * 53}   # running mean and variance of each of the 53 batch norms
    assert report.modeled_flops == 8_178_368_512  # the conv and FC FLOPs, unchanged by where weights live


def test_light_vgg19_weights_are_parameters() -> None:
    """light_vgg19: 36 ConstantOfShape weights (143,667,112 elements) plus the two conv biases the
    file stores as initializers (2 x 64) are VGG-19's 143,667,240 parameters."""
    graph = narrowpipe.load(LIGHT / "light_vgg19.onnx")
    assert not [n for n in graph.nodes if n.op is Op.FILL and n.source.op.endswith("ConstantOfShape")]
    assert narrowpipe.analyze(graph).params == _vgg19_params()


def _alexnet_bvlc() -> int:
    """BVLC AlexNet: convs 11x11 (96), 5x5 in two groups (256), 3x3 (384, 384 and 256 in two groups),
    fc 9216 -> 4096 -> 4096 -> 1000, each with a bias."""
    convs = (96 * 3 * 11 * 11 + 96) + (256 * 48 * 5 * 5 + 256) + (384 * 256 * 9 + 384) + \
        (384 * 192 * 9 + 384) + (256 * 192 * 9 + 256)
    return convs + (9216 * 4096 + 4096) + (4096 * 4096 + 4096) + (4096 * 1000 + 1000)


def _zfnet512() -> int:
    """ZFNet-512 (the Caffe2 zoo's): convs of 96, 256, 512, 512, 512 channels (7x7/2, 5x5/2, then
    3x3), fc 512*6*6 -> 4096 -> 1024 -> 1000, each with a bias."""
    convs = (96 * 3 * 7 * 7 + 96) + (256 * 96 * 5 * 5 + 256) + (512 * 256 * 9 + 512) + \
        2 * (512 * 512 * 9 + 512)
    return convs + (512 * 6 * 6 * 4096 + 4096) + (4096 * 1024 + 1024) + (1024 * 1000 + 1000)


def test_alexnet_and_zfnet_hand_counts() -> None:
    assert (_alexnet_bvlc(), _zfnet512()) == (60_965_224, 87_250_536)


@pytest.mark.parametrize("name,params", [("light_bvlc_alexnet", _alexnet_bvlc), ("light_zfnet512", _zfnet512)])
def test_light_networks_with_every_weight_filled_count_their_parameters(name: str, params: Callable[[], int]) -> None:
    """AlexNet (BVLC, grouped convs): 5 convs + 3 fc with biases, 60,965,224 by hand; ZFNet-512:
    87,250,536 by hand. Both files store no weight but as ConstantOfShape."""
    assert narrowpipe.analyze(narrowpipe.load(LIGHT / f"{name}.onnx")).params == params()


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], inits: list[TensorProto]) -> Graph:
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(nodes[-1].output[0], F, None)], inits)
    return narrowpipe.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_stored_and_constant_node_shapes_become_classified_weights() -> None:
    """A conv weight over a stored shape is a parameter (8*3*3*3 = 216), a bias over a Constant
    node's shape too (8), an integer fill a constant; none is a kernel."""
    nodes = [helper.make_node("Constant", [], ["bshape"], value=numpy_helper.from_array(np.array([8], np.int64))),
             helper.make_node("ConstantOfShape", ["wshape"], ["w"],
                              value=numpy_helper.from_array(np.array([0.1], np.float32))),
             helper.make_node("ConstantOfShape", ["bshape"], ["b"]),
             helper.make_node("ConstantOfShape", ["bshape"], ["ids"],
                              value=numpy_helper.from_array(np.array([1], np.int64))),
             helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Gather", ["c", "ids"], ["y"], axis=1)]
    graph = _model(nodes, [helper.make_tensor_value_info("x", F, [1, 3, 4, 4])],
                   [numpy_helper.from_array(np.array([8, 3, 3, 3], np.int64), "wshape")])
    kinds = {v.name: v.kind for v in graph.weights}
    assert (kinds["w"], kinds["b"], kinds["ids"]) == (ValueKind.PARAM, ValueKind.PARAM, ValueKind.CONST)
    assert not [n for n in graph.nodes if n.op is Op.FILL]
    assert narrowpipe.analyze(graph).params == 8 * 3 * 3 * 3 + 8


@pytest.mark.parametrize("batch", [2, "batch"])
def test_shape_computed_in_the_graph_stays_a_fill(batch: int | str) -> None:
    """ConstantOfShape(Shape(x)) is a tensor made at run time, static batch or symbolic: a fill,
    no parameter (onnxruntime folds a static one too, but it is the input's size, not a weight)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ConstantOfShape", ["s"], ["z"]),
             helper.make_node("Add", ["x", "z"], ["y"])]
    graph = _model(nodes, [helper.make_tensor_value_info("x", F, [batch, 16])], [])
    assert [n.op for n in graph.nodes if n.source.op.endswith("ConstantOfShape")] == [Op.FILL]
    assert narrowpipe.analyze(graph, dims={"batch": 2} if batch == "batch" else None).params == 0
