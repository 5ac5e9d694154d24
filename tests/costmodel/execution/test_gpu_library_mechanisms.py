"""Hand-computed checks of the GPU library mechanisms of issue 12 round 2: the library's narrowest
GEMM tile, convolution kernels that split no K, Winograd weight gradients, the weight-gradient
plateau, the split-K threshold and the tile feed bound. Each target is a catalog GPU with flat
efficiencies and (where it matters) one tile shape, so every term is a formula of the shape."""

from __future__ import annotations

import dataclasses
from math import ceil

import pytest
from graph_builders import gemm_graph  # tests/graph_builders.py

from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution import TimingOptions
from narrowpipe.costmodel.execution.conv_algos import conv_plans
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.timing import fused_program, time_program
from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind


def _t4(**changes):
    """T4 with no efficiency curves, no exposed epilogue and no per-wave fill unless asked."""
    base = dict(matmul_curve=(), bandwidth_curve=(), matmul_skinny_curve=(), gemm_epilogue_exposed=0.0,
                gemm_wave_overhead=0.0)
    return dataclasses.replace(get_target("t4"), **{**base, **changes})


def _kernel(graph: Graph, target):
    table = interpret(graph, {})
    return time_program(fused_program(table, target, TimingOptions()), target).times[-1]


def _gemm(m: int, n: int, k: int, dtype: DType = DType.FP16) -> Graph:
    return gemm_graph(m, n, k, dtype)


def _conv(n: int, c: int, hw: int, k: int, r: int, dtype: DType, role: str | None = None) -> Graph:
    """A stride-1, same-padded r x r convolution, or its weight gradient (``role="grad_weight"``)."""
    g = Graph("conv")
    attrs = {"stride": (1, 1), "padding": (r // 2, r // 2), "dilation": (1, 1), "groups": 1,
             "output_padding": (0, 0), "transposed": False}
    x_t, w_t = TensorType(dtype, (n, c, hw, hw)), TensorType(dtype, (k, c, r, r))
    y_t = TensorType(dtype, (n, k, hw, hw))
    x = g.add_input("x", x_t)
    if role == "grad_weight":
        dy = g.add_input("grad_out", y_t)
        node = g.add_node(Op.CONV, [x, dy], [w_t], {**attrs, "role": "grad_weight"})
    else:
        node = g.add_node(Op.CONV, [x, g.add_input("w", w_t, ValueKind.PARAM)], [y_t], attrs)
    g.set_outputs(node.outputs)
    return g


def test_a_skinny_gemm_pads_its_narrow_side_to_the_librarys_narrowest_tile():
    """4096 x 16 x 4096 fp16: with 64-wide tiles as the narrowest the library has, the 16 columns
    pad to 64 (4x the FLOPs executed); with tiles that shrink to the problem, none are wasted."""
    g = _gemm(4096, 16, 4096)
    flops = 2 * 4096 * 16 * 4096
    assert _kernel(g, _t4(gemm_min_tile=64)).executed_flops == 4 * flops
    assert _kernel(g, _t4(gemm_min_tile=8)).executed_flops == flops


def test_fp32_gemms_on_the_cuda_cores_use_the_sgemm_kernels_narrowest_tile():
    g = _gemm(4096, 16, 4096, DType.FP32)
    t = _t4(gemm_min_tile=64, gemm_min_tile_fp32=32)
    assert _kernel(g, t).executed_flops == 2 * 2 * 4096 * 16 * 4096        # 16 -> 32, not 64
    assert _kernel(_gemm(4096, 16, 4096), t).executed_flops == 4 * 2 * 4096 * 16 * 4096


def test_a_convolution_kernel_that_splits_no_k_runs_its_whole_reduction_in_one_tile():
    """A 7x7, 512 -> 64 channel 3x3 layer at batch 1 (fp16): M = 49 output positions (a 56-row tile),
    N = 64, K = 512 x 9 = 4608 in 144 steps of 32. One output tile: split 1 runs all 144 steps on one
    SM; split 16 would run 9 per SM."""
    t1 = _t4(gemm_min_tile=8, conv_min_tile=8, conv_max_split_k=1)
    t16 = _t4(gemm_min_tile=8, conv_min_tile=8, conv_max_split_k=16)
    per_sm = t1.matrix_flops["fp16"] * t1.matmul_efficiency / t1.sm_count
    g = _conv(1, 512, 7, 64, 3, DType.FP16)
    assert _kernel(g, t1).compute_s == pytest.approx(2 * 56 * 64 * 32 * 144 / per_sm, rel=1e-9)
    # allowed 16 splits, the best plan weighs the shorter K loop against the fp32 partial sums each
    # split writes and reads back: it splits at least 9 ways (at most 16 K steps per SM)
    assert _kernel(g, t16).compute_s <= 2 * 56 * 64 * 32 * 16 / per_sm + t16.gemm_wave_overhead
    assert _kernel(g, t16).time_s < _kernel(g, t1).time_s / 2


def test_winograd_weight_gradients_are_batched_gemms_reducing_over_the_tiles():
    """dW of a 3x3 layer, 28x28, batch 8, 128 -> 256 channels: F(4x4, 3x3) cuts the output
    gradient into 8 x 7 x 7 tiles of 4 x 4; 36 GEMMs of Cin x Cout reduce over the tiles: a
    quarter of the direct MACs."""
    g = _conv(8, 128, 28, 256, 3, DType.FP32, role="grad_weight")
    table = interpret(g, {})
    node = g.nodes[-1]
    plans = conv_plans(table, node, k_step=1, winograd=True, winograd_wgrad=True)
    wino = [p for p in plans if "weight gradient" in p.name]
    assert [p.name for p in wino] == ["Winograd F(4x4,3x3) non-fused weight gradient"]
    gg = wino[0].gemm
    tiles = 8 * 7 * 7
    assert (gg.batch, gg.m, gg.n, gg.k) == (36, 128, 256, tiles)
    direct = 2 * 8 * 28 * 28 * 128 * 256 * 9
    assert gg.flops == 2 * 36 * tiles * 128 * 256 == direct // 4
    assert wino[0].extra_kernels == 3
    assert conv_plans(table, node, k_step=1, winograd=True, winograd_wgrad=False)[1:] == []


def test_the_model_runs_a_large_fp32_3x3_weight_gradient_with_winograd_where_the_library_has_it():
    g = _conv(16, 256, 28, 512, 3, DType.FP32, role="grad_weight")
    with_w, without = _kernel(g, _t4(conv_winograd_wgrad=True)), _kernel(g, _t4(conv_winograd_wgrad=False))
    assert "Winograd F(4x4,3x3) non-fused weight gradient" in with_w.note
    assert with_w.time_s < without.time_s / 2


def test_weight_gradient_kernels_reach_their_own_fraction_of_the_gemm_plateau():
    """A compute-bound 1x1 weight gradient at half the plateau takes twice the tiles' time."""
    g = _conv(16, 512, 28, 512, 1, DType.FP16, role="grad_weight")
    full, half = _kernel(g, _t4(conv_wgrad_efficiency=1.0)), _kernel(g, _t4(conv_wgrad_efficiency=0.5))
    assert full.bound == "compute"
    assert half.compute_s == pytest.approx(2 * full.compute_s, rel=1e-9)
    assert ceil(half.executed_flops) == ceil(full.executed_flops)


def _h100_one_tile(tile, **changes):
    base = dict(tile_shapes=(tile,), matmul_curve=(), bandwidth_curve=(), matmul_skinny_curve=(),
                gemm_epilogue_exposed=0.0, gemm_wave_overhead=0.0, gemm_split_k_fill=1.0)
    h100 = get_target("h100")
    sources = {**h100.sources, **{k: "assumption: test" for k in changes}}
    return dataclasses.replace(h100, **{**base, **changes}, sources=sources)


def test_k_splits_only_while_the_tiles_fill_less_than_the_split_threshold_of_the_sms():
    """1024 x 1024 x 4096 bf16 in 128 x 128 x 64 tiles: 64 tiles on 132 SMs. With the threshold at
    the whole GPU, K splits 2 ways (one wave of half-length tiles); at a quarter of it (33 SMs) the
    64 tiles run whole."""
    g = _gemm(1024, 1024, 4096, DType.BF16)
    t = _h100_one_tile((128, 128, 64))
    per_sm = t.matrix_flops["bf16"] * t.matmul_efficiency / t.sm_count
    whole = 2 * 128 * 128 * 64 * 64 / per_sm
    assert _kernel(g, t).compute_s == pytest.approx(whole / 2, rel=1e-9)
    assert _kernel(g, dataclasses.replace(t, gemm_split_k_fill=0.25)).compute_s == pytest.approx(whole, rel=1e-9)


def test_a_small_tile_runs_no_faster_than_its_operands_arrive():
    """A 64 x 64 bf16 tile loads (64 + 64) x 2 bytes per 2 x 64 x 64 FLOPs of each K step: 32 FLOP
    per byte, so at 50 GB/s per SM it runs at 1.6 TFLOP/s, below the SM's share of the plateau.
    512 x 512 x 1024: 64 tiles, K split 2 ways (16 K steps of 64 -> 8 each), one wave: the fastest
    plan when the tiles are starved, as the partial sums cost less than the halved K loop."""
    g = _gemm(512, 512, 1024, DType.BF16)
    t = _h100_one_tile((64, 64, 64), gemm_tile_feed_bandwidth=50e9)
    assert 50e9 * 32 < t.matrix_flops["bf16"] * t.matmul_efficiency / t.sm_count
    starved = _kernel(g, t)
    # the operands' arrival, not the matrix units, sets the pace: it binds as memory (the hierarchy's
    # feed), and the matrix units' own time is the plateau's
    assert starved.memory_s == pytest.approx(2 * 64 * 64 * 64 * 8 / (50e9 * 32), rel=1e-9)
    assert starved.memory_s > starved.compute_s
    assert starved.compute_s == pytest.approx(2 * 64 * 64 * 64 * 8 / (t.matrix_flops["bf16"] * t.matmul_efficiency
                                                                      / t.sm_count), rel=1e-9)
    fast = _h100_one_tile((64, 64, 64))   # fed at the plateau, its best plan splits no K (no partials)
    per_sm = fast.matrix_flops["bf16"] * fast.matmul_efficiency / fast.sm_count
    assert _kernel(g, fast).compute_s <= 2 * 64 * 64 * 64 * 16 / per_sm * (1 + 1e-9) < starved.time_s


@pytest.mark.parametrize("chip", ["mi300x", "mi355x"])
def test_a_decode_gemv_starved_of_operands_is_memory_bound_and_speeds_up_with_the_memory(chip):
    """Llama-3-70B's down projection at batch 1 (1 x 8192 x 28672, FP8 weights) on an AMD chip whose
    tiles are fed at ``gemm_tile_feed_bandwidth`` per CU: its 235 MB of weights bound it (>= bytes
    over the HBM bandwidth), the matrix units idle most of it, so it reads memory-bound, and doubling
    the memory (HBM and the on-chip feed, what "if doubled: memory" doubles) nearly halves it. It read
    compute-bound while the feed counted as the matrix units' time, and batch-1 decode on MI355X
    with FP8 weights with it."""
    t = get_target(chip)
    assert t.gemm_tile_feed_bandwidth
    kernel = _kernel(gemm_graph(1, 8192, 28672, DType.FP8_E4M3), t)
    weights = 8192 * 28672
    assert kernel.bound == "memory" and kernel.memory_s >= weights / t.memory_bandwidth
    assert kernel.compute_s < 0.5 * kernel.memory_s
    doubled = _kernel(gemm_graph(1, 8192, 28672, DType.FP8_E4M3), t.scaled(memory_bandwidth=2, onchip_bandwidth=2))
    assert doubled.time_s < 0.6 * kernel.time_s
