"""Quantized ONNX models: integer contractions keep the float model's FLOPs (2*M*K*N, torch's count)
and run on integer operands, zero points are read but never subtracted over a whole operand,
onnxruntime's QOperator ops load with known output shapes, parameters are the float model's, and
malformed scales fail naming their node. Every expected number is worked out by hand below."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
from narrowpipe.errors import ShapeError
from narrowpipe.ir import DType, Op, verify

F, U8, I8, I32 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32
MS = [("com.microsoft", 1)]


def load(nodes, inputs, inits=(), opset=21, extra_opsets=(), out=None, out_type=F):
    ins = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    outs = [helper.make_tensor_value_info(out or nodes[-1].output[0], out_type, None)]
    inits = [i if isinstance(i, TensorProto) else numpy_helper.from_array(i[1], i[0]) for i in inits]
    g = helper.make_graph(nodes, "q", ins, outs, inits)
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    graph = narrowpipe.load(helper.make_model(g, opset_imports=opsets))
    verify(graph)
    return graph


def ops(graph) -> list[str]:
    return [n.op.value for n in graph.nodes]


def scalar(v, dt=np.float32):
    return np.array(v, dt)


# -- integer contractions ---------------------------------------------------------------------

def test_dynamic_quantize_matmul_is_a_u8_by_s8_integer_gemm() -> None:
    """onnxruntime's kernel: min/max of A, quantize A to uint8, u8 x s8 GEMM into int32, rescale."""
    m, k, n = 4, 8, 6
    node = helper.make_node("DynamicQuantizeMatMul", ["a", "b", "bs", "bz", "bias"], ["y"], domain="com.microsoft")
    graph = load([node], [("a", F, [m, k])], [("b", np.ones((k, n), np.int8)), ("bs", scalar(0.1)),
                                              ("bz", scalar(0, np.int8)), ("bias", np.zeros(n, np.float32))],
                 extra_opsets=MS)
    assert ops(graph) == ["reduce_max", "quantize", "dot", "dequantize", "add"]
    dot = graph.nodes[2]
    assert [v.type.dtype for v in dot.inputs[:2]] == [DType.UINT8, DType.INT8]
    assert dot.outputs[0].type.dtype is DType.INT32 and dot.attrs["zero_points"] == ("rhs",)
    r = narrowpipe.analyze(graph)
    assert r.flops_by_group["contraction"] == 2 * m * k * n
    assert graph.outputs[0].type.dtype is DType.FP32 and graph.outputs[0].type.shape == (m, n)


def test_zero_points_are_read_by_the_integer_gemm_not_subtracted() -> None:
    """MatMulInteger [M, K] u8 x [K, N] s8 with both zero points: one DOT reading A, B and the two
    1-byte zero points, writing int32 [M, N]; no A - za or W - zw pass (it would add M*K + K*N
    FLOPs and a read and write of each operand)."""
    m, k, n = 64, 256, 128
    graph = load([helper.make_node("MatMulInteger", ["a", "w", "az", "wz"], ["y"])], [("a", U8, [m, k])],
                 [("w", np.zeros((k, n), np.int8)), ("az", scalar(128, np.uint8)), ("wz", scalar(0, np.int8))],
                 out_type=I32)
    assert ops(graph) == ["dot"] and graph.nodes[0].attrs["zero_points"] == ("lhs", "rhs")
    r = narrowpipe.analyze(graph)
    assert r.flops == 2 * m * k * n
    assert r.bytes == m * k + k * n + 1 + 1 + 4 * m * n


@pytest.mark.parametrize("kind", ["ConvInteger", "QLinearConv"])
def test_integer_convolutions_read_their_zero_points(kind: str) -> None:
    """A 3x3 conv, 16 -> 32 channels on 28x28, padded: torch's count 2*N*Cout*Cin*9*H*W."""
    c, o, h = 16, 32, 28
    w = ("w", np.zeros((o, c, 3, 3), np.int8))
    wz = ("wz", np.zeros(o, np.int8))
    xz = ("xz", scalar(128, np.uint8))
    if kind == "ConvInteger":
        node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1])
        inits, out_type = [w, xz, wz], I32
    else:
        node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], pads=[1, 1, 1, 1])
        inits = [w, xz, wz, ("xs", scalar(0.1)), ("ws", np.full(o, 0.01, np.float32)), ("ys", scalar(0.2)),
                 ("yz", scalar(128, np.uint8))]
        out_type = U8
    graph = load([node], [("x", U8, [1, c, h, h])], inits, out_type=out_type)
    assert "sub" not in ops(graph)
    conv = next(n for n in graph.nodes if n.op is Op.CONV)
    assert conv.attrs["zero_points"] == ("lhs", "rhs") and len(conv.inputs) == 4
    r = narrowpipe.analyze(graph)
    assert r.flops_by_group["convolution"] == 2 * 1 * o * c * 9 * h * h
    assert r.params == o * c * 9          # the per-channel weight scale is not a parameter


# -- QOperator ops (quantize_static's QOperator format) ----------------------------------------

@pytest.mark.parametrize("requantize", [True, False])
def test_qgemm_is_an_integer_gemm_with_bias_then_requantize(requantize: bool) -> None:
    m, k, n = 4, 16, 8
    names = ["a", "as", "az", "w", "ws", "wz", "c"] + (["ys", "yz"] if requantize else [])
    qgemm = helper.make_node("QGemm", names, ["q"], domain="com.microsoft", transB=1)
    tail = [helper.make_node("DequantizeLinear", ["q", "ys", "yz"], ["y"])] if requantize else []
    inits = [("as", scalar(0.1)), ("az", scalar(128, np.uint8)), ("w", np.ones((n, k), np.int8)),
             ("ws", np.full(n, 0.02, np.float32)), ("wz", np.zeros(n, np.int8)), ("c", np.zeros(n, np.int32)),
             ("ys", scalar(0.3)), ("yz", scalar(128, np.uint8))]
    graph = load([qgemm, *tail], [("a", U8, [m, k])], inits, extra_opsets=MS)
    q = next(n for n in graph.nodes if n.op is Op.DOT)
    assert q.outputs[0].type.dtype is DType.INT32 and q.attrs["rhs_contract"] == (1,)
    assert ops(graph)[:3] == ["dot", "add", "quantize" if requantize else "dequantize"]
    assert graph.outputs[0].type.shape == (m, n)
    r = narrowpipe.analyze(graph)
    assert r.flops_by_group["contraction"] == 2 * m * k * n
    assert r.params == n * k + n       # the weight and the int32 bias; scales and zero points are not


def _qlinear(op: str, data: list[str], attrs: dict, x_shape: list[int], extra_inputs=()):
    """x (uint8) -> QLinear op -> DequantizeLinear: the graph and its report."""
    node = helper.make_node(op, data, ["q"], domain="com.microsoft", **attrs)
    dq = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])
    inits = [("s", scalar(0.1)), ("z", scalar(128, np.uint8))]
    graph = load([node, dq], [("x", U8, x_shape), *extra_inputs], inits, extra_opsets=MS)
    return graph, narrowpipe.analyze(graph)


def test_qlinear_softmax_pools_reduce_concat_where_have_known_shapes() -> None:
    b, c, h = 2, 3, 8
    g, r = _qlinear("QLinearSoftmax", ["x", "s", "z", "s", "z"], {"axis": -1, "opset": 13}, [b, c, h])
    assert g.outputs[0].type.shape == (b, c, h) and Op.SOFTMAX in [n.op for n in g.nodes]
    g, r = _qlinear("QLinearGlobalAveragePool", ["x", "s", "z", "s", "z"], {"channels_last": 0}, [b, c, h, h])
    assert g.outputs[0].type.shape == (b, c, 1, 1) and r.flops_by_group["pooling" if "pooling" in
                                                                        r.flops_by_group else "other"] >= 0
    g, _ = _qlinear("QLinearAveragePool", ["x", "s", "z", "s", "z"], {"kernel_shape": [2, 2], "strides": [2, 2]},
                    [b, c, h, h])
    assert g.outputs[0].type.shape == (b, c, h // 2, h // 2)
    g, _ = _qlinear("QLinearReduceMean", ["x", "s", "z", "s", "z"], {"axes": [1], "keepdims": 0}, [b, c, h])
    assert g.outputs[0].type.shape == (b, h)
    g, _ = _qlinear("QLinearConcat", ["s", "z", "x", "s", "z", "x", "s", "z"], {"axis": 1}, [b, c, h])
    assert g.outputs[0].type.shape == (b, 2 * c, h) and ops(g)[0] == "concat"
    g, _ = _qlinear("QLinearWhere", ["m", "x", "s", "z", "x", "s", "z", "s", "z"], {}, [b, c, h],
                    extra_inputs=[("m", TensorProto.BOOL, [c, h])])
    assert g.outputs[0].type.shape == (b, c, h) and ops(g)[0] == "where"


# -- parameters --------------------------------------------------------------------------------

def test_quantization_scales_are_not_parameters_but_are_weight_bytes() -> None:
    """A QDQ MatMul with a per-column scale [N] and zero point: the float model has K*N parameters."""
    k, n = 32, 16
    graph = load([helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wf"], axis=1),
                  helper.make_node("MatMul", ["x", "wf"], ["y"])], [("x", F, [2, k])],
                 [("w", np.ones((k, n), np.int8)), ("s", np.full(n, 0.1, np.float32)), ("z", np.zeros(n, np.int8))])
    r = narrowpipe.analyze(graph)
    assert r.params == k * n
    assert r.weight_bytes == k * n + 4 * n + n


def test_a_gathered_8bit_table_is_a_parameter_an_int64_table_is_not() -> None:
    """quantize_dynamic stores an embedding as uint8 [V, D] read by Gather, dequantized after it."""
    v, d = 50, 8
    graph = load([helper.make_node("Gather", ["t", "ids"], ["e"]),
                  helper.make_node("DequantizeLinear", ["e", "s", "z"], ["y"]),
                  helper.make_node("Gather", ["lut", "ids"], ["pos"])],
                 [("ids", TensorProto.INT64, [3])],
                 [("t", np.ones((v, d), np.uint8)), ("s", scalar(0.1)), ("z", scalar(128, np.uint8)),
                  ("lut", np.arange(64, dtype=np.int64))], out="y")
    assert narrowpipe.analyze(graph).params == v * d


def _quantize(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(x / scale), -127, 127).astype(np.int8)


@pytest.mark.parametrize("tied", [True, False])
def test_a_tied_lm_head_is_found_through_dequantize_linear(tied: bool) -> None:
    """GPT-2 QDQ: the table int8 per tensor, the LM head's copy (wte.T) int8 per column; one parameter
    set of V*D when the copy holds the table's values, two when it does not."""
    v, d = 100, 16
    rng = np.random.default_rng(1)
    table = rng.normal(size=(v, d)).astype(np.float32)
    head = table.T if tied else rng.normal(size=(d, v)).astype(np.float32)
    ts = np.float32(np.abs(table).max() / 127)
    hs = (np.abs(head).max(axis=0) / 127).astype(np.float32)
    nodes = [helper.make_node("DequantizeLinear", ["tq", "ts"], ["tf"]),
             helper.make_node("Gather", ["tf", "ids"], ["h"]),
             helper.make_node("DequantizeLinear", ["hq", "hs"], ["hf"], axis=1),
             helper.make_node("MatMul", ["h", "hf"], ["y"])]
    graph = load(nodes, [("ids", TensorProto.INT64, [2, 5])],
                 [("tq", _quantize(table, ts)), ("ts", np.array(ts)), ("hq", _quantize(head, hs)), ("hs", hs)])
    assert narrowpipe.analyze(graph).params == (v * d if tied else 2 * v * d)


def test_an_identity_of_a_dequantized_weight_is_its_own_parameter() -> None:
    """The legacy exporter dedups byte-identical parameters (zero biases) and re-exposes each copy
    through an Identity; in a QDQ model the Identity reads the shared weight's DequantizeLinear."""
    n = 24
    nodes = [helper.make_node("DequantizeLinear", ["bq", "s"], ["b"]), helper.make_node("Identity", ["b"], ["b2"]),
             helper.make_node("Add", ["x", "b"], ["t"]), helper.make_node("Add", ["t", "b2"], ["y"])]
    graph = load(nodes, [("x", F, [n])], [("bq", np.arange(n, dtype=np.int32)), ("s", scalar(0.5))])
    assert narrowpipe.analyze(graph).params == 2 * n


# -- 2-bit weights -------------------------------------------------------------------------------

@pytest.mark.parametrize("code", [TensorProto.INT2, TensorProto.UINT2])
def test_int2_initializers_hold_four_values_a_byte(code: int) -> None:
    k, n = 256, 128
    w = helper.make_tensor("w", code, [k, n], bytes(k * n // 4), raw=True)
    graph = load([helper.make_node("DequantizeLinear", ["w", "s"], ["wf"]),
                  helper.make_node("MatMul", ["x", "wf"], ["y"])], [("x", F, [2, k])], [w, ("s", scalar(0.1))],
                 opset=25)
    r = narrowpipe.analyze(graph)
    assert r.params == k * n and r.weight_bytes == k * n // 4 + 4
    assert graph.weights[0].type.dtype is (DType.INT2 if code == TensorProto.INT2 else DType.UINT2)


def test_matmul_nbits_with_two_bits_unpacks_four_weights_a_byte() -> None:
    k, n, block = 128, 64, 32
    node = helper.make_node("MatMulNBits", ["a", "w", "s"], ["y"], domain="com.microsoft", K=k, N=n, bits=2,
                            block_size=block)
    graph = load([node], [("a", F, [1, k])], [("w", np.zeros((n, k // block, block // 4), np.uint8)),
                                              ("s", np.ones(n * k // block, np.float32))], extra_opsets=MS)
    w = next(v for v in graph.weights if v.name == "w")
    assert w.type.dtype is DType.UINT2 and w.type.shape == (n, k // block, block)
    assert narrowpipe.analyze(graph).params == n * k


# -- malformed scales ------------------------------------------------------------------------------

@pytest.mark.parametrize("scale_shape,attrs,ok", [
    ([9, 128], {"axis": 0, "block_size": 30}, True),     # ceil(256 / 30) = 9 blocks
    ([3, 128], {"axis": 0, "block_size": 30}, False),
    ([128], {"axis": 1}, True),
    ([135], {"axis": 1}, False),                         # a per-axis scale of N + 7 on an axis of N
])
def test_malformed_scales_fail_naming_the_node(scale_shape, attrs, ok) -> None:
    k, n = 256, 128
    nodes = [helper.make_node("DequantizeLinear", ["w", "s"], ["wf"], name="dq_w", **attrs),
             helper.make_node("MatMul", ["x", "wf"], ["y"])]
    inits = [("w", np.zeros((k, n), np.int8)), ("s", np.ones(scale_shape, np.float32))]
    if ok:
        load(nodes, [("x", F, [2, k])], inits)
        return
    with pytest.raises(ShapeError, match="dq_w"):
        load(nodes, [("x", F, [2, k])], inits)
