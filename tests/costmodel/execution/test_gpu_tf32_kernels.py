"""Hand-computed check that an fp32 GEMM run as TF32 is fed at the TF32 kernels' own operand rate
(``gemm_tile_feed_bandwidth_tf32``, issue 12 round 3) while 16-bit GEMMs keep theirs. H100 with one
128 x 128 x 64 tile, flat efficiencies, no wave fill, no exposed epilogue and no split-K gain, so the
compute term is waves x one tile's K loop at the bound rate."""

from __future__ import annotations

import dataclasses

import pytest
from graph_builders import gemm_graph  # tests/graph_builders.py

from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution import TimingOptions
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.timing import fused_program, time_program
from narrowpipe.ir import DType


def _h100(**changes):
    base = dict(tile_shapes=((128, 128, 64),), matmul_curve=(), bandwidth_curve=(), matmul_skinny_curve=(),
                gemm_epilogue_exposed=0.0, gemm_wave_overhead=0.0, gemm_split_k_fill=1.0,
                gemm_tile_feed_bandwidth=None, gemm_tile_feed_bandwidth_tf32=None)
    h100 = get_target("h100")
    sources = {k: v for k, v in h100.sources.items() if k not in base}
    sources.update({k: "assumption: test" for k, v in {**base, **changes}.items() if v not in (None, ())})
    return dataclasses.replace(h100, **{**base, **changes}, sources=sources)


def _compute_s(m: int, n: int, k: int, dtype: DType, target) -> float:
    """The GEMM's tile time: its matrix units' work or, where the operands arrive slower, their
    arrival (which binds as memory)."""
    table = interpret(gemm_graph(m, n, k, dtype), {})
    kernel = time_program(fused_program(table, target, TimingOptions(allow_tf32=True)), target).times[-1]
    return max(kernel.compute_s, kernel.memory_s)


def test_a_tf32_gemm_runs_no_faster_than_its_fp32_operand_tiles_arrive():
    """4096 x 4096 x 1024: 1024 tiles of 128 x 128 on 132 SMs = 8 waves, 16 K steps of 64 each.
    An fp32 tile loads (128 + 128) x 4 bytes per 2 x 128 x 128 FLOPs of a K step: 32 FLOP per byte,
    so at 40 GB/s per SM it runs at 1.28 TFLOP/s, below the SM's share of the TF32 plateau."""
    t = _h100(gemm_tile_feed_bandwidth_tf32=40e9)
    tile_flops = 2 * 128 * 128 * 64 * 16
    plateau = t.matrix_flops["tf32"] * t.matmul_efficiency_tf32 / t.sm_count
    assert 40e9 * 32 < plateau
    assert _compute_s(4096, 4096, 1024, DType.FP32, t) == pytest.approx(8 * tile_flops / (40e9 * 32), rel=1e-9)
    # without the TF32 kernels' bound the tile runs at the plateau
    assert _compute_s(4096, 4096, 1024, DType.FP32, _h100()) == pytest.approx(8 * tile_flops / plateau, rel=1e-9)


def test_the_tf32_feed_leaves_16_bit_gemms_alone():
    t = _h100(gemm_tile_feed_bandwidth_tf32=40e9)
    per_sm = t.matrix_flops["bf16"] * t.matmul_efficiency / t.sm_count
    assert _compute_s(4096, 4096, 1024, DType.BF16, t) == pytest.approx(8 * 2 * 128 * 128 * 64 * 16 / per_sm,
                                                                        rel=1e-9)
