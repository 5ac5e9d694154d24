"""Recorded aten calls lower to the canonical ops the torch frontend emits, with exact costs."""

from __future__ import annotations

import pytest

from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.frontends.trace.lower import Call, collective_kind, lower_call
from narrowpipe.frontends.trace.read import TensorArg
from narrowpipe.ir import DType, Op

F32, BF16 = DType.FP32, DType.BF16


def _cost(name: str, inputs: list, concrete: list[str] | None = None):
    g = lower_call(Call(name, inputs, concrete or [""] * len(inputs)))
    assert g is not None, name
    table = interpret(g, {})
    return g, table.total()


def test_linear_is_a_dot_plus_a_bias_add():
    g, c = _cost("aten::linear", [TensorArg((2, 5, 64), BF16), TensorArg((32, 64), BF16), TensorArg((32,), BF16)])
    assert [n.op for n in g.nodes] == [Op.DOT, Op.ADD]
    assert g.outputs[0].type.shape == (2, 5, 32)
    assert c.flops == 2 * 10 * 32 * 64 + 10 * 32


def test_matmul_broadcasts_batch_dims_like_torch():
    g, c = _cost("aten::matmul", [TensorArg((3, 1, 4, 8), F32), TensorArg((5, 8, 6), F32)])
    assert g.outputs[0].type.shape == (3, 5, 4, 6) and c.flops == 2 * 3 * 5 * 4 * 6 * 8


def test_conv2d_output_shape_and_flops_follow_torch():
    x, w, b = TensorArg((2, 3, 32, 32), F32), TensorArg((16, 3, 3, 3), F32), TensorArg((16,), F32)
    g, c = _cost("aten::conv2d", [x, w, b, None, None, None, None], ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"])
    assert g.outputs[0].type.shape == (2, 16, 16, 16)
    assert c.flops == 2 * 2 * 16 * 3 * 9 * 16 * 16 + 2 * 16 * 16 * 16


def test_grouped_transposed_convolution():
    x, w = TensorArg((1, 8, 10, 10), F32), TensorArg((8, 2, 4, 4), F32)   # groups=2: Cout = 2 * 2
    args = [x, w, None, None, None, None, None, None, None]
    g, c = _cost("aten::convolution", args, ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[0, 0]", "2"])
    assert g.outputs[0].type.shape == (1, 4, 20, 20)
    assert c.flops == 2 * 1 * 8 * 2 * 16 * 100      # torch counts transposed convs over input positions


def test_sdpa_with_gqa_and_causal_flag():
    q, k = TensorArg((1, 8, 128, 64), BF16), TensorArg((1, 2, 128, 64), BF16)
    g, c = _cost("aten::scaled_dot_product_attention", [q, k, k, None, None, None],
                 ["", "", "", "", "0.", "True"])
    assert g.nodes[0].op is Op.ATTENTION and g.nodes[0].attrs["causal"] is True
    assert c.flops == 4 * 8 * 128 * 128 * 64 and c.transcendentals == 8 * 128 * 128


def test_moe_grouped_mm_and_histc():
    """A recorded grouped GEMM of 48 routed rows over 8 experts [8, 64, 96] (offsets int32): exact FLOPs,
    under the default random routing (no top-k recorded: each row a token picking one expert) the expected
    8 (1 - (7/8)^48) = 7.987 experts read; histc counts the rows into 8 bins, one add each."""
    rows, off = TensorArg((48, 64), BF16), TensorArg((8,), DType.INT32)
    g, c = _cost("aten::_grouped_mm", [rows, TensorArg((8, 64, 96), BF16), off, None, None])
    assert [n.op for n in g.nodes] == [Op.GROUPED_DOT] and g.outputs[0].type.shape == (48, 96)
    assert c.flops == 2 * 48 * 64 * 96
    assert c.bytes == 2 * (48 * 64 + 48 * 96) + round(8 * (1 - (7 / 8) ** 48) * 2 * 64 * 96) + 4 * 8
    g, c = _cost("aten::histc", [TensorArg((48,), F32), None, None, None], ["", "8", "0", "7"])
    assert g.outputs[0].type.shape == (8,) and c.flops == 48


@pytest.mark.parametrize("name, concrete, out_shape", [
    ("aten::sum", ["", "[-1]", "True", ""], (4, 6, 1)),
    ("aten::mean", ["", "[0, 1]", "False", ""], (8,)),
    ("aten::amax", ["", "[1]", "False"], (4, 8)),
    ("aten::sum", ["", ""], ()),
])
def test_reductions_infer_output_shapes_from_recorded_dims(name, concrete, out_shape):
    g, c = _cost(name, [TensorArg((4, 6, 8), F32)] + [None] * (len(concrete) - 1), concrete)
    assert g.outputs[0].type.shape == out_shape and c.flops == 4 * 6 * 8


def test_layer_norm_and_softmax_use_the_rules_per_element_counts():
    x = TensorArg((4, 16), F32)
    g, c = _cost("aten::layer_norm", [x, None, TensorArg((16,), F32), TensorArg((16,), F32), None, None],
                 ["", "[16]", "", "", "1e-05", "True"])
    assert g.nodes[0].attrs["axis"] == 1 and c.flops == 7 * 64 and c.transcendentals == 4
    _, c = _cost("aten::softmax", [x, None, None], ["", "-1", ""])
    assert c.flops == 4 * 64 and c.transcendentals == 64


def test_in_place_ops_cost_as_their_base_with_the_destination_shape():
    g, c = _cost("aten::add_", [TensorArg((4, 8), F32), TensorArg((8,), F32), None], ["", "", "1"])
    assert g.outputs[0].type.shape == (4, 8) and c.flops == 32
    g, c = _cost("aten::copy_", [TensorArg((4, 8), BF16), TensorArg((4, 8), F32), None])
    assert g.nodes[0].op is Op.CAST and c.bytes == 32 * 4 + 32 * 2


def test_cat_reads_a_tensor_list_with_the_default_dtype():
    g, c = _cost("aten::cat", [[TensorArg((2, 3), None), TensorArg((2, 5), None)], None], ["", "1"])
    assert g.outputs[0].type.shape == (2, 8) and c.bytes == 2 * 16 * 4


def test_views_are_free_and_unknown_ops_are_unmapped():
    _, c = _cost("aten::transpose", [TensorArg((4, 8), F32), None, None], ["", "0", "1"])
    assert c.flops == 0 and c.bytes == 0
    assert lower_call(Call("aten::nonzero", [TensorArg((4,), F32)], [""])) is None
    assert lower_call(Call("MyModule.forward", [TensorArg((4,), F32)], [""])) is None
    assert lower_call(Call("aten::mm", [TensorArg((4, 3), F32), TensorArg((5, 2), F32)], ["", ""])) is None


def test_collectives_are_recognized_by_name():
    assert collective_kind("ncclDevKernel_AllReduce_Sum_f32_RING_LL") == (True, Op.ALL_REDUCE)
    assert collective_kind("c10d::_reduce_scatter_base_") == (True, Op.REDUCE_SCATTER)
    assert collective_kind("record_param_comms") == (True, None)
    assert collective_kind("aten::mm") == (False, None)
