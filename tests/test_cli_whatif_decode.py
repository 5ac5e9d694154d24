"""``whatif`` and ``roofline`` time a serving step with ``--mode``/``--context`` as analyze does: a
what-if asked of a decode step (is more HBM bandwidth worth it?) must see the weights and the KV
cache streamed once per token, not the export's forward. Checked against a hand count of
Llama-3-8B's decode step from its architecture (32 layers, 8 K/V heads of 128, vocabulary 128,256)."""

from __future__ import annotations

import json

import pytest

from narrowpipe.cli import main

LAYERS, KV_HEADS, HEAD_DIM, HEADS, VOCAB, HIDDEN, PARAMS = 32, 8, 128, 32, 128_256, 4096, 8_030_261_248
BATCH, CONTEXT = 16, 4096


def _whatif(tmp_path, *extra: str) -> dict:
    out = tmp_path / "w.json"
    assert main(["whatif", "llama-3-8b", "--target", "h100", "--scale", "hbm_bandwidth=2", "-q",
                 "--json", str(out), *extra]) == 0
    return json.loads(out.read_text())


@pytest.mark.slow
def test_whatif_of_a_decode_step_streams_the_weights_and_the_cache(tmp_path, capsys):
    d = _whatif(tmp_path, "--mode", "decode", "--context", str(CONTEXT), "--set", f"batch={BATCH}")
    base = d["base"]
    assert base["dims"] == {"batch": BATCH, "seq": 1, "past": CONTEXT}
    norms = (2 * LAYERS + 1) * HIDDEN                          # RMSNorm scales: elementwise, not matmul weights
    linear_weights = PARAMS - VOCAB * HIDDEN - norms           # every matrix but the gathered embedding
    cache = LAYERS * 2 * KV_HEADS * HEAD_DIM * CONTEXT * BATCH * 2    # K and V read, bf16
    attention_flops = 2 * 2 * LAYERS * HEADS * HEAD_DIM * (CONTEXT + 1) * BATCH
    assert base["totals"]["matmul_flops"] == 2 * BATCH * linear_weights + attention_flops
    assert base["bytes_by_group"]["contraction"] == pytest.approx(2 * linear_weights, rel=0.01)
    assert base["bytes_by_group"]["attention"] == pytest.approx(cache, rel=0.01)
    # a decode step is memory-bound: doubling HBM bandwidth nearly halves it, as the hand bytes say
    assert d["speedup"] > 1.5
    assert any("--mode decode" in n for n in base["notes"])
    # the same step as analyze times it
    out = tmp_path / "a.json"
    assert main(["analyze", "llama-3-8b", "--target", "h100", "--mode", "decode", "--context", str(CONTEXT),
                 "--set", f"batch={BATCH}", "-q", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["timing"]["time_s"] == pytest.approx(base["timing"]["time_s"], rel=1e-9)
    # the plain forward of 2,048 tokens is compute-bound: the same doubling barely moves it
    assert _whatif(tmp_path, "--set", "seq=2048")["speedup"] < 1.2


def test_whatif_context_without_mode_is_refused(capsys):
    assert main(["whatif", "gpt2", "--target", "h100", "--scale", "hbm_bandwidth=2", "--context", "64"]) == 2
    assert "give --mode prefill or --mode decode" in capsys.readouterr().err


def test_roofline_of_a_decode_step_says_it_is_one_and_ranks_memory_bound_projections(tmp_path, capsys):
    out = tmp_path / "r.svg"
    assert main(["roofline", "llama-3-8b", "--target", "h100", "--mode", "decode", "--context", "512",
                 "--set", "batch=4", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert out.exists() and f"wrote {out}:" in text
    assert "--mode decode: the head runs on each sequence's last token" in text.replace("\n", " ")
    assert "(matmul, memory-bound)" in text


def test_whatif_prints_the_narrowest_pipe_before_and_after(capsys):
    """Llama-3-8B prefill of 2,048 tokens on an H100, by hand: 2 x 8.03 G params x 2,048 = 32.9 TFLOP
    at 989 TFLOP/s dense bf16 is 33 ms against 16 GB of weights at 3.35 TB/s, 4.8 ms: compute-bound.
    With 10x the compute, 3.3 ms < 4.8 ms: the memory pipe is narrowest. QA: whatif never said so."""
    flops, weights = 2 * PARAMS * 2048, 2 * PARAMS
    assert flops / 989e12 > weights / 3.35e12 > flops / 9890e12
    assert main(["whatif", "llama-3-8b", "--target", "h100", "--scale", "peak_bf16=10", "--set", "batch=1",
                 "--set", "seq=2048"]) == 0
    text = capsys.readouterr().out
    assert "narrowest pipe: compute -> memory" in text
    row = next(line for line in text.splitlines() if "narrowest" in line and "│" in line)
    assert row.split("│")[2].strip() == "compute" and row.split("│")[3].strip() == "memory"
