"""A decoder-with-past ONNX export (transformers' legacy exporter names the dims ``past_sequence_length``
and ``total_sequence_length``) decodes with total = past + new tokens, as the model runs it: the
attention mask is not a cache tensor, and ``--mode decode`` neither binds total to the past nor
overrides a ``--set`` that disagrees with it."""

from __future__ import annotations

import argparse

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
from narrowpipe.cli_serve import apply_mode
from narrowpipe.costmodel.serving.prepare import serving_graph
from narrowpipe.errors import NarrowpipeError

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _decoder() -> onnx.ModelProto:
    """q = x Wq, k = concat(past_key, x Wk); scores = q k^T + mask (mask: [batch, total])."""
    w = [numpy_helper.from_array(np.zeros((8, 4), np.float32), n) for n in ("Wq", "Wk")]
    ax = [numpy_helper.from_array(np.array(a, np.int64), n) for n, a in (("a1", [1]), ("a12", [1, 2]))]
    nodes = [helper.make_node("MatMul", ["x", "Wq"], ["q3"]), helper.make_node("Unsqueeze", ["q3", "a1"], ["q"]),
             helper.make_node("MatMul", ["x", "Wk"], ["k3"]), helper.make_node("Unsqueeze", ["k3", "a1"], ["k"]),
             helper.make_node("Concat", ["past_key", "k"], ["present"], axis=2),
             helper.make_node("Transpose", ["present"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"]),
             helper.make_node("Cast", ["attention_mask"], ["mf"], to=F),
             helper.make_node("Unsqueeze", ["mf", "a12"], ["m4"]),
             helper.make_node("Add", ["scores", "m4"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["probs"], axis=-1)]
    inputs = [helper.make_tensor_value_info("x", F, ["batch", "sequence_length", 8]),
              helper.make_tensor_value_info("attention_mask", I64, ["batch", "total_sequence_length"]),
              helper.make_tensor_value_info("past_key", F, ["batch", 1, "past_sequence_length", 4])]
    outputs = [helper.make_tensor_value_info(n, F, None) for n in ("probs", "present")]
    g = helper.make_graph(nodes, "dec", inputs, outputs, w + ax)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_the_attention_mask_is_no_cache_tensor_and_total_is_past_plus_new() -> None:
    sg = serving_graph(narrowpipe.load(_decoder()))
    assert [t.name for t in sg.cache.tensors] == ["past_key"]
    assert sg.cache.bytes_per_token == 4 * 4          # one head of 4 fp32 per token (not + 8 B of mask)
    b = sg.bindings(1, 1, 100)
    assert (b["past_sequence_length"], b["sequence_length"], b["total_sequence_length"]) == (100, 1, 101)


def _mode(**sets: int) -> dict:
    args = argparse.Namespace(mode="decode", context=100)
    return apply_mode(narrowpipe.load(_decoder()), args, dict(sets))[1]


def test_mode_decode_binds_total_and_refuses_a_set_that_disagrees() -> None:
    assert _mode(batch=1)["total_sequence_length"] == 101
    assert _mode(batch=1, total_sequence_length=101)["total_sequence_length"] == 101
    with pytest.raises(NarrowpipeError, match="total_sequence_length=100 disagrees with --mode decode"):
        _mode(batch=1, total_sequence_length=100)


def _analyze(**dims: int) -> narrowpipe.Report:
    return narrowpipe.analyze(narrowpipe.load(_decoder()), dims={"batch": 1, "sequence_length": 1, **dims})


def test_a_plain_analysis_refuses_a_mask_shorter_than_the_cache_plus_the_new_tokens() -> None:
    """onnxruntime refuses GPT-2's decoder-with-past at total < past + 1 (its mask gather runs past the end)."""
    ok = _analyze(past_sequence_length=100, total_sequence_length=101)
    # scores q k^T over 101 keys of 4 features, plus the two projections of one token: 2*101*4 + 2 * 2*8*4
    assert ok.flops_by_group["contraction"] == 2 * 101 * 4 + 2 * 2 * 8 * 4
    with pytest.raises(NarrowpipeError, match=r"total_sequence_length=50 is shorter .* 100 \+ 1 = 101"):
        _analyze(past_sequence_length=100, total_sequence_length=50)


def test_an_onnx_broadcast_that_breaks_once_bound_names_the_node() -> None:
    """This model adds its [batch, total] mask to scores over past + 1 keys: a longer mask cannot broadcast."""
    with pytest.raises(NarrowpipeError, match=r"Add.*do not broadcast: \[1, 1, 1, 101\], \[1, 1, 1, 120\]"):
        _analyze(past_sequence_length=100, total_sequence_length=120)


def test_symbolic_dims_that_broadcast_at_one_are_accepted() -> None:
    x = helper.make_tensor_value_info("x", F, ["a", 4])
    y = helper.make_tensor_value_info("y", F, ["b", 4])
    g = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "bc", [x, y],
                          [helper.make_tensor_value_info("z", F, None)])
    m = narrowpipe.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert narrowpipe.analyze(m, dims={"a": 1, "b": 6}).flops == 6 * 4
    assert narrowpipe.analyze(m, dims={"a": 6, "b": 6}).flops == 6 * 4
    with pytest.raises(NarrowpipeError, match=r"Add_0.*do not broadcast: \[3, 4\], \[6, 4\] under these bindings"):
        narrowpipe.analyze(m, dims={"a": 3, "b": 6})
