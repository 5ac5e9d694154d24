"""The fused attention kernel's fixed cost per query block, by hand on an H100 SXM."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.backends.defaults import ATTENTION_QBLOCK_PROLOGUE
from narrowpipe.calibration.kernel_fit import kernel_cases, predict
from narrowpipe.calibration.kernel_measurements import KernelMeasurement


def _attention_time(b: int, h: int, s: int, d: int, causal: int = 0) -> float:
    """Predicted seconds of one FlashAttention-style forward (launch included)."""
    m = KernelMeasurement("test", "h100-sxm", "attention", "fp16", {"b": b, "h": h, "s": s, "d": d, "causal": causal},
                          1e-3, "stream", "fused")
    (case,) = kernel_cases([m])
    return predict(case, narrowpipe.get_target("h100-sxm"))


def test_compute_bound_attention_pays_one_key_block_per_query_block_by_hand():
    """132 heads x 1024 tokens, head dim 128: 132 x 8 = 1,056 query blocks of 128 rows on 132 SMs are
    8 full waves; each block runs 8 key blocks of 128 (2 x 128 x 128 x 256 FLOPs each) plus the
    prologue/epilogue worth ATTENTION_QBLOCK_PROLOGUE (1) of them, at 0.655 x 989 TFLOP/s / 132 per SM.
    Exp (132 x 1024^2 / 4.19e12 = 33 us) and traffic (138 MB at 0.85 x 3.35 TB/s = 48 us) do not bind."""
    t = narrowpipe.get_target("h100-sxm")
    assert t.attention_efficiency == 0.655 and t.sm_count == 132
    block = 2 * 128 * 128 * 2 * 128
    per_sm = 989e12 * 0.655 / 132
    expected = 8 * (8 + ATTENTION_QBLOCK_PROLOGUE) * block / per_sm + t.launch_overhead
    assert expected == pytest.approx(124.1e-6, rel=0.01)        # the hand figure
    assert _attention_time(1, 132, 1024, 128) == pytest.approx(expected, rel=1e-9)


def test_short_rows_pay_the_prologue_in_proportion_to_their_key_blocks():
    """Same FLOPs and the same 8 waves of query blocks: 512 tokens (4 key blocks per query block) take
    (4 + 1) / 4 of their MMA time, 4k tokens (32 key blocks) (32 + 1) / 32: per FLOP the short row is
    (5/4) / (33/32) = 1.212x slower (FA3 Fig. 5 bars: 638 / 467 = 1.37x between 4k and 512)."""
    launch = narrowpipe.get_target("h100-sxm").launch_overhead
    short = _attention_time(8, 132, 512, 128) - launch      # 8 x 132 x 4 = 4,224 blocks = 32 waves
    long = _attention_time(1, 132, 4096, 128) - launch      # 132 x 32 = 4,224 blocks
    flops_short, flops_long = 4 * 8 * 132 * 512**2 * 128, 4 * 132 * 4096**2 * 128
    ratio = (short / flops_short) / (long / flops_long)
    assert ratio == pytest.approx((5 / 4) / (33 / 32), rel=1e-9)


def test_split_kv_decode_pays_the_prologue_per_share_and_stays_memory_bound():
    """Llama-3-8B decode attention at 8,192 cached tokens on an H100 SXM: 32 query heads in 8 KV
    groups of 4 rows (one 16-row MMA block each), 65 key blocks split 16 ways over 132 SMs (one
    wave of 8 x 16 shares, 5 key blocks + 1 prologue each: 6 x 2 x 16 x 128 x 256 FLOPs at
    0.655 x 989 / 132 TFLOP/s per SM = 1.28 us); the KV cache, 2 x 8 x 8,193 x 128 x 2 bytes, plus
    Q and O (2 x 32 x 128 x 2) at 0.85 x 3.35 TB/s is 11.8 us, so the prologue leaves decode alone."""
    g = narrowpipe.transformer(layers=1, hidden=4096, heads=32, vocab=1000, kv_heads=8, gated_mlp=True,
                               ffn=14336, seq=1, past=8192)
    t = narrowpipe.get_target("h100-sxm")
    r = narrowpipe.analyze(g, t, seq=1)
    (attn,) = [k for k in r.timeline if k.op == "attention"]
    moved = 2 * 8 * 8193 * 128 * 2 + 2 * 32 * 128 * 2
    assert attn.bytes == moved
    mma = 6 * 2 * 16 * 128 * 256 / (989e12 * 0.655 / 132)
    assert mma == pytest.approx(1.28e-6, rel=0.01)                      # the hand figure
    assert attn.compute_s == pytest.approx(mma, rel=1e-9)
    assert attn.bound == "memory"
    assert attn.time_s == pytest.approx(moved / (3.35e12 * 0.85) + t.launch_overhead, rel=1e-9)
