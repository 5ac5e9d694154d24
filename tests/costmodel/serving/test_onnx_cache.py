"""An ONNX decoder with past: its cache inputs (dim_param ``past_sequence_length``) are the KV cache."""

import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.costmodel.interpreter import interpret  # noqa: E402
from narrowpipe.costmodel.serving import serving_graph  # noqa: E402
from narrowpipe.ir import Op  # noqa: E402


def _decoder_with_past():
    past = ["batch_size", 2, "past_sequence_length", 16]
    new = ["batch_size", 2, "sequence_length", 16]
    total = ["batch_size", 2, "total_sequence_length", 16]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT16, past),
              helper.make_tensor_value_info("new_key", TensorProto.FLOAT16, new)]
    nodes = [helper.make_node("Concat", ["past_key_values.0.key", "new_key"], ["present.0.key"], axis=2)]
    outputs = [helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT16, total)]
    g = helper.make_graph(nodes, "decoder", inputs, outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_onnx_past_inputs_are_the_cache_and_appends_write_only_new_rows():
    g = narrowpipe.load(_decoder_with_past())
    sg = serving_graph(g)
    assert sg.origin == "the graph's own cache inputs"
    assert sg.cache.bytes_per_token == 2 * 16 * 2
    dims = sg.bindings(batch=4, tokens=1, past=1000)
    table = interpret(sg.graph, dims)
    cat = next(n for n in sg.graph.nodes if n.op is Op.CONCAT)
    assert table.costs[cat].bytes_read == table.costs[cat].bytes_written == 4 * 2 * 1 * 16 * 2
