"""Hand-computed checks of each family's execution model against the target's own numbers."""

from __future__ import annotations

import dataclasses
import math

import pytest
from graph_builders import gemm_graph  # tests/graph_builders.py

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.ir import DType, Graph, Op, TensorType


def test_large_bf16_gemm_on_h100_is_compute_bound_at_the_achievable_rate():
    h100 = get_target("h100")
    r = narrowpipe.analyze(gemm_graph(8192, 8192, 8192), "h100")
    ideal = 2 * 8192**3 / (h100.matrix_flops["bf16"] * h100.matmul_efficiency)
    # beyond the MMA work: the last wave's share of the output write the main loop does not hide, a
    # fill per wave (128x256 tiles: 2048 tiles = 15.5 waves, 16 paid), the latency floor and the launch
    epilogue = 8192 * 8192 * 2 / (h100.memory_bandwidth * h100.memory_efficiency) * h100.gemm_epilogue_exposed / 16
    extra = epilogue + 16 * h100.gemm_wave_overhead + h100.gemm_latency + h100.launch_overhead
    assert r.ops[0].bound == "compute"
    assert ideal + extra <= r.time_s <= ideal * 1.04 + extra
    assert r.ops[0].utilization == pytest.approx(h100.matmul_efficiency, rel=0.1)
    assert r.timing.mfu == pytest.approx(h100.matmul_efficiency, rel=0.1)


def test_decode_gemv_is_memory_bound_at_the_bandwidth():
    h100 = get_target("h100")
    r = narrowpipe.analyze(gemm_graph(1, 8192, 8192), "h100")
    weights = 8192 * 8192 * 2
    bw = h100.memory_bandwidth * h100.memory_efficiency
    # the output row is written after the K loop (exposed share), then the latency floor and launch
    expected = (weights + 8192 * 2) / bw + 8192 * 2 / bw * (1 + h100.gemm_epilogue_exposed) \
        + h100.gemm_latency + h100.launch_overhead
    assert r.ops[0].bound == "memory"
    assert r.time_s == pytest.approx(expected, rel=1e-3)     # split-K's fp32 partial sums add <0.1%


def test_small_gemm_takes_the_latency_floor_not_its_flops():
    """A 512x32x512 GEMM is 17 MFLOP: ~20 ns of H100 tensor-core time, but a kernel that small still
    loads its first tiles, fills the MMA pipeline and drains its epilogue: microseconds."""
    h100 = get_target("h100")
    r = narrowpipe.analyze(gemm_graph(512, 32, 512), "h100")
    assert h100.gemm_latency > 2e-6
    assert r.time_s >= h100.gemm_latency + h100.launch_overhead
    assert r.time_s > 50 * 2 * 512 * 32 * 512 / h100.matrix_flops["bf16"]


def test_tpu_pads_contractions_to_the_mxu():
    v5e = get_target("tpu-v5e")
    assert v5e.mxu_dim == 128
    # Such skinny GEMMs are memory-bound on v5e (240 FLOP/B); with 100x the bandwidth they are
    # compute-bound and the padding shows: K and N of 129 pad to 256, 4 folds instead of 1.
    fast_memory = v5e.scaled(hbm_bandwidth=100)
    exact = narrowpipe.analyze(gemm_graph(65536, 128, 128), fast_memory)
    over = narrowpipe.analyze(gemm_graph(65536, 129, 129), fast_memory)
    assert exact.ops[0].bound == over.ops[0].bound == "compute"
    flops_ratio = 129 * 129 / (128 * 128)
    assert over.time_s / exact.time_s > 3.5 > flops_ratio
    assert over.ops[0].utilization < 0.3 < exact.ops[0].utilization
    v6e = narrowpipe.analyze(gemm_graph(4096, 200, 200), "tpu-v6e")
    assert get_target("tpu-v6e").mxu_dim == 256
    assert v6e.ops[0].time_s > 0


def test_model_larger_than_one_groq_chip_spans_several_chips():
    groq = get_target("groq-lpu")
    g = gemm_graph(64, 16384, 16384, DType.FP16)          # 512 MiB of weights > 230 MB of SRAM
    r = narrowpipe.analyze(g, "groq-lpu")
    need = math.ceil((16384 * 16384 * 2 + r.peak_activation_bytes) / groq.memory_capacity)
    assert r.timing.devices == need >= 3
    small = narrowpipe.analyze(gemm_graph(64, 1024, 1024, DType.FP16), "groq-lpu")
    assert small.timing.devices == 1


def test_weight_streaming_chip_streams_or_spans_chips_whichever_is_faster():
    """51.2 GB of weights: streaming them from MemoryX at 150 GB/s takes 0.34 s per pass; two wafers
    hold them in SRAM. Both layouts are timed and the faster one is the plan."""
    wse = get_target("cerebras-wse3")
    stream_s = 160_000 * 160_000 * 2 / wse.external_memory_bandwidth
    r = narrowpipe.analyze(_big_linear(), wse)
    assert r.timing.devices == 2 and not r.timing.plan["weight_streaming"]
    assert r.time_s < stream_s / 1000
    assert any("streaming weights into 1 chip would take" in n for n in r.timing.notes)
    one = dataclasses.replace(wse, max_chips=1)             # a single system: only streaming is left
    r1 = narrowpipe.analyze(_big_linear(), one)
    assert r1.timing.devices == 1 and r1.timing.plan["weight_streaming"]
    assert r1.time_s >= stream_s


def _big_linear() -> Graph:
    return gemm_graph(8, 160_000, 160_000, DType.BF16)     # 51 GB of weights > 44 GB of SRAM


def test_cpu_uses_amx_for_bf16_and_simd_for_fp32():
    xeon = get_target("xeon-6980p")
    bf16 = narrowpipe.analyze(gemm_graph(4096, 4096, 4096, DType.BF16), "xeon-6980p")
    fp32 = narrowpipe.analyze(gemm_graph(4096, 4096, 4096, DType.FP32), "xeon-6980p")
    assert bf16.ops[0].unit == "AMX" and fp32.ops[0].unit == "SIMD FMA"
    assert bf16.time_s < fp32.time_s
    assert bf16.timing.fusion == "none"   # eager, one kernel per op
    assert xeon.launch_overhead > 0


def test_sparsity_and_fp8_use_the_chip_rates():
    dense = narrowpipe.analyze(gemm_graph(8192, 8192, 8192, DType.FP8_E4M3), "h100")
    sparse = narrowpipe.analyze(gemm_graph(8192, 8192, 8192, DType.FP8_E4M3), "h100", sparse=True)
    bf16 = narrowpipe.analyze(gemm_graph(8192, 8192, 8192, DType.BF16), "h100")
    assert sparse.time_s == pytest.approx(dense.time_s / 2, rel=0.05)
    assert dense.time_s == pytest.approx(bf16.time_s / 2, rel=0.05)
    a100_fp8 = narrowpipe.analyze(gemm_graph(8192, 8192, 8192, DType.FP8_E4M3), "a100-sxm-80gb")
    a100_bf16 = narrowpipe.analyze(gemm_graph(8192, 8192, 8192, DType.BF16), "a100-sxm-80gb")
    assert a100_fp8.ops[0].time_s == pytest.approx(a100_bf16.ops[0].time_s, rel=0.3)  # no fp8 on A100


def test_all_reduce_time_is_alpha_beta_on_the_links():
    h100 = get_target("h100")
    g = Graph()
    x = g.add_input("x", TensorType(DType.BF16, (64 * 1024 * 1024,)))
    g.set_outputs(g.add_node(Op.ALL_REDUCE, [x], [x.type], {"group_size": 8}).outputs)
    r = narrowpipe.analyze(g, "h100")
    size = 64 * 1024 * 1024 * 2
    expected = 14 * h100.link_latency + 2 * 7 * size / 8 / h100.scale_up_bandwidth + h100.launch_overhead
    assert r.ops[0].bound == "interconnect"
    assert r.time_s == pytest.approx(expected, rel=1e-6)


def test_fp8_weights_halve_decode_time_and_fp8_everything_doubles_prefill_rate():
    from narrowpipe.costmodel.precision import with_precision
    from narrowpipe.models.examples import load_example
    g = load_example("llama-3-8b")
    base_decode = narrowpipe.analyze(g, "h100", seq=1)
    fp8w = with_precision(g, weights="fp8_e4m3")
    decode = narrowpipe.analyze(fp8w, "h100", seq=1)
    assert decode.weight_bytes == base_decode.weight_bytes // 2
    # memory-bound: the weight bytes halve, the GEMM latency floors (gemm_latency) do not
    assert 0.5 < decode.time_s / base_decode.time_s < 0.7
    prefill = narrowpipe.analyze(g, "h100", seq=4096)
    fp8 = narrowpipe.analyze(with_precision(g, weights="fp8_e4m3", activations="fp8_e4m3"), "h100", seq=4096)
    assert fp8.timing.dtype == "fp8_e4m3"
    assert 0.45 < fp8.time_s / prefill.time_s < 0.7                 # compute-bound: about twice the rate
    assert [v.type.dtype for v in with_precision(g, activations="fp8_e4m3").inputs] == [DType.INT64]


def test_decode_attention_stacks_the_query_heads_of_a_kv_group():
    """Multi-query decode on a TPU: the 48 query heads of a sequence meet the one K/V head as 48 rows
    of one systolic GEMM (FlashDecoding-style head-group packing), not as 48 one-row GEMMs."""
    from narrowpipe.costmodel.execution import DeviceGroup, TimingOptions
    from narrowpipe.costmodel.interpreter import interpret
    from narrowpipe.costmodel.timing import fused_program, time_program

    g = Graph("mqa")
    q = g.add_input("q", TensorType(DType.BF16, (1, 48, 1, 256)))
    k = g.add_input("k", TensorType(DType.BF16, (1, 1, 2049, 256)))
    v = g.add_input("v", TensorType(DType.BF16, (1, 1, 2049, 256)))
    n = g.add_node(Op.ATTENTION, [q, k, v], [TensorType(DType.BF16, (1, 48, 1, 256))],
                   {"layout": "bhsd", "causal": True, "scale": 1 / 16, "enable_gqa": True})
    g.set_outputs(n.outputs)
    v4 = get_target("tpu-v4")
    program = fused_program(interpret(g, {}), v4, TimingOptions())
    t = time_program(program, DeviceGroup(v4, 1)).times[0]
    clock = 275e12 / (2 * 8 * 128 * 128)
    fold = 0.5 * 128          # v4's mxu_fold_overhead x dim: the fill and drain each fold loses
    # QK^T with q held in the arrays (2 folds of 48 columns over 256 dims), the 2049 keys streaming
    # through: 2056 rows in 512-row blocks would be 5 blocks of 416 (10 folds, 2 rounds over the 8
    # arrays of 416 + 64 cycles); cut finer, 8 blocks of 264 make 16 folds, still 2 rounds, of 264 +
    # 64 (9 or more blocks take 3 rounds), + one full fill and drain. Holding K instead: 17 x 2 folds
    # of the 48 stacked query rows, 5 rounds of max(48, 128) + 64 cycles, slower.
    qk = 2 * (264 + fold) + 2 * 128
    assert qk < math.ceil(17 * 2 / 8) * (max(48, 128) + fold) + 2 * 128
    # PV with V's tiles held (17 x 2 folds over 8 arrays: 5 rounds of max(48 rows, 128) + 64), + fill
    # and drain (holding P instead: 17 folds of 256 rows, 3 rounds of 256 + 64: the same 1216)
    pv = math.ceil(17 * 2 / 8) * (max(48, 128) + fold) + 2 * 128
    assert t.compute_s == pytest.approx((qk + pv) / clock / v4.matmul_efficiency, rel=1e-6)
    # one-row GEMMs per head (no stacking, K always held) would take 48 x longer on QK^T alone
    assert t.compute_s < 48 * 2 * math.ceil(2049 / 128) / 8 * 128 / clock
