"""Hand-computed checks that a GPU's convolution kernels and its GEMM kernels keep their own library
terms (issue 12 round 3): cuDNN's implicit-GEMM kernels pay ``conv_latency`` and pad a narrow
output to ``conv_min_tile``, cuBLAS's GEMMs ``gemm_latency`` and ``gemm_min_tile``; absent, a
convolution takes the GEMM's. Targets are T4 with flat efficiencies, no wave fill and no exposed
epilogue, so every term is a formula of the shape."""

from __future__ import annotations

from functools import partial

import pytest
from gpu_timing import flat_gpu  # tests/gpu_timing.py
from gpu_timing import last_kernel as _kernel
from graph_builders import conv_graph, gemm_graph  # tests/graph_builders.py

from narrowpipe.ir import DType, Graph

US = 1e-6
_t4 = partial(flat_gpu, "t4")


def _conv1x1(n: int, c: int, hw: int, k: int) -> Graph:
    """A 1x1 fp16 convolution: an implicit GEMM of M = n*hw*hw, N = k, K = c."""
    return conv_graph(n, c, (hw, hw), k, (1, 1), dtype=DType.FP16)


def test_a_convolution_pays_the_convolution_librarys_floor_and_a_matmul_the_gemm_librarys():
    """gemm_latency 5 us, conv_latency 12 us: the overhead term is launch + the library's floor."""
    t = _t4(gemm_latency=5 * US, conv_latency=12 * US)
    conv = _kernel(_conv1x1(16, 64, 16, 64), t)
    gemm = _kernel(gemm_graph(4096, 64, 64, DType.FP16), t)
    assert conv.overhead_s == pytest.approx(t.launch_overhead + 12 * US, rel=1e-9)
    assert gemm.overhead_s == pytest.approx(t.launch_overhead + 5 * US, rel=1e-9)


def test_without_a_convolution_floor_a_convolution_pays_the_gemm_floor():
    t = _t4(gemm_latency=5 * US, conv_latency=None)
    assert _kernel(_conv1x1(16, 64, 16, 64), t).overhead_s == pytest.approx(t.launch_overhead + 5 * US, rel=1e-9)


def test_a_narrow_output_convolution_pads_to_the_convolution_librarys_narrowest_tile():
    """1x1 conv, 16 output channels: M = 16*16*16 = 4096, N = 16, K = 64, every tile side dividing
    M and K and no K split (T4's conv_max_split_k is 1). With conv_min_tile 64 the 16 channels pad
    to 64 (4x the FLOPs executed); the GEMM of the same dims pads only to gemm_min_tile 16."""
    flops = 2 * 4096 * 16 * 64
    t = _t4(gemm_min_tile=16, conv_min_tile=64)
    assert _kernel(_conv1x1(16, 64, 16, 16), t).executed_flops == 4 * flops
    assert _kernel(gemm_graph(4096, 16, 64, DType.FP16), t).executed_flops == flops
    # absent, the convolution's narrowest tile is the GEMM library's
    assert _kernel(_conv1x1(16, 64, 16, 16), _t4(gemm_min_tile=16, conv_min_tile=None)).executed_flops == flops
