"""ConvTranspose, DepthToSpace and SpaceToDepth on symbolic spatial dims give symbolic output dims
(``2*H``), as Conv and pooling do, instead of free dims the user must bind by hand.

Reference: ONNX's own shape inference on the same node with every dim concrete (it gives up only
on symbolic inputs), and the hand formula ``(x-1)*stride - pads + dilation*(k-1) + output_padding + 1``
for the QA report's case.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
from narrowpipe.errors import ShapeError

F = TensorProto.FLOAT


def _model(op: str, x_shape: list[Any], w_shape: list[int] | None, **attrs: Any) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.zeros(w_shape, np.float32), "w")] if w_shape else []
    node = helper.make_node(op, ["x", "w"] if w_shape else ["x"], ["y"], name="n", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, x_shape)],
                              [helper.make_tensor_value_info("y", F, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _onnx_shape(model: onnx.ModelProto) -> list[int]:
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    (y,) = inferred.graph.output
    return [d.dim_value for d in y.type.tensor_type.shape.dim]


def _ours(model: onnx.ModelProto, dims: dict[str, int]) -> list[int]:
    g = narrowpipe.load(model)
    (shape,) = [n.outputs[0].type.shape for n in g.nodes if n.name == "n"]
    return [d if isinstance(d, int) else d.evaluate(dims) for d in shape]


CONV_T = [
    dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
    dict(strides=[3, 2], pads=[0, 2, 1, 0], dilations=[2, 1]),
    dict(strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(strides=[2, 1], auto_pad="VALID", dilations=[1, 3]),
    dict(strides=[2, 2], output_shape=[21, 22]),
    dict(group=2),
]


@pytest.mark.parametrize("attrs", CONV_T, ids=[",".join(a) for a in CONV_T])
@pytest.mark.parametrize("hw", [(5, 7), (1, 13)])
def test_conv_transpose_dims_are_derived_not_asked(attrs: dict[str, Any], hw: tuple[int, int]) -> None:
    """No unbound ``y_d2``: the output dims are expressions of H and W equal to ONNX's answer once bound."""
    w = [8, 3, 3, 4]
    sym = _model("ConvTranspose", ["N", 8, "H", "W"], w, **attrs)
    dims = {"N": 2, "H": hw[0], "W": hw[1]}
    narrowpipe.analyze(narrowpipe.load(sym), dims=dims)   # was: unbound symbolic dim(s): y_d2, y_d3
    assert _ours(sym, dims) == _onnx_shape(_model("ConvTranspose", [2, 8, *hw], w, **attrs))


def test_conv_transpose_qa_case_binds_only_its_inputs() -> None:
    """x [N, 8, H, H], W [8, 6, 3, 3], stride 2, pads 1, output_padding 1: the QA report's model. With
    N=2, H=5 the output is (5-1)*2 - 2 + 2 + 1 + 1 = 10 per side and the FLOPs are
    2 * N * C_in * H*W (input positions) * C_out * k*k = 2*2*8*25*6*9 (each input tap scatters)."""
    m = _model("ConvTranspose", ["N", 8, "H", "H"], [8, 6, 3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
               output_padding=[1, 1])
    g = narrowpipe.load(m)
    (shape,) = [n.outputs[0].type.shape for n in g.nodes if n.name == "n"]
    assert [str(d) for d in shape] == ["N", "6", "2*H", "2*H"]
    assert narrowpipe.analyze(g, dims={"N": 2, "H": 5}).flops == 2 * 2 * 8 * 25 * 6 * 9


@pytest.mark.parametrize("op,c,b", [("DepthToSpace", 12, 2), ("SpaceToDepth", 3, 2), ("DepthToSpace", 18, 3)])
def test_depth_space_dims_are_derived(op: str, c: int, b: int) -> None:
    sym = _model(op, ["N", c, "H", "W"], None, blocksize=b)
    g = narrowpipe.load(sym)
    narrowpipe.analyze(g, dims={"N": 1, "H": 6 * b, "W": 3 * b})   # no unbound y_d2/y_d3
    dims = {"N": 2, "H": 4 * b, "W": 5 * b}
    assert _ours(sym, dims) == _onnx_shape(_model(op, [2, c, 4 * b, 5 * b], None, blocksize=b))


def test_depth_to_space_symbolic_channels() -> None:
    """C symbolic too: C/4 stays an exact expression of C when C is a multiple of 4 once bound."""
    g = narrowpipe.load(_model("DepthToSpace", ["N", "C", "H", "W"], None, blocksize=2))
    (shape,) = [n.outputs[0].type.shape for n in g.nodes if n.name == "n"]
    assert [d if isinstance(d, int) else d.evaluate({"N": 1, "C": 8, "H": 3, "W": 5}) for d in shape] == [1, 2, 6, 10]


def test_depth_to_space_channels_not_divisible_is_named() -> None:
    with pytest.raises(ShapeError, match="not divisible by 4"):
        narrowpipe.load(_model("DepthToSpace", ["N", 6, "H", "W"], None, blocksize=2))


def test_a_negative_dim_at_binding_names_the_file_node_and_onnx_op(tmp_path) -> None:
    """Conv1d with kernel 5 over ``seq``: its output is ``seq - 4``, -2 at seq=2. The error raised
    through the Python API names the file and the ONNX op, as the loader's errors do."""
    path = str(tmp_path / "conv1d.onnx")
    m = _model("Conv", [1, 4, "seq"], [4, 4, 5])
    m.graph.node[0].name = "c1"
    onnx.save(m, path)
    with pytest.raises(ShapeError) as info:
        narrowpipe.analyze(narrowpipe.load(path), dims={"seq": 2})
    text = str(info.value)
    for needle in (path, "'c1'", "ai.onnx::Conv", "is -2"):
        assert needle in text, text
