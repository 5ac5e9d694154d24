"""The verifier holds convolutions, pools and channel norms to their operands.

The window arithmetic is checked against torch's own shape functions on the meta device (an
independent reference): every output torch gives is accepted, one position more or less is refused.
The edited-file cases are the QA report's: ResNet-50's first conv with a 6-channel weight over a
3-channel image, and the same conv at stride 1 still claiming a 112x112 output.
"""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

import narrowpipe
from narrowpipe.errors import ModelLoadError, ShapeError
from narrowpipe.ir import DType, Graph, Op, Sym, TensorType, ValueKind, graph_to_dict, problems, verify
from narrowpipe.models.examples import load_example

F32 = DType.FP32


def _t(*shape: object) -> TensorType:
    return TensorType(F32, tuple(Sym(d) if isinstance(d, str) else d for d in shape))


def _conv(x: tuple, w: tuple, y: tuple, **attrs: Any) -> Graph:
    g = Graph("conv")
    xv = g.add_input("x", _t(*x))
    wv = g.add_input("w", _t(*w), ValueKind.PARAM)
    n = len(w) - 2
    a = {"stride": (1,) * n, "padding": (0,) * n, "dilation": (1,) * n, "groups": 1, "transposed": False, **attrs}
    g.set_outputs(g.add_node(Op.CONV, [xv, wv], [_t(*y)], a, name="conv").outputs)
    return g


def _pool(x: tuple, y: tuple, **attrs: Any) -> Graph:
    g = Graph("pool")
    xv = g.add_input("x", _t(*x))
    g.set_outputs(g.add_node(Op.POOL, [xv], [_t(*y)], {"kind": "max", **attrs}, name="pool").outputs)
    return g


# -- the window arithmetic against torch ----------------------------------------------------------

def test_conv_outputs_are_torchs_and_one_position_off_is_refused():
    torch = pytest.importorskip("torch")
    f = torch.nn.functional
    for size, k, s, p, d in itertools.product((7, 8, 9), (1, 3, 4), (1, 2, 3), (0, 1, 2), (1, 2)):
        if size + 2 * p < d * (k - 1) + 1:
            continue
        y = f.conv2d(torch.empty(2, 4, size, size + 1, device="meta"), torch.empty(6, 2, k, k, device="meta"),
                     stride=s, padding=p, dilation=d, groups=2).shape
        attrs = {"stride": (s, s), "padding": (p, p), "dilation": (d, d), "groups": 2}
        assert problems(_conv((2, 4, size, size + 1), (6, 2, k, k), tuple(y), **attrs)) == [], (size, k, s, p, d)
        off = (*y[:3], y[3] + 1)
        assert any("output spatial dims" in m for m in problems(_conv((2, 4, size, size + 1), (6, 2, k, k), off,
                                                                        **attrs)))


def test_transposed_conv_outputs_are_torchs():
    torch = pytest.importorskip("torch")
    f = torch.nn.functional
    for size, k, s, p, d, op in itertools.product((3, 5), (1, 3), (1, 2, 3), (0, 1), (1, 2), (0, 1)):
        if op >= max(s, d):
            continue   # torch: output padding must be smaller than stride or dilation
        y = f.conv_transpose1d(torch.empty(1, 4, size, device="meta"), torch.empty(4, 3, k, device="meta"),
                               stride=s, padding=p, output_padding=op, dilation=d, groups=2).shape
        attrs = {"stride": (s,), "padding": (p,), "dilation": (d,), "groups": 2, "transposed": True,
                 "output_padding": (op,)}
        assert tuple(y[:2]) == (1, 6)
        assert problems(_conv((1, 4, size), (4, 3, k), tuple(y), **attrs)) == [], (size, k, s, p, d, op)
        assert problems(_conv((1, 4, size), (4, 3, k), (1, 6, y[2] - 1), **attrs)) != []


def test_pool_outputs_are_torchs_with_and_without_ceil_mode():
    torch = pytest.importorskip("torch")
    f = torch.nn.functional
    for size, k, s, p, ceil in itertools.product((5, 6, 7, 112), (2, 3), (1, 2, 3), (0, 1), (False, True)):
        if p > k // 2:
            continue   # torch: pad at most half the kernel
        y = f.max_pool2d(torch.empty(1, 3, size, size, device="meta"), k, s, p, ceil_mode=ceil).shape
        attrs = {"kernel": (k, k), "stride": (s, s), "padding": (p, p), "dilation": (1, 1), "ceil_mode": ceil}
        assert problems(_pool((1, 3, size, size), tuple(y), **attrs)) == [], (size, k, s, p, ceil)
        assert problems(_pool((1, 3, size, size), (1, 3, y[2] - 1, y[3]), **attrs)) != []
        if not ceil:   # with ceil_mode, ONNX's reference keeps the last window torch drops: one more is fine
            assert problems(_pool((1, 3, size, size), (1, 3, y[2] + 1, y[3]), **attrs)) != []


# -- convolutions ---------------------------------------------------------------------------------

def test_channels_groups_and_batch_are_checked():
    assert problems(_conv(("n", 3, 8, 8), (16, 3, 3, 3), ("n", 16, 6, 6))) == []
    assert any("input has 3 channels but weight [16, 6, 3, 3] with groups=1 expects 6" in m
               for m in problems(_conv(("n", 3, 8, 8), (16, 6, 3, 3), ("n", 16, 6, 6))))
    assert any("output has 8 channels" in m for m in problems(_conv((1, 3, 8, 8), (16, 3, 3, 3), (1, 8, 6, 6))))
    assert any("does not split into groups=3" in m
               for m in problems(_conv((1, 6, 8, 8), (16, 2, 3, 3), (1, 16, 6, 6), groups=3)))
    assert any("output batch 2" in m for m in problems(_conv((1, 3, 8, 8), (16, 3, 3, 3), (2, 16, 6, 6))))


@pytest.mark.parametrize("attrs, needle", [
    ({"stride": (0, 1)}, "stride [0, 1] has a value below 1"),
    ({"dilation": (0, 0)}, "dilation [0, 0] has a value below 1"),
    ({"padding": (-1, -1)}, "padding [-1, -1] has a value below 0"),
    ({"stride": (1, 1, 1)}, "stride [1, 1, 1] has 3 values for 2 spatial dims"),
    ({"padding": (1, 1, 1)}, "padding [1, 1, 1] has 3 values"),
    ({"groups": 0}, "groups 0 is not a positive integer"),
    ({"padding": "full"}, "padding 'full' is neither 'same' nor 'valid'"),
])
def test_attributes_no_program_has_are_refused(attrs, needle):
    assert any(needle in m for m in problems(_conv((1, 4, 8, 8), (4, 4, 3, 3), (1, 4, 6, 6), **attrs)))


def test_padding_modes_and_begin_end_pads():
    # torch "same": output = input; ONNX SAME_UPPER at stride 2: ceil(9 / 2) = 5; pads (0,1 | 2,1): 9+2-2 = 9, 8+2-2 = 8
    assert problems(_conv((1, 4, 9, 9), (4, 4, 3, 3), (1, 4, 9, 9), padding="same")) == []
    assert problems(_conv((1, 4, 9, 9), (4, 4, 3, 3), (1, 4, 5, 5), stride=(2, 2), auto_pad="SAME_UPPER")) == []
    assert problems(_conv((1, 4, 9, 8), (4, 4, 3, 3), (1, 4, 9, 8), padding=(0, 1, 2, 1))) == []
    assert problems(_conv((1, 4, 9, 9), (4, 4, 3, 3), (1, 4, 8, 8), padding=(0, 1, 2, 1))) != []
    # ONNX ConvTranspose with output_shape: the pads follow from it, the output is what it states
    assert problems(_conv((1, 4, 3, 3), (4, 2, 3, 3), (1, 2, 10, 8), transposed=True, stride=(3, 2),
                          output_padding=(0, 0), output_shape=(10, 8))) == []


def test_an_empty_output_is_refused_and_symbolic_sizes_are_not_guessed():
    assert any("would have size 0" in m for m in problems(_conv((1, 4, 4), (4, 4, 5), (1, 4, 0))))
    # seq - 4 is what a kernel of 5 gives; seq - 3 certainly is not; a fresh symbol might be
    assert problems(_conv(("b", 4, "seq"), (4, 4, 5), ("b", 4, "seq - 4"))) == []
    assert problems(_conv(("b", 4, "seq"), (4, 4, 5), ("b", 4, "seq - 3"))) != []
    assert problems(_conv(("b", 4, "seq"), (4, 4, 5), ("b", 4, "out"))) == []


def test_gradients_are_checked_as_the_forward_conv():
    from narrowpipe.ir.window_checks import window_problems
    # forward: x [2, 4, 8, 8] * w [6, 4, 3, 3], stride 2 -> y [2, 6, 3, 3] (floor(5 / 2) + 1: a row of x unused)
    base = {"stride": (2, 2), "padding": (0, 0), "dilation": (1, 1), "groups": 1}
    x, w, y = (2, 4, 8, 8), (6, 4, 3, 3), (2, 6, 3, 3)
    assert window_problems(Op.CONV, {**base, "transposed": True, "role": "grad_input"}, [y, w], [x]) == []
    assert window_problems(Op.CONV, {**base, "transposed": False, "role": "grad_weight"}, [x, y], [w]) == []
    assert window_problems(Op.CONV, {**base, "transposed": True, "role": "grad_input"}, [y, w], [(2, 4, 9, 9)]) != []
    assert window_problems(Op.CONV, {**base, "transposed": False, "role": "grad_weight"}, [x, y],
                           [(6, 4, 5, 5)]) != []


# -- pools and norms ------------------------------------------------------------------------------

def test_pools_keep_leading_dims_and_global_pools_leave_ones():
    attrs = {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1)}   # ResNet's stem pool: 112 -> 56
    assert problems(_pool(("n", 64, 112, 112), ("n", 64, 56, 56), **attrs)) == []
    assert problems(_pool(("n", 64, 112, 112), ("n", 64, 55, 55), **attrs)) != []
    assert problems(_pool(("n", 64, 112, 112), ("n", 32, 56, 56), **attrs)) != []
    # torch's adaptive pools state no stride: only the leading dims are checked
    assert problems(_pool((1, 64, 7, 7), (1, 64, 1, 1), kernel=(7, 7))) == []
    assert problems(_pool((1, 64, 7, 7), (1, 64, 1, 1), global_pool=True)) == []
    assert problems(_pool((1, 64, 7, 7), (1, 64, 7, 1), global_pool=True)) != []
    assert problems(_pool((1, 7, 7, 64), (1, 1, 1, 64), global_pool=True, channels_last=True)) == []


def _norm(op: Op, x: tuple, params: list[tuple], **attrs: Any) -> Graph:
    g = Graph("norm")
    xv = g.add_input("x", _t(*x))
    ps = [g.add_input(f"p{i}", _t(*s), ValueKind.PARAM) for i, s in enumerate(params)]
    g.set_outputs(g.add_node(op, [xv, *ps], [_t(*x)], attrs, name="norm").outputs)
    return g


def test_channel_norms_have_one_parameter_per_channel_and_groups_divide_channels():
    assert problems(_norm(Op.BATCH_NORM, ("n", 64, 7, 7), [(64,)] * 4)) == []
    assert any("not one value per channel [64]" in m for m in problems(_norm(Op.BATCH_NORM, (1, 64, 7, 7), [(32,)])))
    assert problems(_norm(Op.GROUP_NORM, (1, 64, 7, 7), [(64,), (64,)], num_groups=8)) == []
    assert problems(_norm(Op.GROUP_NORM, (1, 64, 7, 7), [(8,), (8,)], num_groups=8)) == []   # ONNX opset 18
    assert any("do not split into num_groups=5" in m
               for m in problems(_norm(Op.GROUP_NORM, (1, 64, 7, 7), [(64,)], num_groups=5)))
    assert problems(_norm(Op.INSTANCE_NORM, (1, 64, 7, 7), [(63,)])) != []


# -- the QA report's edited ResNet-50 -----------------------------------------------------------

def _resnet_with(tmp_path: Path, edit) -> str:
    d = copy.deepcopy(graph_to_dict(load_example("resnet50")))
    edit(d)
    path = tmp_path / "resnet50.json"
    path.write_text(json.dumps(d))
    return str(path)


def _first_conv(d: dict) -> dict:
    return next(n for n in d["nodes"] if n["op"] == "conv")


def test_an_edited_conv_weight_is_a_load_error(tmp_path):
    def six_channels(d):
        w = _first_conv(d)["inputs"][1]
        entry = next(v for v in d["weights"] if v["name"] == w)
        assert entry["shape"] == [64, 3, 7, 7]
        entry["shape"] = [64, 6, 7, 7]
    expects = r"input has 3 channels but weight \[64, 6, 7, 7\] with groups=1 expects 6"
    with pytest.raises(ModelLoadError, match=expects):
        narrowpipe.load(_resnet_with(tmp_path, six_channels))


def test_an_edited_conv_stride_is_a_load_error(tmp_path):
    def stride_one(d):
        conv = _first_conv(d)
        assert conv["attrs"]["stride"] == [2, 2] and conv["outputs"][0]["shape"][2:] == [112, 112]
        conv["attrs"]["stride"] = [1, 1]
    # (224 + 2*3 - 7) // 1 + 1 = 224
    with pytest.raises(ModelLoadError, match=r"output spatial dims \[112, 112\] are not \[224, 224\]"):
        narrowpipe.load(_resnet_with(tmp_path, stride_one))


def test_the_same_edit_in_memory_is_found_by_problems():
    g = load_example("resnet50")
    conv = next(n for n in g.nodes if n.op is Op.CONV)
    verify(g)
    w = conv.inputs[1]
    assert w is not None
    w.type = TensorType(w.dtype, (64, 6, 7, 7))
    assert any("expects 6" in m for m in problems(g))


def test_a_conv_bound_to_an_empty_output_is_a_shape_error():
    """Conv1d kernel 5 over seq: seq - 4 outputs, 2 * 4 * 4 * 5 FLOPs each at batch 1."""
    g = _conv(("b", 4, "seq"), (4, 4, 5), ("b", 4, "seq - 4"))
    assert narrowpipe.analyze(g, dims={"b": 1, "seq": 6}).flops == 2 * 4 * 4 * 5 * 2
    with pytest.raises(ShapeError, match="would have size 0"):
        narrowpipe.analyze(g, dims={"b": 1, "seq": 4})
