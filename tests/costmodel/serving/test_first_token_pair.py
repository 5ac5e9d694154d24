"""TensorRT-LLM 0.9's H100/H200 first-token pairs read by hand (benchmarks/first_token_pair.py): the
two GPUs share GH100's compute and differ in HBM (3.35 against 4.8 TB/s, NV-H100 / NV-H200), so a
pair's difference is the bytes streamed; and the model's 128-token prefill by kernel class."""

import pytest
from benchmark_module import load_benchmark  # tests/benchmark_module.py

rows = load_benchmark("serving_gpu_rows")
ftp = load_benchmark("first_token_pair")

L, E, F, V = 32, 4096, 11008, 32000                    # Llama 2 7B (its config.json)
# FP8 linear layers (one byte each); norms, the embedding and lm_head stay in fp16 (ModelOpt's FP8
# configuration excludes *lm_head*; the embedding is a gather): the weights each GPU holds ...
FP8_WEIGHTS = L * 4 * E * E + L * 3 * E * F + 2 * (L * 2 * E + E) + 2 * 2 * V * E
# ... and those a prefill streams (the embedding table is only gathered, one row per token)
FP8_STREAMED = FP8_WEIGHTS - 2 * V * E


def _pred(target: str, input_len: int):
    (row,) = [r for r in rows.ROWS if (r.source, r.target, r.model, r.input_len, r.output_len)
              == ("TRTLLM-0.9", target, "Llama 2 7B", input_len, 1)]
    return rows.predict(row)


@pytest.fixture(scope="module")
def pair_128():
    (p,) = [p for p in ftp.pairs([_pred("h100-sxm", 128), _pred("h200", 128)])]
    return p


def test_the_h100_h200_difference_is_the_fp8_weights_read_once_at_the_peak(pair_128):
    inv = 1 / 3.35e12 - 1 / 4.8e12
    assert ftp.inverse_rates() == pytest.approx(inv, rel=1e-9)
    assert pair_128.published == pytest.approx((6.3e-3, 5.7e-3))
    streamed = (6.3e-3 - 5.7e-3) / inv
    assert pair_128.streamed("published") == pytest.approx(streamed, rel=1e-9)
    assert pair_128.weight_bytes == pytest.approx(FP8_WEIGHTS, rel=0.01)
    assert streamed == pytest.approx(FP8_STREAMED, rel=0.02)         # the weights, once, at 3.35 and 4.8 TB/s
    assert pair_128.fixed("published") == pytest.approx(6.3e-3 - streamed / 3.35e12, rel=1e-9)
    assert pair_128.fixed("published") == pytest.approx(4.31e-3, abs=0.02e-3)


def test_the_model_lacks_bandwidth_independent_time_at_128_tokens(pair_128):
    """The model's own split: more bytes moved between the GPUs than published, less time besides."""
    assert pair_128.streamed("predicted") > pair_128.streamed("published")
    assert pair_128.fixed("published") - pair_128.fixed("predicted") > 2e-3


def test_composition_of_the_128_token_prefill_by_hand():
    """Seven projections per layer and the head are the matmul kernels; each pays the H100's 1 us
    launch plus its 5 us GEMM latency floor (h100-sxm.toml); every other kernel the launch only."""
    comp = {r[0]: r for r in ftp.composition(rows.model_graph("Llama 2 7B"), "h100-sxm", rows.FORMATS["fp8"], 128)}
    assert int(comp["matmul"][1]) == 7 * L
    assert float(comp["matmul"][4]) == pytest.approx(7 * L * 6e-3, abs=0.01)
    assert int(comp["matmul: lm_head"][1]) == 1
    assert int(comp["attention"][1]) == L
    other = int(comp["other"][1])
    assert float(comp["other"][4]) == pytest.approx(other * 1e-3, abs=0.01)
    total = int(comp["**all**"][1])
    assert total == 7 * L + 1 + L + other


def test_summing_the_gemms_adds_at_least_their_math_at_the_fp8_peak():
    """The summed-GEMM hypothesis adds each memory-bound GEMM's math: no less than the 128 tokens'
    FLOPs through the seven projections and the last token's head at 1,979 TFLOP/s."""
    p = _pred("h100-sxm", 128)
    added = ftp.serialized_gemms(p, rows.model_graph("Llama 2 7B"), rows.FORMATS["fp8"]) - p.ttft_s
    flops = 2 * 128 * L * (4 * E * E + 3 * E * F) + 2 * V * E
    assert flops / 1979e12 < added < 3 * flops / 1979e12
