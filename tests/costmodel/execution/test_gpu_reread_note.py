"""A GEMM that is memory-bound only through its operand re-reads says how much it streamed.

QA: a 16384^3 GEMM on a chip with three times an L40S's tensor rate was listed at 1.61 GB and 5,460
FLOP/B (far above the ridge) yet memory-bound: the GPU model streams the operand tiles each wave
re-reads past the L2, which neither the bytes column nor the intensity shows.
"""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.backends import get_target

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

N = 16384


def _gemm() -> narrowpipe.Graph:
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT16, [N, N])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT16, [N, N])
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "mm", [a, b],
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT16, None)])
    return narrowpipe.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_a_gemm_memory_bound_through_rereads_names_its_traffic():
    r = narrowpipe.analyze(_gemm(), get_target("h100").scaled(compute=6))
    assert r.timing.top[0].bound == "memory"
    assert r.bytes == 3 * N * N * 2                      # each operand and the result once: 1.61 GB
    (note,) = [n for n in r.timing.notes if "re-read" in n]
    traffic = float(note.split("memory-bound on ")[1].split(" GB")[0]) * 1e9
    # the memory term is what that traffic takes at the chip's achievable bandwidth
    kernel_memory_s = r.timing.top[0].time_s
    assert traffic > 1.5 * r.bytes and traffic / (3.35e12 * 0.85) == pytest.approx(kernel_memory_s, rel=0.05)


def test_a_compute_bound_gemm_gets_no_such_note():
    r = narrowpipe.analyze(_gemm(), "h100")
    assert r.timing.top[0].bound == "compute" and not any("re-read" in n for n in r.timing.notes)
