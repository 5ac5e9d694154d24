"""The roofline crossover of a mixture of experts and of sliding-window models, checked by hand.

A decode step of B sequences reads ``W(B)`` once for the batch: for top-k routing over E experts
per MoE layer, balanced routing reaches ``min(E, k B)`` experts, all of them from ``B = E / k`` on.
The sizes below are counted from the Hugging Face configs (``configs/``, Mixtral-8x7B, Mistral-7B,
Gemma-2-9B), the rates are the catalog's; nothing is read back from the cost rules.
"""

import json
from pathlib import Path

import pytest
from rich.console import Console

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.costmodel.serving.crossover import RoutedWeights, crossover, solve_crossover
from narrowpipe.costmodel.serving.serve import replica_for, serve
from narrowpipe.render.serving import print_serving

CONFIGS = Path(__file__).parent / "configs"


def _config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def _ridge(target: str) -> float:
    t = get_target(target)
    return t.matrix_flops["bf16"] * t.matmul_efficiency / (t.memory_bandwidth * t.memory_efficiency)


def test_mixtral_reads_every_expert_at_the_crossover():
    """Mixtral-8x7B on H200 at 128 tokens (QA's hand figure: B* ~ 815; the execution model: 865).
    From batch 4 on, top-2 routing reaches all 8 experts, so W is every weight but the embedding
    table (one row per sequence): 93.1 GB, not the 2.95 GB of the non-expert weights (B* 26)."""
    E, L, H, HKV, D, F, V, X, K = 4096, 32, 32, 8, 128, 14336, 32000, 8, 2
    attention = 2 * E * E + 2 * E * HKV * D
    router, norms = E * X, 2 * E
    w = 2 * (L * (attention + X * 3 * E * F + router + norms) + E + V * E)      # bf16: layers, final norm, head
    f = 2 * (L * (attention + K * 3 * E * F + router) + V * E) + L * 4 * H * (128 + 1) * D
    b = L * 2 * HKV * D * 2 * (128 + 2)
    ridge = _ridge("h200")
    hand = ridge * w / (f - ridge * b)
    assert hand > X / K                                  # past expert saturation: every expert read
    assert w == pytest.approx(93.14e9, rel=1e-3) and hand == pytest.approx(815, abs=2)

    c = crossover(replica_for(narrowpipe.from_config(_config("mixtral")), "h200"), 128, limit=1)
    assert c.ridge == pytest.approx(ridge, rel=1e-9)
    assert c.bytes_per_sequence == b
    assert c.flops_per_sequence == pytest.approx(f, rel=1e-3)
    assert c.shared_bytes == pytest.approx(w, rel=1e-5)
    assert c.analytic == pytest.approx(hand, rel=1e-3)
    # the JSON's numbers satisfy the README's formula: W is what the crossover batch reads
    assert c.analytic == pytest.approx(c.ridge * c.shared_bytes / (c.flops_per_sequence
                                                                   - c.ridge * c.bytes_per_sequence), rel=1e-12)


def test_below_expert_saturation_each_sequence_adds_its_experts_to_b():
    """1024 experts, top-8 (saturated from batch 128), 1 MB each; W0 1 GB, f 10 GFLOP, b 1 MB, R 100.
    Below saturation W(B) = W0 + 8 MB x B: B* = R W0 / (f - R (b + 8 MB)) = 1e11 / 9.1e9 = 10.99,
    inside the regime; W(B*) = 1 GB + 8 MB x 10.99. Past saturation it would be R (W0 + 1.024 GB) /
    (f - R b) = 20.4 (which is wrong: a step of 20 sequences reads 160 experts, not 1024)."""
    routed = [RoutedWeights(expert_bytes=10**6, experts=1024, rows=8)]
    batch, w = solve_crossover(100.0, 1e10, 1e6, 1e9, routed)
    assert batch == pytest.approx(1e11 / 9.1e9, rel=1e-12)
    assert w == pytest.approx(1e9 + 8e6 * batch, rel=1e-12)
    # a dense model: the one regime, B* = R W / (f - R b); and never where f <= R b
    assert solve_crossover(100.0, 1e10, 1e6, 1e9, [])[0] == pytest.approx(1e11 / 9.9e9, rel=1e-12)
    assert solve_crossover(100.0, 1e8, 1e6, 1e9, routed) == (None, 1e9 + 1024e6)


def test_a_sliding_window_caps_the_crossovers_kv_bytes():
    """Mistral-7B (window 4096: a layer holds 4095 tokens) at 32,000 tokens: b is 4095 held tokens
    read plus the new token's keys and values read and written, 131,072 B a token: 0.537 GB, not the
    4.19 GB of 32,002 tokens. With a window of 256 the step at 255 and at 32,000 tokens is the same
    step (255 tokens held): so is its crossover."""
    per_token = 32 * 2 * 8 * 128 * 2
    c = crossover(replica_for(narrowpipe.from_config(_config("mistral7b")), "h100"), 32000, limit=1)
    assert c.bytes_per_sequence == per_token * (4095 + 2) == pytest.approx(0.537e9, rel=1e-3)
    small = replica_for(narrowpipe.from_config(_config("mistral7b"), sliding_window=256), "h100")
    short, long = crossover(small, 255, limit=1), crossover(small, 32000, limit=1)
    assert short.bytes_per_sequence == long.bytes_per_sequence == per_token * (255 + 2)
    assert long.analytic is not None and long.analytic == pytest.approx(short.analytic, rel=1e-9)


def test_gemma2_holds_its_windowed_layers_at_the_window():
    """Gemma-2-9B (42 layers, every other one windowed at 4096, 8 KV heads of 256 in bf16: 8,192 B a
    token a layer) at 8,191 tokens of context: the crossover's b holds 21 layers x 8,191 and 21 x 4,095
    tokens (2.11 GB, not 2.82 GB) plus the new token; the report's sequence holds 8,192 tokens (the new
    one appended); the headline says the per-token rate holds only until the windows fill."""
    per_layer = 2 * 8 * 256 * 2
    replica = replica_for(narrowpipe.from_config(_config("gemma2_9b")), "h100")
    c = crossover(replica, 8191, limit=1)
    assert c.bytes_per_sequence == 21 * per_layer * (8191 + 4095) + 2 * 42 * per_layer
    assert c.bytes_per_sequence - 2 * 42 * per_layer == pytest.approx(2.11e9, rel=2e-3)     # held: QA's 2.11 GB
    r = serve(replica, mode="decode", batch=1, context=8191, with_crossover=False)
    assert r.kv_bytes_per_token == 42 * per_layer
    assert r.kv_bytes_per_sequence == 21 * per_layer * (8192 + 4095)
    console = Console(record=True, width=400)
    print_serving(r, console)
    text = console.export_text()
    assert "344 kB per token per sequence until the sliding windows fill; 2.11 GB per sequence at 8,192 tokens" in text


def test_a_model_without_windows_keeps_its_per_token_headline():
    g = narrowpipe.transformer(layers=2, hidden=256, heads=4, vocab=1000, ffn=512, kv_heads=2, gated_mlp=True, seq=64)
    r = serve(g, "h100", mode="decode", batch=1, context=100, with_crossover=False)
    assert r.kv_bytes_per_sequence == r.kv_bytes_per_token * 101
    console = Console(record=True, width=400)
    print_serving(r, console)
    assert "per token per sequence (per device)" in console.export_text()
