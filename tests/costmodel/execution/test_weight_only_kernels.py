"""Weight-only quantized GEMMs: a stored weight's dequantization runs inside its GEMM.

ONNX Runtime's ``MatMulNBits`` (the int4 format of onnxruntime-genai models) and a QDQ model's
``DequantizeLinear`` on an initializer lower to a DEQUANTIZE feeding a DOT. The kernels that run them
(ORT's MatMulNBits, Marlin, TensorRT-LLM's weight-only GEMMs) dequantize tiles in registers, so the
kernel reads the narrow weight and its scales and the wide weight is never written: one kernel, its
bytes by hand below, no activation for the dequantized weight. An activation's dequantization is an
op of its own.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
from narrowpipe.costmodel.execution import TimingOptions
from narrowpipe.costmodel.execution.gemm import kernel_gemms
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.timing import fused_program
from narrowpipe.ir import verify

K, N, BLOCK = 4096, 4096, 32


def _model(nodes, inputs, out, inits, ms: bool = False) -> narrowpipe.Graph:
    g = helper.make_graph(nodes, "q", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT16, None)],
                          [numpy_helper.from_array(a, n) for n, a in inits])
    opsets = [helper.make_opsetid("", 21)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    graph = narrowpipe.load(helper.make_model(g, opset_imports=opsets))
    verify(graph)
    return graph


def _matmul_nbits() -> narrowpipe.Graph:
    blocks = K // BLOCK
    node = helper.make_node("MatMulNBits", ["a", "w", "s"], ["y"], domain="com.microsoft", K=K, N=N, bits=4,
                            block_size=BLOCK)
    return _model([node], [("a", TensorProto.FLOAT16, [1, K])], "y",
                  [("w", np.zeros((N, blocks, BLOCK // 2), np.uint8)), ("s", np.ones(N * blocks, np.float16))],
                  ms=True)


def _kernels(graph: narrowpipe.Graph, target: str = "h100"):
    program = fused_program(interpret(graph, {}), narrowpipe.get_target(target), TimingOptions())
    return program, [k for k in program.kernels if not k.is_free]


def test_matmul_nbits_is_one_kernel_reading_int4_weights_and_scales() -> None:
    graph = _matmul_nbits()
    program, kernels = _kernels(graph)
    assert [k.kind for k in kernels] == ["matmul"]
    weights, scales, a, y = N * K // 2, N * K // BLOCK * 2, K * 2, N * 2     # bytes: 8,388,608 + 1,048,576
    assert kernels[0].cost.bytes_read == weights + scales + a
    assert kernels[0].cost.bytes_written == y
    (gemm,) = kernel_gemms(program.table, kernels[0])
    assert (gemm.m, gemm.n, gemm.k) == (1, N, K)
    assert gemm.b_bytes == weights + scales and gemm.narrow_rhs is not None   # the weight-only kernel's B


def test_matmul_nbits_counts_its_weights_and_no_dequantized_activation() -> None:
    r = narrowpipe.analyze(_matmul_nbits())
    assert r.params == N * K          # two 4-bit weights per stored byte; scales are not parameters
    assert r.peak_activation_bytes == K * 2 + N * 2        # the input and the output only


def test_matmul_nbits_decode_step_is_priced_on_its_stored_bytes() -> None:
    """At batch 1 the GEMV reads 9.4 MB: on H100 it is microseconds, not the 43 MB of an fp16 weight
    written and read back (33.9 us before the dequantization fused)."""
    timed = narrowpipe.analyze(_matmul_nbits(), "h100")
    hbm = narrowpipe.get_target("h100").memory_bandwidth
    assert timed.time_s < 2 * (N * K * 2) / hbm        # under the time of reading the weight in fp16 once


def test_qdq_weight_dequantization_fuses_into_the_matmul() -> None:
    k, n = 256, 128
    nodes = [helper.make_node("DequantizeLinear", ["w", "s"], ["wf"]), helper.make_node("MatMul", ["x", "wf"], ["y"])]
    graph = _model(nodes, [("x", TensorProto.FLOAT16, [8, k])], "y",
                   [("w", np.ones((k, n), np.int8)), ("s", np.array(0.5, np.float16))])
    _, kernels = _kernels(graph)
    assert [k_.kind for k_ in kernels] == ["matmul"]
    assert kernels[0].cost.bytes_read == k * n + 2 + 8 * k * 2
    assert narrowpipe.analyze(graph).peak_activation_bytes == 8 * k * 2 + 8 * n * 2


def test_an_activation_dequantization_stays_an_op_of_its_own() -> None:
    k, n = 256, 128
    nodes = [helper.make_node("DequantizeLinear", ["x", "s"], ["xf"]), helper.make_node("MatMul", ["xf", "w"], ["y"])]
    graph = _model(nodes, [("x", TensorProto.INT8, [8, k])], "y",
                   [("w", np.ones((k, n), np.float16)), ("s", np.array(0.5, np.float16))])
    _, kernels = _kernels(graph)
    assert [k_.kind for k_ in kernels] == ["elementwise", "matmul"]


def test_the_unpacked_weight_keeps_its_stored_bytes_through_a_graph_file(tmp_path) -> None:
    """The retyped weight (uint4, two per stored byte) is the same bytes as the file's uint8 blob."""
    blocks = K // BLOCK
    graph = _matmul_nbits()
    w = next(v for v in graph.weights if v.name == "w")
    assert w.type.dtype.nbytes(N * blocks * BLOCK) == N * blocks * BLOCK // 2
    path = tmp_path / "g.json"
    graph.save(path)
    assert narrowpipe.analyze(narrowpipe.load(path)).params == N * K


def _qdq_matmul(k: int = 4096, n: int = 4096, m: int = 4096) -> narrowpipe.Graph:
    """ORT's static QDQ format: QuantizeLinear -> DequantizeLinear on the activation, a per-channel
    DequantizeLinear on the int8 weight, MatMul."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=1),
             helper.make_node("MatMul", ["xd", "wd"], ["y"])]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(a, nm) for nm, a in (
                              ("xs", np.array(0.1, np.float32)), ("xz", np.array(0, np.int8)),
                              ("w", np.ones((k, n), np.int8)), ("ws", np.ones(n, np.float32)),
                              ("wz", np.zeros(n, np.int8)))])
    return narrowpipe.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]))


def test_a_qdq_matmul_is_an_int8_gemm_reading_both_integer_operands() -> None:
    k = n = m = 4096
    program, kernels = _kernels(_qdq_matmul(k, n, m))
    by_kind = {k_.kind: k_ for k_ in kernels}
    assert sorted(by_kind) == ["elementwise", "matmul"]      # the activation's quantize, then the GEMM
    (gemm,) = kernel_gemms(program.table, by_kind["matmul"])
    assert gemm.dtype.value == "int8" and gemm.narrow_rhs is None
    assert gemm.a_bytes == m * k + 4 + 1 and gemm.b_bytes == k * n + 4 * n + n   # int8 data, scales, zero points


def test_a_qdq_matmul_runs_at_the_int8_rate_not_fp32() -> None:
    """H100: 2 x 4096^3 = 137.4 G integer ops at 1979 TOPS dense int8 is 69 us at peak; the fp32 it was
    timed as (67 TFLOP/s on the CUDA cores) is 2 ms, slower than the float model it quantizes."""
    timed = narrowpipe.analyze(_qdq_matmul(), "h100")
    peak_int8 = narrowpipe.get_target("h100").matrix_flops["int8"]
    assert 2 * 4096 ** 3 / peak_int8 < timed.time_s < 3 * 2 * 4096 ** 3 / peak_int8
    assert timed.timing.precision == "int8"


def test_uint8_activations_run_at_the_int8_rate() -> None:
    """ONNX dynamic quantization's uint8 x int8 MatMulInteger: u8 x s8 is the native form of the
    matrix units (PTX mma .u8/.s8, AMX TDPBUSD, VNNI VPDPBUSD), so it times as int8 x int8 does."""
    k = n = m = 2048
    times = []
    for a_type in (TensorProto.UINT8, TensorProto.INT8):
        g = helper.make_graph([helper.make_node("MatMulInteger", ["a", "w"], ["y"])], "mmi",
                              [helper.make_tensor_value_info("a", a_type, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                              [numpy_helper.from_array(np.ones((k, n), np.int8), "w")])
        graph = narrowpipe.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]))
        times.append(narrowpipe.analyze(graph, "xeon-6980p").time_s)
    assert times[0] == times[1]
