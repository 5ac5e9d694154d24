"""Published GPU serving rows (benchmarks/serving_gpu_rows.py): the bars reported in
benchmarks/results/serving_validate.md, and one row's terms checked by hand.

The published figures are the independent reference: TensorRT-LLM 0.9's performance tables, NVIDIA's
DGX H100 blog and OCI's MI300X blog (sources in the benchmark module). Known misses are strict xfails
whose reason names the mechanism the results point at.
"""

import pytest
from benchmark_module import load_benchmark  # tests/benchmark_module.py

from narrowpipe.backends import get_target
from narrowpipe.costmodel.serving.serve import replica_for

rows = load_benchmark("serving_gpu_rows")


def _row(source: str, target: str, model: str, batch: int, input_len: int, output_len: int):
    (row,) = [r for r in rows.ROWS if (r.source, r.target, r.model, r.batch, r.input_len, r.output_len)
              == (source, target, model, batch, input_len, output_len)]
    return row


def test_rows_state_every_part_of_the_question():
    """Each row has a source, a known model, a format and a metric, and its layout fits the system."""
    for r in rows.ROWS:
        assert r.source in ("TRTLLM-0.9", "NV-H100-BLOG", "OCI-405B")
        assert r.model in rows.MODELS and r.formats in rows.FORMATS and r.published > 0
        assert r.tp in (1, 2, 4, 8) and r.batch >= 1 and r.input_len >= 1 and r.output_len >= 1
    assert len(rows.ROWS) == 3 * 12 + 1 + 9       # every Llama-2 row of three TRT-LLM tables, 1 + 9 blog rows


@pytest.mark.parametrize("target, batch", [("a100-sxm-80gb", 16), ("h100-sxm", 56), ("h200", 56)])
def test_memory_bound_long_generations_are_within_ten_percent(target, batch):
    """TensorRT-LLM 0.9, Llama 2 7B, 2,048 tokens in and 2,048 out: decode steps bound by the
    weights and the KV cache; the reported bar for these rows is 10%."""
    p = rows.predict(_row("TRTLLM-0.9", target, "Llama 2 7B", batch, 2048, 2048))
    assert p.decode_bound == "memory" and p.prefill_share < 0.1
    assert abs(p.time_error) <= 0.10


@pytest.mark.xfail(strict=True, reason="known gap: 24% fast since small NCCL all-reduces run NCCL's LL ring (16 us "
                   "over 8 H100s, as nccl-tests measure 15-25 us) instead of 14 Simple steps (43 us, which matched "
                   "here); the blog's 12.9 ms per token leaves ~35 us per collective of TensorRT-LLM 0.5's stack, "
                   "whose per-call costs the source does not break down (serving_validate.md)")
def test_batch_one_tp8_llama_70b_on_a_dgx_h100_is_within_twenty_percent():
    """NVIDIA's blog: 1.7 s for 2,048 in and 128 out at batch 1 on eight H100s (TensorRT-LLM 0.5)."""
    p = rows.predict(_row("NV-H100-BLOG", "h100-sxm", "Llama 2 70B", 1, 2048, 128))
    assert p.predicted == pytest.approx(1.7, rel=0.2)


@pytest.mark.xfail(strict=True, reason="known gap: 23% fast since its 252 all-reduces a token are priced as vLLM's "
                   "one-shot kernel on the MI300X mesh (5 us each, collective_validate.md); it passed while they were "
                   "14 RCCL Simple ring steps (43 us); the blog's vLLM build (custom all-reduce or RCCL) and the "
                   "rest of its per-token time are not stated (serving_validate.md)")
def test_batch_one_405b_on_eight_mi300x_is_within_fifteen_percent():
    """OCI: Llama 3.1 405B FP8, 128 in and 128 out, vLLM's benchmark_latency on eight MI300X."""
    p = rows.predict(_row("OCI-405B", "mi300x", "Llama 3.1 405B", 1, 128, 128))
    assert abs(p.time_error) <= 0.15


@pytest.mark.xfail(strict=True, reason="known gap: predicted 28% too fast; the model's prefill reaches 30% of the "
                   "eight H100s' FP8 peak, TensorRT-LLM 0.9's 22% (GEMM efficiency; serving_validate.md)")
def test_fp8_prefill_of_llama_70b_on_eight_h100_is_within_twenty_percent():
    p = rows.predict(_row("TRTLLM-0.9", "h100-sxm", "Llama 2 70B", 1, 2048, 1))
    assert abs(p.time_error) <= 0.2


@pytest.mark.xfail(strict=True, reason="known gap, no mechanism: each sequence beyond batch 32 adds 56 ms to OCI's "
                   "run (17% of the FP8 peak), 32 ms to the model's (30%) (serving_validate.md)")
def test_batch_256_405b_on_eight_mi300x_is_within_twenty_percent():
    p = rows.predict(_row("OCI-405B", "mi300x", "Llama 3.1 405B", 256, 128, 128))
    assert abs(p.time_error) <= 0.2


def test_a100_llama_7b_row_by_hand():
    """TensorRT-LLM 0.9, A100 fp16, Llama 2 7B, batch 16, 2,048 in and 2,048 out: the throughput is
    batch x output tokens over the prefill and 2,047 decode steps; a decode step at 3,000 cached
    tokens is the weights plus the cache over the A100's achievable bandwidth plus its kernels'
    launch overhead and GEMM latency floors (sizes from the Llama 2 config, not from the graph)."""
    row = _row("TRTLLM-0.9", "a100-sxm-80gb", "Llama 2 7B", 16, 2048, 2048)
    p = rows.predict(row)
    r = p.report
    assert r.output_tokens_per_s == pytest.approx(16 * 2048 / r.e2e_s, rel=1e-9)
    layers, e, ffn, vocab = 32, 4096, 11008, 32000
    kv_per_token = layers * 2 * e * 2                               # K and V of 32 heads x 128, fp16
    weights_read = 2 * (layers * (4 * e * e + 3 * e * ffn + 2 * e) + e + vocab * e)   # embedding: one row a token
    assert r.kv_bytes_per_token == kv_per_token
    a100 = get_target("a100-sxm-80gb")
    replica = replica_for(rows.model_graph("Llama 2 7B"), "a100-sxm-80gb", **rows.FORMATS["fp16"])
    first, step = replica.step(16, 1, 2048), replica.step(16, 1, 3000)
    # every decode step, between the first (2,048 cached tokens) and the last (4,094), each paid once
    assert r.ttft_s + 2047 * first.time_s < r.e2e_s < r.ttft_s + 2047 * r.decode.time_s
    moved = weights_read + 16 * kv_per_token * 3001
    gemms = 7 * layers + 1
    hand = moved / (a100.memory_bandwidth * a100.memory_efficiency) + step.kernels * a100.launch_overhead \
        + gemms * a100.gemm_latency
    assert step.bound == "memory"
    assert step.time_s == pytest.approx(hand, rel=0.05)
