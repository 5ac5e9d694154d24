"""The ONNX frontend tags dim_params with roles by their names and by where they sit in the inputs."""

from __future__ import annotations

from onnx import TensorProto, helper

import narrowpipe
from narrowpipe.ir import DimRole, Sym


def _model(inputs: list[tuple[str, int, list]]) -> object:
    nodes = [helper.make_node("Identity", [name], [f"{name}_out"]) for name, _, _ in inputs]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(f"{n}_out", t, s) for n, t, s in inputs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_decoder_inputs_with_past_key_values():
    m = _model([("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
                ("attention_mask", TensorProto.INT64, ["batch_size", "past_sequence_length + sequence_length"]),
                ("past_key_values.0.key", TensorProto.FLOAT, ["batch_size", 2, "past_sequence_length", 8])])
    g = narrowpipe.load(m)
    roles = {n: s.role for n, s in g.dims.items()}
    assert roles == {"batch_size": DimRole.BATCH, "sequence_length": DimRole.SEQUENCE,
                     "past_sequence_length": DimRole.KV_LENGTH}
    assert g.inputs[1].shape[1] == Sym("sequence_length") + Sym("past_sequence_length")


def test_names_that_say_nothing_get_the_role_of_their_position():
    m = _model([("input_ids", TensorProto.INT64, ["d0", "d1"]),
                ("pixel_values", TensorProto.FLOAT, ["N", 3, "H", "W"]),
                ("past_key", TensorProto.FLOAT, ["d0", 2, "P", 8])])
    g = narrowpipe.load(m)
    assert set(g.dims_with_role(DimRole.BATCH)) == {"d0", "N"}
    assert g.dims_with_role(DimRole.SEQUENCE) == ["d1"]
    assert g.dims_with_role(DimRole.KV_LENGTH) == ["P"]
    assert set(g.dims_with_role(DimRole.OTHER)) == {"H", "W"}
    assert g.role_size(DimRole.BATCH, {"d0": 2, "N": 3, "d1": 1, "H": 1, "W": 1, "P": 1}) == 6
