"""Hand-computed checks of the kernel mechanisms of issue 12: GEMM latency floor and exposed
epilogue, convolution algorithms, TPU tile folding, CPU eager host overhead, depthwise layers."""

from __future__ import annotations

import dataclasses

import pytest
from graph_builders import gemm_graph  # tests/graph_builders.py

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution.common import memory_time
from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind


def conv_graph(n: int, c: int, hw: int, k: int, r: int, stride: int = 1, groups: int = 1,
               dtype: DType = DType.FP32) -> Graph:
    g = Graph("conv")
    x = g.add_input("x", TensorType(dtype, (n, c, hw, hw)))
    w = g.add_input("w", TensorType(dtype, (k, c // groups, r, r)), ValueKind.PARAM)
    out = (hw + 2 * (r // 2) - r) // stride + 1
    g.set_outputs(g.add_node(Op.CONV, [x, w], [TensorType(dtype, (n, k, out, out))],
                             {"stride": (stride, stride), "padding": (r // 2, r // 2), "dilation": (1, 1),
                              "groups": groups}).outputs)
    return g


def test_short_k_gemm_pays_its_exposed_output_write():
    """A 2048x2048 bf16 C written after a K=512 loop: with the epilogue exposed, the last wave's share
    of that write adds to the kernel (the model may pick smaller tiles, two waves, to halve it); with
    it hidden, the write overlaps the longer MMA work."""
    h100 = get_target("h100")
    exposed = dataclasses.replace(h100, gemm_epilogue_exposed=1.0)
    hidden = dataclasses.replace(h100, gemm_epilogue_exposed=0.0)
    g = gemm_graph(2048, 2048, 512)
    t1, t0 = narrowpipe.analyze(g, exposed).time_s, narrowpipe.analyze(g, hidden).time_s
    write = 2048 * 2048 * 2 / (h100.memory_bandwidth * h100.memory_efficiency)
    assert write / 2 * 0.95 <= t1 - t0 <= write * 1.05


def test_the_latency_floor_is_paid_once_per_gemm_kernel():
    b200 = get_target("b200")
    no_floor = dataclasses.replace(b200, gemm_latency=0.0)
    g = gemm_graph(256, 256, 256)
    assert narrowpipe.analyze(g, b200).time_s - narrowpipe.analyze(g, no_floor).time_s == \
        pytest.approx(b200.gemm_latency)


def _executed(graph: Graph, target) -> float:
    from narrowpipe.costmodel.execution import TimingOptions
    from narrowpipe.costmodel.interpreter import interpret
    from narrowpipe.costmodel.timing import fused_program, time_program
    prog = fused_program(interpret(graph, {}), target, TimingOptions())
    sched = time_program(prog, target)
    return sum(t.executed_flops for t in sched.times), sched.times[-1].note


def test_winograd_is_what_the_model_picks_for_fp32_3x3_and_not_for_stride_2():
    v100 = get_target("v100")
    ex, note = _executed(conv_graph(8, 128, 28, 128, 3), v100)
    assert "Winograd" in note
    assert ex < 2 * 8 * 128 * 128 * 9 * 28 * 28 / 2          # at least 2x fewer multiplies than direct
    _, note2 = _executed(conv_graph(8, 128, 28, 128, 3, stride=2), v100)
    assert "Winograd" not in note2
    _, note3 = _executed(conv_graph(8, 128, 28, 128, 3, dtype=DType.FP16), v100)   # tensor cores: implicit GEMM
    assert "Winograd" not in note3


def test_a_first_layer_with_three_channels_pads_them_to_the_tensor_core_k_step():
    """K = C x kh x kw with C padded to the MMA's K (16 on H100): a 3-channel 7x7 layer does 16/3 of its
    FLOPs on the tensor cores."""
    h100 = get_target("h100")
    g = conv_graph(8, 3, 224, 64, 7, stride=2, dtype=DType.BF16)
    ex, _ = _executed(g, h100)
    direct = 2 * 8 * 64 * 3 * 49 * 112 * 112
    assert h100.tensor_core_min_tile[2] == 16
    assert ex >= direct * 16 / 3


def test_depthwise_conv_is_a_memory_bound_vector_kernel_on_a_gpu():
    r = narrowpipe.analyze(conv_graph(8, 256, 56, 256, 3, groups=256, dtype=DType.BF16), "h100")
    assert r.ops[0].bound == "memory" and r.ops[0].unit == "CUDA cores"


def test_tpu_large_matmul_reaches_the_fold_efficiency():
    """Each fold streams a 512-row block and loses mxu_fold_overhead x dim cycles: 512 / (512 + 0.5 x 128)
    of peak on v5e, 512 / (512 + 0.5 x 256) on v6e (the measured ~92% and ~79%)."""
    for name in ("tpu-v5e", "tpu-v6e"):
        t = get_target(name)
        r = narrowpipe.analyze(gemm_graph(16384, 16384, 16384), t)
        expected = t.mxu_block_rows / (t.mxu_block_rows + t.mxu_fold_overhead * t.mxu_dim)
        assert r.timing.mfu == pytest.approx(expected, rel=0.01)


def test_cpu_whole_model_pays_the_eager_overhead_per_kernel_and_bare_ops_do_not():
    epyc = dataclasses.replace(get_target("epyc-9755"), eager_op_overhead=10e-6)
    g = narrowpipe.transformer(layers=2, hidden=64, heads=4, vocab=100, seq=8)
    model = narrowpipe.analyze(g, epyc, batch=1)
    bare = narrowpipe.analyze(g, epyc, batch=1, eager_overhead=False)
    compiled = narrowpipe.analyze(g, epyc, batch=1, fusion="full")
    compiled_bare = narrowpipe.analyze(g, epyc, batch=1, fusion="full", eager_overhead=False)
    assert model.time_s - bare.time_s == pytest.approx(model.timing.kernels * 10e-6)
    assert compiled.time_s == pytest.approx(compiled_bare.time_s)     # no eager glue when compiled


def test_cpu_depthwise_conv_runs_at_its_measured_rate():
    epyc = get_target("epyc-9755")
    rate = 1e9                                                    # input elements per second
    measured = dataclasses.replace(epyc, vector_op_flops={"conv_depthwise": rate},
                                   sources={**epyc.sources, "vector_op_flops.conv_depthwise": "assumption: test"})
    g = conv_graph(1, 96, 56, 96, 3, groups=96)
    r = narrowpipe.analyze(g, measured, eager_overhead=False)
    assert r.time_s == pytest.approx(96 * 56 * 56 / rate + epyc.launch_overhead, rel=1e-6)


def _grouped_gemm_graph(rows: int, experts: int, k: int, n: int) -> Graph:
    """x [rows, k] through every expert's w [n, k] by group (MoE experts, top-2 routing)."""
    g = Graph("grouped")
    x = g.add_input("x", TensorType(DType.BF16, (rows, k)))
    w = g.add_input("w", TensorType(DType.BF16, (experts, n, k)), ValueKind.PARAM)
    offsets = g.add_input("offsets", TensorType(DType.INT32, (experts,)))
    g.set_outputs(g.add_node(Op.GROUPED_DOT, [x, w, offsets], [TensorType(DType.BF16, (rows, n))],
                             {"rhs_contract": 2, "top_k": 2}).outputs)
    return g


def test_a_grouped_gemm_is_one_kernel_with_waves_over_all_its_experts_tiles():
    """2400 routed rows over 8 experts (300 each, balanced), K=2048, N=1024, on an H100 with one
    128x128x64 tile, flat efficiencies and operands that fit in L2 (no re-reads), by hand:

    * each expert pads its 300 rows to 3 row tiles: 8 x 3 x 8 column tiles = 192 tiles, which
      wave-quantize together over the 132 SMs: 2 waves (as 8 separate GEMMs: 8 one-wave launches);
    * compute = 2 waves x (2 x 128 x 128 x 64 x 32 K steps) / (peak x efficiency / SMs), plus a fill
      per wave;
    * memory = the rows, all 8 experts' weights and the offsets read, the [2400, 1024] output
      written; the last wave's share of that write (1/2 x gemm_epilogue_exposed) is exposed after
      the main loop;
    * one launch and one latency floor for the whole grouped kernel."""
    h100 = get_target("h100")
    t = dataclasses.replace(h100, tile_shapes=((128, 128, 64),), matmul_curve=(), bandwidth_curve=(),
                            matmul_skinny_curve=(), gemm_split_k_fill=1.0)          # split K below 132 tiles
    rows, experts, k, n = 2400, 8, 2048, 1024
    reads = 2 * rows * k + experts * 2 * n * k + 4 * experts
    writes = 2 * rows * n
    assert reads < t.l2_bytes
    tiles = experts * 3 * (n // 128)
    waves = -(-tiles // t.sm_count)
    assert (tiles, waves) == (192, 2)
    per_sm = t.matrix_flops["bf16"] * t.matmul_efficiency / t.sm_count
    compute = waves * 2 * 128 * 128 * 64 * (k // 64) / per_sm + waves * t.gemm_wave_overhead
    bw = t.memory_bandwidth * t.memory_efficiency
    exposed = writes * t.gemm_epilogue_exposed / waves
    memory = (reads + writes - exposed) / bw
    assert compute > memory                                        # compute-bound: the tiles set the time
    hand = max(compute, memory) + exposed / bw + t.launch_overhead + t.gemm_latency
    r = narrowpipe.analyze(_grouped_gemm_graph(rows, experts, k, n), t)
    assert r.timing.kernels == 1
    assert r.time_s == pytest.approx(hand, rel=1e-9)
    # one latency floor for all eight experts
    no_floor = narrowpipe.analyze(_grouped_gemm_graph(rows, experts, k, n), dataclasses.replace(t, gemm_latency=0.0))
    assert r.time_s - no_floor.time_s == pytest.approx(t.gemm_latency)


def test_a_weight_only_quantized_gemm_reads_its_narrow_weights_beside_the_new_terms():
    """A decode GEMM (16 rows) with int4 weights on an H100 (one 128x128x64 tile, flat efficiencies): the
    memory term reads the rows and the half-byte weights, the exposed epilogue is the whole (one-wave)
    output write times gemm_epilogue_exposed, and launch plus latency floor are paid once; the
    dequantization (2 vector ops per weight element, one row tile) hides under the memory time."""
    h100 = get_target("h100")
    t = dataclasses.replace(h100, tile_shapes=((128, 128, 64),), matmul_curve=(), bandwidth_curve=(),
                            matmul_skinny_curve=(), gemm_split_k_fill=1.0)          # split K below 132 tiles
    m, k, n = 16, 8192, 8192
    g = Graph("w4")
    x = g.add_input("x", TensorType(DType.BF16, (m, k)))
    w = g.add_input("w", TensorType(DType.INT4, (k, n)), ValueKind.PARAM)
    g.set_outputs(g.add_node(Op.DOT, [x, w], [TensorType(DType.BF16, (m, n))],
                             {"lhs_contract": (1,), "rhs_contract": (0,)}).outputs)
    reads, writes = 2 * m * k + k * n // 2, 2 * m * n
    bw = t.memory_bandwidth * t.memory_efficiency
    # 64 column tiles of a 16-row tile (the tile shrinks to the 16 rows): 64 < 132 SMs, so K may split
    # up to min(132 // 64, 128 K steps, 16) = 2 ways; but a split writes and reads back fp32 partial
    # sums (2 x 2 x m x n x 4 bytes) in a kernel bound by memory, so the fastest plan splits nothing
    partials = 0
    exposed = writes * t.gemm_epilogue_exposed
    memory = (reads + partials + writes - exposed) / bw
    dequant = 2 * k * n / t.vector_flops["fp32"]
    assert dequant < memory
    hand = memory + exposed / bw + t.launch_overhead + t.gemm_latency
    r = narrowpipe.analyze(g, t)
    assert r.ops[0].bound == "memory"
    assert r.time_s == pytest.approx(hand, rel=1e-9)


def test_a_tpu_runs_a_depthwise_convolution_on_its_vector_units_memory_bound():
    """ConvNeXt's 7x7 depthwise layer (96 channels, 56x56, batch 256, bf16) on a TPU v6e: a
    per-channel window on the VPU, bound by its compulsory bytes (input and output once, 308 MB:
    0.22 ms at the catalog's bandwidth), as on GPUs and CPUs. As a grouped GEMM each channel's N = 1
    and K = 49 padded to the 256-wide arrays executed 10.1 TFLOP for 7.55 GFLOP of work: 13.8 ms."""
    v6e = get_target("tpu-v6e")
    r = narrowpipe.analyze(conv_graph(256, 96, 56, 96, 7, groups=96, dtype=DType.BF16), v6e)
    (k,) = [t for t in r.timeline if t.flops]
    assert k.flops == 2 * 256 * 96 * 56 * 56 * 49 and k.executed_flops == k.flops    # no array padding
    nbytes = 2 * (2 * 256 * 96 * 56 * 56) + 2 * 96 * 49
    assert k.bound == "memory" and k.unit == "VPU"
    assert r.time_s == pytest.approx(memory_time(v6e, nbytes) + v6e.launch_overhead, rel=1e-6)
