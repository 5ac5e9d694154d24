"""Hand-computed check of ``gemm_split_k_smallest_tile`` (issue 12 round 5): where the library
narrows its tile before it splits K, the split-K fill test counts the output in the smallest tile,
so a GEMM that fills the SMs in small tiles is not split in large ones.

H100 with two tiles (256 x 128 and 64 x 64, K step 64), split-K while the tiles fill under half of
the 132 SMs, flat efficiency, no wave fill, no exposed epilogue and (for the check) a memory system
fast enough that only the MMA work counts."""

from __future__ import annotations

import dataclasses

import pytest
from graph_builders import gemm_graph  # tests/graph_builders.py

from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution import TimingOptions
from narrowpipe.costmodel.execution.gemm import Gemm
from narrowpipe.costmodel.execution.gpu import GemmTerms, TileGrid, _max_split, _smallest_tile_count
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.timing import fused_program, time_program
from narrowpipe.ir import DType, Graph, Op, TensorType


def _h100(**changes):
    base = dict(tile_shapes=((256, 128, 64), (64, 64, 64)), matmul_curve=(), bandwidth_curve=(),
                matmul_skinny_curve=(), gemm_epilogue_exposed=0.0, gemm_wave_overhead=0.0, gemm_split_k_fill=0.5,
                gemm_tile_feed_bandwidth=None, gemm_tile_feed_bandwidth_tf32=None, memory_bandwidth=1e18)
    h100 = get_target("h100")
    sources = {k: v for k, v in h100.sources.items() if k not in base and k not in changes}
    sources.update({k: "assumption: test" for k, v in {**base, **changes}.items() if v not in (None, ())})
    return dataclasses.replace(h100, **{**base, **changes}, sources=sources)


def _compute_s(m: int, n: int, k: int, target) -> float:
    table = interpret(gemm_graph(m, n, k, DType.BF16), {})
    return time_program(fused_program(table, target, TimingOptions()), target).times[-1].compute_s


def test_the_fill_test_reads_the_smallest_tiles_count_and_the_split_bound_stays_the_run_tiles():
    """1024 x 768 x 4096 in 256 x 128 tiles: 24 tiles, 64 K steps. 24 < 0.5 x 132, so K splits up to
    132 // 24 = 5 ways; in 64 x 64 tiles the same output is 192 tiles, over 66: no split."""
    p = GemmTerms(latency=0.0, wave_overhead=0.0, epilogue_exposed=0.0, max_split_k=16, split_fill=0.5)
    grid = TileGrid(256, 128, 64, 24, 64)
    assert _max_split(grid, 132, p) == 5
    assert _max_split(grid, 132, p, fill_tiles=192) == 1
    assert _max_split(grid, 132, p, fill_tiles=40) == 5


def test_a_gemm_that_fills_the_sms_in_small_tiles_is_not_split():
    """1024 x 768 x 4096, bf16. Without the rule: 256 x 128 tiles split 5 ways, 120 work items in one
    wave, each ceil(64 / 5) = 13 K steps: 2 x 256 x 128 x 64 x 13 FLOPs per SM. With it: no split;
    the 64 x 64 grid's 192 tiles take 2 waves of 2 x 64 x 64 x 4096 FLOPs (the 256 x 128 grid
    unsplit takes 1 wave of 2 x 256 x 128 x 4096, twice as long)."""
    t = _h100()
    per_sm = t.matrix_flops["bf16"] * t.matmul_efficiency / t.sm_count
    split = 2 * 256 * 128 * 64 * 13 / per_sm
    unsplit = 2 * (2 * 64 * 64 * 4096) / per_sm
    assert _compute_s(1024, 768, 4096, t) == pytest.approx(split, rel=1e-9)
    assert _compute_s(1024, 768, 4096, _h100(gemm_split_k_smallest_tile=True)) == pytest.approx(unsplit, rel=1e-9)


def test_a_gemm_too_small_to_fill_the_sms_in_any_tile_still_splits():
    """256 x 256 x 4096: 16 tiles of 64 x 64 (under 66), so the rule allows the split; 256 x 128
    tiles (2 of them) split 16 ways (132 // 2 = 66, 64 K steps, the library's 16): 32 items, one wave
    of 4 K steps each (2 x 256 x 128 x 64 x 4 FLOPs per SM); 64 x 64 tiles split 8 ways (132 // 16):
    128 items, one wave of 8 K steps (2 x 64 x 64 x 64 x 8, a quarter of it). The second is the
    fastest, with or without the rule."""
    expected = 2 * 64 * 64 * 64 * 8
    for t in (_h100(), _h100(gemm_split_k_smallest_tile=True)):
        per_sm = t.matrix_flops["bf16"] * t.matmul_efficiency / t.sm_count
        assert _compute_s(256, 256, 4096, t) == pytest.approx(expected / per_sm, rel=1e-9)


def _bmm_compute_s(batch: int, m: int, n: int, k: int, dtype: DType, target) -> float:
    """A batched matmul of two activations ``[batch, m, k] @ [batch, k, n]`` (an attention BMM)."""
    g = Graph("bmm")
    a = g.add_input("a", TensorType(dtype, (batch, m, k)))
    b = g.add_input("b", TensorType(dtype, (batch, k, n)))
    g.set_outputs(g.add_node(Op.DOT, [a, b], [TensorType(dtype, (batch, m, n))],
                             {"lhs_contract": (2,), "rhs_contract": (1,), "lhs_batch": (0,),
                              "rhs_batch": (0,)}).outputs)
    return time_program(fused_program(interpret(g, {}), target, TimingOptions()), target).times[-1].compute_s


@pytest.mark.parametrize("dtype, tflops", [(DType.BF16, 989), (DType.FP8_E4M3, 1979)])   # NV-H100 dense
def test_the_fill_test_counts_every_batch_and_holds_for_fp8(dtype, tflops):
    """24 batches of 128 x 128 x 4096: the 256 x 128 tile shrinks to 128 x 128, 24 tiles (one per
    batch), 64 K steps. Without the rule 24 < 66 splits K 132 // 24 = 5 ways: one wave of 13 K steps
    (2 x 128 x 128 x 64 x 13 FLOPs per SM), faster than the 64 x 64 grid's 96 tiles (>= 66, unsplit:
    2 x 64 x 64 x 4096). With it the fill test counts those 96 tiles over every batch: no split, so
    the 64 x 64 grid's one wave is the fastest. The fp8 tiles are the same; only the peak doubles."""
    per_sm = tflops * 1e12 * 0.8033 / 132          # NV-H100 peak x the catalog's matmul_efficiency
    split = 2 * 128 * 128 * 64 * 13 / per_sm
    unsplit = 2 * 64 * 64 * 4096 / per_sm
    assert _bmm_compute_s(24, 128, 128, 4096, dtype, _h100()) == pytest.approx(split, rel=1e-9)
    assert _bmm_compute_s(24, 128, 128, 4096, dtype, _h100(gemm_split_k_smallest_tile=True)) == \
        pytest.approx(unsplit, rel=1e-9)


def test_equal_area_smallest_tiles_count_the_larger_grid_whatever_their_order():
    """64 x 2560 x 4096 with two smallest tiles of 4,096 elements: 128 x 32 (shrunk to the 64 rows)
    takes 2560 / 32 = 80 tiles, 64 x 64 takes 40. The library narrows to either before splitting, and
    80 tiles fill over half of 132 SMs, so K is not split in either order: the fastest is the 80
    64 x 32 tiles in one wave, 2 x 64 x 32 x 4096 FLOPs per SM (counting the 64 x 64 grid alone would
    split it 3 ways: 120 items of 22 K steps, 2 x 64 x 64 x 64 x 22, faster)."""
    g = Gemm(1, 64, 2560, 4096, DType.BF16, 0, 0, 0, 2 * 64 * 2560 * 4096)
    p = GemmTerms(latency=0.0, wave_overhead=0.0, epilogue_exposed=0.0, max_split_k=16, split_fill=0.5,
                  min_tile=16, split_smallest=True)
    first, second = ((256, 128, 64), (128, 32, 64), (64, 64, 64)), ((256, 128, 64), (64, 64, 64), (128, 32, 64))
    assert _smallest_tile_count(g, first, p) == _smallest_tile_count(g, second, p) == 80
    for tiles in (first, second):
        t = _h100(tile_shapes=tiles, gemm_split_k_smallest_tile=True, gemm_min_tile=16)
        per_sm = t.matrix_flops["bf16"] * t.matmul_efficiency / t.sm_count
        assert _compute_s(64, 2560, 4096, t) == pytest.approx(2 * 64 * 32 * 4096 / per_sm, rel=1e-9)
