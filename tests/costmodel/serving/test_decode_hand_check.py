"""Acceptance: batch-1 decode of an 8B model (Llama-3-8B sizes) in bf16 on H100, checked by hand.

Independent of the cost rules: the weights a step reads and the KV cache are counted here from the
architecture, the bandwidth and launch overhead are the H100 catalog figures.
"""

import dataclasses

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.costmodel.serving.crossover import crossover
from narrowpipe.costmodel.serving.serve import replica_for, serve

L, E, H, HKV, D, F, V = 32, 4096, 32, 8, 128, 14336, 128256


@pytest.fixture(scope="module")
def replica():
    g = narrowpipe.transformer(layers=L, hidden=E, heads=H, vocab=V, ffn=F, kv_heads=HKV, gated_mlp=True, seq=2048)
    return replica_for(g, "h100")


def _weights_read() -> int:
    """Every weight a decode step streams: the layers, final norm and head; of the embedding table
    only the one row gathered."""
    per_layer = E * E + 2 * E * HKV * D + E * E + 3 * E * F + 2 * E
    return 2 * (L * per_layer + E + V * E + E)


#: GEMM kernels of a step: q, k, v, o, gate, up and down per layer, and the head.
_GEMMS = 7 * L + 1


def _kv_per_token() -> int:
    return L * 2 * HKV * D * 2


def test_batch1_decode_is_memory_bound_at_weights_plus_kv_over_bandwidth(replica):
    h100 = get_target("h100")
    context = 2048
    r = serve(replica, mode="decode", batch=1, context=context, with_crossover=False)
    assert r.bound == "memory"
    assert r.kv_bytes_per_token == _kv_per_token() == 131072
    moved = _weights_read() + _kv_per_token() * (context + 1)        # the cache and the new token, read once
    # each of the 7 x 32 + 1 GEMM kernels (q, k, v, o, gate, up, down per layer; the head) also pays
    # the GEMM latency floor (first loads, pipeline fill, last epilogue) beyond its launch
    hand = moved / (h100.memory_bandwidth * h100.memory_efficiency) + r.decode.kernels * h100.launch_overhead \
        + _GEMMS * h100.gemm_latency
    assert r.tpot_s == pytest.approx(hand, rel=0.03)
    assert r.output_tokens_per_s == pytest.approx(1 / r.tpot_s)


def _hand_crossover(context: int) -> float:
    h100 = get_target("h100")
    ridge = h100.matrix_flops["bf16"] * h100.matmul_efficiency / (h100.memory_bandwidth * h100.memory_efficiency)
    matmul_params = L * (E * E + 2 * E * HKV * D + E * E + 3 * E * F) + V * E
    f = 2 * matmul_params + L * 4 * H * (context + 1) * D              # QK^T and PV over context + 1 keys
    b = _kv_per_token() * (context + 2)
    return ridge * _weights_read() / (f - ridge * b)


@pytest.fixture(scope="module")
def replica_without_wave_fill():
    """The H100 without the per-wave fill and drain of its GEMM kernels (``gemm_wave_overhead``): the
    ridge point knows only peak rates, so this is the execution model it describes."""
    g = narrowpipe.transformer(layers=L, hidden=E, heads=H, vocab=V, ffn=F, kv_heads=HKV, gated_mlp=True, seq=2048)
    return replica_for(g, dataclasses.replace(get_target("h100"), gemm_wave_overhead=0.0))


@pytest.mark.parametrize("context", [0, 128])
def test_crossover_is_the_ridge_point_adjusted_for_kv_traffic(replica, replica_without_wave_fill, context):
    c = crossover(replica_without_wave_fill, context, limit=1024)
    ridge = 989e12 * 0.8033 / (3.35e12 * 0.85)
    assert c.ridge == pytest.approx(ridge, rel=1e-6)
    assert c.analytic == pytest.approx(_hand_crossover(context), rel=0.01)
    if context == 0:
        assert c.analytic == pytest.approx(ridge, rel=0.02)              # 2 B/param weights, 2 FLOPs/param
    # the execution model pads rows to tensor-core tiles, so its first compute-bound batch is near B*
    assert c.modelled is not None and abs(c.modelled / c.analytic - 1) < 0.15
    # each wave's fill is compute time the ridge point does not count: with it, the step turns
    # compute-bound no later. At context 128 it turns earlier, at 321 (385 without the fill): from 321
    # the GEMMs' rows pad to 384, whose compute falls 0.04 ms short of the step's memory time without
    # the fill and passes it with the fill's 0.27 ms
    filled = crossover(replica, context, limit=1024)
    assert filled.modelled is not None and filled.modelled <= c.modelled


def test_long_context_gqa_decode_never_turns_compute_bound(replica):
    c = crossover(replica, 2048, limit=64)
    assert c.analytic is None                # one sequence's attention is below the ridge point
    assert c.flops_per_sequence < c.ridge * c.bytes_per_sequence


def test_the_fp8_crossover_takes_the_fp8_rate_that_carries_the_gemm_flops():
    """W8A8 FP8 (ModelOpt/TensorRT-LLM): the 224 projections read FP8 at H100's FP8 rate, the head stays
    bf16. The projections carry 93% of the GEMM FLOPs, so the ridge is FP8's (1979 over 989 TFLOP/s:
    558 FLOP/B, twice bf16's 279) and B* = R W / (f - R b) with W the FP8 projections (1 B/param), the
    bf16 head and norms and one embedding row: about 804 at 128 tokens (it took the head's bf16 rate: 217)."""
    h100 = get_target("h100")
    g = narrowpipe.transformer(layers=L, hidden=E, heads=H, vocab=V, ffn=F, kv_heads=HKV, gated_mlp=True, seq=2048)
    c = crossover(replica_for(g, "h100", weights="fp8_e4m3", gemm_inputs="fp8_e4m3"), 128, limit=4)
    ridge = h100.matrix_flops["fp8_e4m3"] * h100.matmul_efficiency / (h100.memory_bandwidth * h100.memory_efficiency)
    assert c.ridge == pytest.approx(ridge, rel=1e-6) and 550 < c.ridge < 565
    projections = L * (E * E + 2 * E * HKV * D + E * E + 3 * E * F)
    w = projections + 2 * (L * 2 * E + E + V * E + E)
    f = 2 * (projections + V * E) + L * 4 * H * (128 + 1) * D
    b = _kv_per_token() * (128 + 2)
    assert w == pytest.approx(8.03e9, rel=1e-3) and f == pytest.approx(1.508e10, rel=1e-3)
    assert c.analytic == pytest.approx(ridge * w / (f - ridge * b), rel=0.01)
    assert 790 < c.analytic < 820
