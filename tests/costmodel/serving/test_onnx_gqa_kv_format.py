"""An ONNX GQA decoder's cache in another format: the attention reads the stored format's bytes.

onnxruntime's GroupQueryAttention reads its [B, kv heads, L, head dim] cache through a ``bnsh -> bsd``
layout adapter the frontend puts between the present concat and the attention; retyping only the
cache inputs and the in-place append left that view (and so the attention's read) in fp16: ``--kv
fp8_e4m3`` halved the reported cache but not decode time. Hand bytes below."""

from __future__ import annotations

import pytest

onnx = pytest.importorskip("onnx")

import numpy as np  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.costmodel.interpreter import interpret  # noqa: E402
from narrowpipe.costmodel.serving import serving_graph  # noqa: E402
from narrowpipe.costmodel.serving.formats import Formats  # noqa: E402
from narrowpipe.ir import Op  # noqa: E402

H = TensorProto.FLOAT16
HQ, HK, D = 8, 2, 32


def _decoder() -> onnx.ModelProto:
    node = helper.make_node("GroupQueryAttention", ["qkv", "", "", "past_key_values.0.key",
                                                    "past_key_values.0.value", "seqlens_k", "total"],
                            ["out", "present.0.key", "present.0.value"], domain="com.microsoft",
                            num_heads=HQ, kv_num_heads=HK)
    cache = ["batch_size", HK, "past_sequence_length", D]
    vi = [helper.make_tensor_value_info("qkv", H, ["batch_size", "sequence_length", (HQ + 2 * HK) * D]),
          helper.make_tensor_value_info("past_key_values.0.key", H, cache),
          helper.make_tensor_value_info("past_key_values.0.value", H, cache),
          helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["batch_size"]),
          helper.make_tensor_value_info("total", TensorProto.INT32, [])]
    outs = [helper.make_tensor_value_info(o, H, None) for o in ("out", "present.0.key", "present.0.value")]
    g = helper.make_graph([node], "gqa_decoder", vi, outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("kv, nbytes", [(None, 2), ("fp8_e4m3", 1)])
def test_attention_reads_the_cache_in_its_stored_format(kv, nbytes) -> None:
    """Batch 8, 1,000 cached + 1 new token: K and V each 8 x 1,001 x 2 heads x 32 values; q and the
    output 8 x 8 heads x 32 in fp16."""
    sg = serving_graph(narrowpipe.load(_decoder()), Formats.of(kv=kv))
    dims = sg.bindings(batch=8, tokens=1, past=1000)
    att = next(n for n in sg.graph.nodes if n.op is Op.ATTENTION)
    cost = interpret(sg.graph, dims).costs[att]
    kv_bytes = 2 * 8 * 1001 * HK * D * nbytes
    assert cost.bytes_read == 8 * HQ * D * 2 + kv_bytes
    assert sg.cache.bytes_per_token == 2 * HK * D * nbytes


def _rotary_decoder(rows: int) -> onnx.ModelProto:
    model = _decoder()
    node = model.graph.node[0]
    node.input.extend(["cos_cache", "sin_cache"])
    node.attribute.append(helper.make_attribute("do_rotary", 1))
    model.graph.initializer.extend(numpy_helper.from_array(np.ones((rows, D // 2), np.float16), n)
                                   for n in ("cos_cache", "sin_cache"))
    return model


def test_context_beyond_the_rotary_cache_is_refused() -> None:
    """A 16-row ``cos_cache`` runs at most 16 positions (onnxruntime: 'cos_cache dimension 0 shall not be
    less than total_sequence_length'): decode at context 15 (16 positions) runs, at 20 it is refused with
    the message the model builder's position limit gives."""
    sg = serving_graph(narrowpipe.load(_rotary_decoder(16)))
    sg.check_context(16)
    with pytest.raises(narrowpipe.NarrowpipeError, match="handles at most 16 positions; this question needs 21"):
        sg.check_context(21)


def _int4_decoder() -> onnx.ModelProto:
    """The decoder with an int4 MatMulNBits output projection (256 x 256 in blocks of 32)."""
    model = _decoder()
    model.graph.node.append(helper.make_node("MatMulNBits", ["out", "o_q4", "o_scales"], ["y"],
                                             domain="com.microsoft", K=HQ * D, N=HQ * D, bits=4, block_size=32))
    model.graph.initializer.extend([numpy_helper.from_array(np.zeros((HQ * D, HQ * D // 32, 16), np.uint8), "o_q4"),
                                    numpy_helper.from_array(np.ones(HQ * D * HQ * D // 32, np.float16), "o_scales")])
    model.graph.output.append(helper.make_tensor_value_info("y", H, None))
    return model


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "int8"])
def test_weight_format_on_an_int4_model_warns_and_is_not_reported_applied(fmt) -> None:
    """Its weights are int4 already: a weight format retypes none of them, so it warns, the serving
    formats (the report's formats line) say the model's own, and the weight bytes stay the stored
    256 x 256 / 2 codes + 2,048 fp16 scales = 36,864."""
    from narrowpipe.costmodel.serving.formats import WeightFormatWarning
    graph = narrowpipe.load(_int4_decoder())
    with pytest.warns(WeightFormatWarning, match=f"weights {fmt}: the model's weights are already quantized "
                                                 r"\(uint4 dequantized into their GEMMs\)"):
        sg = serving_graph(graph, Formats.of(weights=fmt))
    assert sg.formats.weights is None and sg.formats.to_dict()["weights"] is None
    assert sum(v.type.dtype.nbytes(v.type.numel({})) for v in sg.graph.weights) == 256 * 256 // 2 + 2048 * 2
