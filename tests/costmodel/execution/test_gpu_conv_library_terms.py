"""Hand-computed checks that a GPU's convolution kernels and its GEMM kernels keep their own library
terms (issue 12 round 3): cuDNN's implicit-GEMM kernels pay ``conv_latency`` and pad a narrow
output to ``conv_min_tile``, cuBLAS's GEMMs ``gemm_latency`` and ``gemm_min_tile``; absent, a
convolution takes the GEMM's. Targets are T4 with flat efficiencies, no wave fill and no exposed
epilogue, so every term is a formula of the shape."""

from __future__ import annotations

import dataclasses

import pytest
from graph_builders import gemm_graph  # tests/graph_builders.py

from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution import TimingOptions
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.timing import fused_program, time_program
from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind

US = 1e-6


def _t4(**changes):
    base = dict(matmul_curve=(), bandwidth_curve=(), matmul_skinny_curve=(), gemm_epilogue_exposed=0.0,
                gemm_wave_overhead=0.0)
    t4 = get_target("t4")
    sources = {k: v for k, v in t4.sources.items() if changes.get(k, 0) is not None}
    return dataclasses.replace(t4, **{**base, **changes}, sources=sources)


def _kernel(graph: Graph, target):
    table = interpret(graph, {})
    return time_program(fused_program(table, target, TimingOptions()), target).times[-1]


def _conv1x1(n: int, c: int, hw: int, k: int) -> Graph:
    """A 1x1 fp16 convolution: an implicit GEMM of M = n*hw*hw, N = k, K = c."""
    g = Graph("conv")
    attrs = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1,
             "output_padding": (0, 0), "transposed": False}
    x = g.add_input("x", TensorType(DType.FP16, (n, c, hw, hw)))
    w = g.add_input("w", TensorType(DType.FP16, (k, c, 1, 1)), ValueKind.PARAM)
    node = g.add_node(Op.CONV, [x, w], [TensorType(DType.FP16, (n, k, hw, hw))], attrs)
    g.set_outputs(node.outputs)
    return g


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
