"""The QA pass on the CLI's outputs: each test checks a fixed defect against a hand computation."""

from __future__ import annotations

from narrowpipe.cli import main


def test_mfu_says_when_part_of_the_matmuls_ran_at_a_faster_peak(capsys):
    """QA: gpt2 on TPU v5e with int4 activations read MFU 96.6%, above the MXU fold's ~89%: MFU holds
    every FLOP against the fp32 peak (fp32 weights: six bf16 passes, 197 / 6 = 32.83 TFLOP/s) while
    attention (int4 q, k, v) runs on the int8 MXUs (394 TFLOP/s). By hand at seq 256, per layer and
    over 2 * seq * 768: attention 2 * seq, the matmuls 9216 (qkv 2304, proj 768, fc 3072, proj 3072),
    plus lm_head's 50257 once: 12 * 512 / (12 * 512 + 12 * 9216 + 50257) = 3.7% -> '4%'."""
    assert main(["analyze", "gpt2", "--target", "tpu-v5e", "--activations", "int4", "--set", "seq=256"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "MFU holds every FLOP against the fp32 as 6x bf16 peak (32.83 TFLOP/s)" in text
    share = 12 * 512 / (12 * 512 + 12 * 9216 + 50257)
    assert f"{share:.0%} of the matmul FLOPs ran at a faster peak (int4 as int8 at 394 TFLOP/s)" in text
