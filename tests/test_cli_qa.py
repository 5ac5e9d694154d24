"""The QA pass on the CLI's outputs: each test checks a fixed defect against a hand computation."""

from __future__ import annotations

import json

import pytest

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


def test_whatif_prices_the_scaled_chip_as_the_base_it_modifies(tmp_path, capsys):
    """QA: --price h100=2 priced only the base; the scaled chip took the catalog's $6.88/h. By hand
    from the JSON: cost = time x $2/h / 3600 s/h on both sides."""
    out = tmp_path / "wp.json"
    assert main(["whatif", "gpt2", "--target", "h100", "--scale", "compute=2", "--price", "h100=2",
                 "--set", "seq=128", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    for side in ("base", "scaled"):
        t = doc[side]["timing"]
        assert t["price_per_hour"] == 2.0 and t["price_basis"] == "given"
        assert t["cost_usd"] == pytest.approx(t["time_s"] * 2.0 / 3600, rel=1e-12)
    # a price on the scaled name itself wins (the last '=' splits a pair: the name has its own)
    assert main(["whatif", "gpt2", "--target", "h100", "--scale", "compute=2", "--price", "h100=2",
                 "--price", "h100-sxm@compute=2=3", "--set", "seq=128", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert (doc["base"]["timing"]["price_per_hour"], doc["scaled"]["timing"]["price_per_hour"]) == (2.0, 3.0)


def test_whatif_shows_the_fit_of_both_sides_and_the_notes_they_share(monkeypatch, capsys):
    """QA: llama-3-70b on one H100 (bf16 weights 2 x 70.55 G params = 141 GB, more than the 85.5 GB
    the H100 leaves) printed only the speed-up; doubling its memory flipped the fit and printed
    'moved no kernel's time'."""
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["whatif", "llama-3-70b", "--target", "h100", "--scale", "hbm_bandwidth=2", "--set", "seq=1"]) == 0
    text = capsys.readouterr().out
    row = next(ln for ln in text.splitlines() if ln.strip("│ ").startswith("memory"))
    assert row.count("does not fit: 141 GB > 85.5 GB") == 2
    assert "does not fit: 141 GB needed, 85.5 GB per device" in text     # the note both sides share
    assert main(["whatif", "llama-3-70b", "--target", "h100", "--scale", "memory_capacity=2", "--set", "seq=1"]) == 0
    text = capsys.readouterr().out
    row = next(ln for ln in text.splitlines() if ln.strip("│ ").startswith("memory"))
    assert "does not fit: 141 GB > 85.5 GB" in row and "fits: 141 GB of 171 GB" in row   # 2 x 85.5
    assert "the model fits the modified chip (it did not fit the base)" in text
    assert "base: does not fit" in text
