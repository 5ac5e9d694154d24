"""Random routing, the analyses' default expert balance: each token picks its top-k distinct experts
uniformly and independently, so a step reads the expected distinct experts ``E (1 - (1 - k/E)^T)``.
Checked against a Monte Carlo draw of routers and against hand counts of Mixtral-8x7B's bytes."""

from __future__ import annotations

import random

import pytest

import narrowpipe
from narrowpipe.costmodel.experts import (
    BALANCED,
    RANDOM,
    ExpertBalance,
    expected_reached,
    expert_parallel_reached,
    expert_parallel_rows,
    expert_rows,
    reached_experts,
)
from narrowpipe.costmodel.serving.crossover import RoutedWeights, solve_crossover
from narrowpipe.models import from_config

MIXTRAL_8X7B = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
                "num_experts_per_tok": 2}


def _simulated(tokens: int, experts: int, k: int, trials: int = 20000) -> float:
    rng = random.Random(1234)
    total = 0
    for _ in range(trials):
        seen: set[int] = set()
        for _ in range(tokens):
            seen.update(rng.sample(range(experts), k))
        total += len(seen)
    return total / trials


@pytest.mark.parametrize("tokens,experts,k,hand", [(4, 8, 2, 5.46875), (32, 256, 8, 163.31), (1, 8, 2, 2.0)])
def test_expected_distinct_experts_match_a_monte_carlo_router(tokens, experts, k, hand):
    """Mixtral at batch 4: 8 x (1 - 0.75^4) = 5.46875, not min(8, 2 x 4) = 8; DeepSeek-V3 at batch 32:
    256 x (1 - (31/32)^32) = 163.3, not 256. One token reads exactly its k experts."""
    assert expected_reached(tokens, experts, k) == pytest.approx(hand, abs=0.01)
    assert expected_reached(tokens, experts, k) == pytest.approx(_simulated(tokens, experts, k), rel=0.01)
    assert reached_experts(tokens * k, experts, k, RANDOM) == pytest.approx(hand, abs=0.01)
    assert reached_experts(tokens * k, experts, k, BALANCED) == min(experts, tokens * k)


def test_random_is_the_default_and_spreads_rows_over_the_rounded_reached_experts():
    assert ExpertBalance.parse(None) == RANDOM and ExpertBalance.parse("random") == RANDOM
    assert expert_rows(8, 8, 2, RANDOM) == (2, 2, 2, 1, 1, 0, 0, 0)      # 8 = 5 + 3 rows over round(5.47) = 5 experts
    # a training microbatch: every expert is reached, the split is balanced's
    assert expert_rows(2 * 4096, 8, 2, RANDOM) == expert_rows(2 * 4096, 8, 2, BALANCED)


def test_mixtral_decode_at_batch_4_reads_the_expected_experts():
    """Per layer two grouped GEMMs read 2 x 4096 x 14336 (up) and 14336 x 4096 (down) bf16 weights per
    reached expert: 5.46875 experts at batch 4, against 8 under balanced routing (the upper bound)."""
    g = from_config(MIXTRAL_8X7B)
    expert = 3 * 4096 * 14336 * 2
    rows = 8 * 2 * (4096 + 28672 + 14336 + 4096)      # 8 routed rows in and out of each grouped GEMM
    r = narrowpipe.analyze(g, "h200", dims={"batch": 4, "seq": 1})
    assert sum(o.bytes for o in r.ops if o.op == "grouped_dot") == 32 * (5.46875 * expert + rows)
    b = narrowpipe.analyze(g, "h200", dims={"batch": 4, "seq": 1}, expert_balance="balanced")
    assert b.bytes - r.bytes == 32 * (8 - 5.46875) * expert
    assert b.flops == r.flops and r.time_s < 0.8 * b.time_s
    assert any("5.47 of 8 experts read on average (balanced routing, the upper bound, reads 8)" in n for n in r.notes)


def test_expert_parallelism_spreads_the_reached_experts_over_the_devices():
    """ep=4 over 8 experts, 1 token (2 rows) per device: the group's 4 tokens reach 5.47 experts, 1.37
    per device (its expected 2 rows go to round(1.37) = 1 expert); DeepSeek-V3 at ep=8 and 4 tokens
    a device: 163.3 / 8 = 20.4 of each device's 32 experts, not 32."""
    assert expert_parallel_reached(2, 8, 4, 2, RANDOM) == pytest.approx(5.46875 / 4)
    assert expert_parallel_rows(2, 8, 4, 2, RANDOM) == (2, 0)
    assert expert_parallel_reached(32, 256, 8, 8, RANDOM) == pytest.approx(163.31 / 8, abs=0.01)
    assert expert_parallel_reached(32, 256, 8, 8, BALANCED) == 32


def test_the_crossover_solves_with_the_expected_expert_reads():
    """1024 experts of 1 MB, top-8; W0 1 GB, f 10 GFLOP, b 1 MB, R 100. The root satisfies
    B f = R (W0 + 1 MB x 1024 (1 - (1 - 8/1024)^B) + B b), and lies below balanced routing's 10.99
    (which reads 8 experts a sequence, more than the random draw's)."""
    batch, w = solve_crossover(100.0, 1e10, 1e6, 1e9, [RoutedWeights(10**6, 1024, 8, random=True)])
    assert batch is not None
    shared = 1e9 + 1e6 * 1024 * (1 - (1 - 8 / 1024) ** batch)
    assert w == pytest.approx(shared, rel=1e-12)
    assert batch * 1e10 == pytest.approx(100.0 * (shared + batch * 1e6), rel=1e-10)
    assert batch < 1e11 / 9.1e9
    assert solve_crossover(100.0, 1e8, 1e6, 1e9, [RoutedWeights(10**6, 1024, 8, random=True)]) == (None, 1e9 + 1024e6)
