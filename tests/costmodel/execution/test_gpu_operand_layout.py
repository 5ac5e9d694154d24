"""Hand-computed check of ``gemm_k_major_read_efficiency_fp32`` (issue 12, GEMM operand layouts):
where a DOT states how its operands are stored (``operand_major``), an SGEMM kernel streams each
K-major operand at that fraction of the kernel's DRAM rate; with no layout, or on a kernel it does
not describe (16-bit tensor cores), nothing changes.

T4 with flat curves, no exposed epilogue and a 1 GB/s memory system: a 64 x 16 x 32 GEMM is then
memory-bound by four orders of magnitude, runs unsplit (a split only adds partial sums) and its
memory term is its bytes over 1 GB/s x 0.85 (T4's achievable fraction), the K-major operands'
bytes counted 1 / 0.5 = 2 times."""

from __future__ import annotations

import dataclasses

import pytest
from gpu_timing import flat_gpu, last_kernel  # tests/gpu_timing.py

from narrowpipe.costmodel.execution.gemm import Gemm
from narrowpipe.costmodel.execution.gpu import _k_major_bytes
from narrowpipe.ir import OPERAND_MAJOR, DType, Graph, Op, TensorType, ValueKind, verify

M, N, K = 64, 16, 32
A, B, C = M * K * 4, K * N * 4, M * N * 4     # fp32 bytes: 8192, 2048, 4096
BW = 1e9 * 0.85


def _t4(efficiency: float | None = 0.5):
    target = flat_gpu("t4", memory_bandwidth=1e9, gemm_k_major_read_efficiency_fp32=None)
    if efficiency is None:
        return target
    return dataclasses.replace(target, gemm_k_major_read_efficiency_fp32=efficiency,
                               sources={**target.sources, "gemm_k_major_read_efficiency_fp32": "assumption: test"})


def _gemm(major: tuple[str, str] | None, dtype: DType = DType.FP32) -> Graph:
    g = Graph("gemm")
    a = g.add_input("a", TensorType(dtype, (M, K)))
    w = g.add_input("w", TensorType(dtype, (K, N)), ValueKind.PARAM)
    attrs = {"lhs_contract": (1,), "rhs_contract": (0,), **({OPERAND_MAJOR: major} if major else {})}
    g.set_outputs(g.add_node(Op.DOT, [a, w], [TensorType(dtype, (M, N))], attrs).outputs)
    verify(g)
    return g


@pytest.mark.parametrize("blas, major, k_major_bytes", [
    ("NN", ("mn", "k"), B),          # cuBLAS NN: A M-contiguous, B K-contiguous
    ("TN", ("k", "k"), A + B),       # both K-major (torch's linear)
    ("NT", ("mn", "mn"), 0),
    ("TT", ("k", "mn"), A),
])
def test_each_k_major_operand_streams_at_the_efficiency(blas, major, k_major_bytes):
    t = _t4()
    memory = last_kernel(_gemm(major), t).memory_s
    assert memory == pytest.approx((A + B + C + k_major_bytes * (1 / 0.5 - 1)) / BW, rel=1e-9), blas


def test_a_gemm_with_no_stated_layout_or_no_efficiency_is_unchanged():
    plain = last_kernel(_gemm(None), _t4(None))
    assert plain.memory_s == pytest.approx((A + B + C) / BW, rel=1e-9)
    assert last_kernel(_gemm(None), _t4()) == plain                 # the field, but no layout
    assert last_kernel(_gemm(("k", "k")), _t4(None)) == plain       # a layout, but no field


def test_16_bit_tensor_core_gemms_do_not_read_the_sgemm_efficiency():
    t = _t4()
    assert last_kernel(_gemm(("k", "k"), DType.FP16), t) == last_kernel(_gemm(None, DType.FP16), t)


def test_k_major_bytes_count_each_k_major_operand_with_its_l2_rereads():
    g = Gemm(1, M, N, K, DType.FP32, A, B, C, 2 * M * N * K, k_major=(True, False))
    assert _k_major_bytes(g, (100.0, 7.0)) == A + 100.0
    assert _k_major_bytes(Gemm(1, M, N, K, DType.FP32, A, B, C, 2 * M * N * K), (100.0, 7.0)) == 0.0
