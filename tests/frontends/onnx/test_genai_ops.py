"""Ops and initializers of onnxruntime GenAI-style int4 decoders, counted as the source model:
MatMulNBits with a padded last block, GatherBlockQuantized with a uint8-packed 4-bit table, rotary
cos/sin caches (buffers, not parameters) and a default-domain SimplifiedLayerNormalization without
value_info. Expected numbers are worked out by hand from the op specs (onnxruntime's
docs/ContribOperators.md)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.errors import NarrowpipeError  # noqa: E402
from narrowpipe.ir import DType, Op, ValueKind, from_json, to_json, verify  # noqa: E402

H = TensorProto.FLOAT16
OPSETS = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]


def _model(nodes, inputs, inits, out="y"):
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(out, H, None)], inits)
    return helper.make_model(g, opset_imports=OPSETS, ir_version=10)


def _nbits(k: int, n: int, block: int):
    blocks = -(-k // block)
    w = numpy_helper.from_array(np.zeros((n, blocks, block // 2), np.uint8), "w_q4")
    s = numpy_helper.from_array(np.full(n * blocks, 0.01, np.float16), "w_scales")
    node = helper.make_node("MatMulNBits", ["x", "w_q4", "w_scales"], ["y"], domain="com.microsoft",
                            K=k, N=n, bits=4, block_size=block)
    return _model([node], [helper.make_tensor_value_info("x", H, ["batch", k])], [w, s])


@pytest.mark.parametrize("k, block", [(320, 128), (256, 128), (320, 32)])
def test_matmul_nbits_params_are_n_by_k_and_bytes_what_is_stored(k, block) -> None:
    """N=64: parameters N x K (the padded codes of a last partial block are no weights of the model);
    weight bytes what the file stores: N x blocks x block / 2 code bytes (K=320 in blocks of 128: 3
    blocks, 384 codes a row) plus N x blocks fp16 scales."""
    n = 64
    blocks = -(-k // block)
    graph = narrowpipe.load(_nbits(k, n, block))
    verify(graph)
    r = narrowpipe.analyze(graph, dims={"batch": 4})
    assert r.params == n * k
    assert r.weight_bytes == n * blocks * block // 2 + n * blocks * 2
    assert r.flops_by_group["contraction"] == 2 * 4 * k * n
    back = from_json(to_json(graph))
    assert narrowpipe.analyze(back, dims={"batch": 4}).params == n * k
    assert narrowpipe.analyze(back, dims={"batch": 4}).weight_bytes == r.weight_bytes


@pytest.mark.parametrize("dt, shape", [(TensorProto.UINT8, [1000, 128]), (TensorProto.UINT4, [1000, 256])])
def test_gather_block_quantized_4bit_table_params_are_its_entries(dt, shape) -> None:
    """A 1000 x 256 table of 4-bit codes (bytes 1000 x 128 when uint8-packed) in blocks of 32: 256,000
    parameters either way; bytes 128,000 of codes + 1000 x 8 fp16 scales = 144,000."""
    raw = np.zeros(1000 * 128, np.uint8).tobytes()
    data = helper.make_tensor("emb_q", dt, shape, raw, raw=True)
    scales = numpy_helper.from_array(np.full((1000, 8), 0.01, np.float16), "emb_s")
    node = helper.make_node("GatherBlockQuantized", ["emb_q", "ids", "emb_s"], ["y"], domain="com.microsoft",
                            block_size=32, bits=4, gather_axis=0, quantize_axis=1)
    graph = narrowpipe.load(_model([node], [helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", "s"])],
                                   [data, scales]))
    r = narrowpipe.analyze(graph, dims={"b": 1, "s": 3})
    assert (r.params, r.weight_bytes) == (256_000, 144_000)
    assert next(v for v in graph.weights if v.name == "emb_q").type.dtype is DType.UINT4


def test_gqa_rotary_caches_are_buffers() -> None:
    """GenAI's ``cos_cache``/``sin_cache`` [max positions, head_dim / 2] are tables computed from the
    positions (torch's ``cos_cached`` buffers), not parameters: none of the model's 0 parameters."""
    node = helper.make_node("GroupQueryAttention", ["qkv", "", "", "", "", "seqlens_k", "total", "cos_cache",
                                                    "sin_cache"], ["y"], domain="com.microsoft",
                            num_heads=8, kv_num_heads=2, do_rotary=1)
    caches = [numpy_helper.from_array(np.ones((64, 16), np.float16), n) for n in ("cos_cache", "sin_cache")]
    ins = [helper.make_tensor_value_info("qkv", H, ["b", "s", 384]),
           helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["b"]),
           helper.make_tensor_value_info("total", TensorProto.INT32, [])]
    graph = narrowpipe.load(_model([node], ins, caches))
    assert {v.name: v.kind for v in graph.weights} == {"cos_cache": ValueKind.BUFFER, "sin_cache": ValueKind.BUFFER}
    assert narrowpipe.analyze(graph, dims={"b": 1, "s": 4}).params == 0


def test_default_domain_simplified_layer_norm_without_value_info() -> None:
    """onnxruntime registers SimplifiedLayerNormalization in the ONNX domain (GenAI's builder writes it
    there); without value_info its output is the input's shape and type, an RMS norm over the last axis."""
    g = numpy_helper.from_array(np.ones(64, np.float16), "gamma")
    w = numpy_helper.from_array(np.zeros((64, 32), np.float16), "w")
    nodes = [helper.make_node("SimplifiedLayerNormalization", ["x", "gamma"], ["n"], epsilon=1e-5, axis=-1),
             helper.make_node("MatMul", ["n", "w"], ["y"])]
    graph = narrowpipe.load(_model(nodes, [helper.make_tensor_value_info("x", H, ["b", 64])], [g, w]))
    norm = next(nd for nd in graph.nodes if nd.op is Op.RMS_NORM)
    assert norm.outputs[0].type.dtype is DType.FP16 and norm.attrs["axis"] == 1
    assert narrowpipe.analyze(graph, dims={"b": 2}).flops_by_group["contraction"] == 2 * 2 * 64 * 32


def test_default_domain_skip_simplified_layer_norm_is_not_taken_for_the_contrib_op() -> None:
    """SkipSimplifiedLayerNormalization exists only in com.microsoft (onnxruntime rejects it in the ONNX
    domain as an invalid model): typed or not, it is refused as no ai.onnx operator."""
    nodes = [helper.make_node("SkipSimplifiedLayerNormalization", ["x", "x", "gamma"], ["y"], epsilon=1e-5)]
    g = numpy_helper.from_array(np.ones(64, np.float16), "gamma")
    x = helper.make_tensor_value_info("x", H, ["b", 64])
    with pytest.raises(NarrowpipeError, match="SkipSimplifiedLayerNormalization is not an ai.onnx operator"):
        narrowpipe.analyze(narrowpipe.load(_model(nodes, [x], [g])), dims={"b": 2})
    typed = _model(nodes, [x], [g])
    typed.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", H, ["b", 64]))
    with pytest.raises(NarrowpipeError, match="is not an ai.onnx operator"):
        narrowpipe.load(typed)
