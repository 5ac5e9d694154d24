"""Capacity under a latency target: the largest batch meeting TPOT/TTFT and memory, per layout."""

import pytest

import narrowpipe
from narrowpipe.costmodel.serving.capacity import plan_capacity
from narrowpipe.costmodel.serving.generate import steady_state
from narrowpipe.costmodel.serving.serve import replica_for


@pytest.fixture(scope="module")
def small():
    return narrowpipe.transformer(layers=4, hidden=1024, heads=16, vocab=32000, ffn=4096, kv_heads=4,
                                  gated_mlp=True, seq=128)


def test_each_layout_runs_the_largest_batch_that_meets_the_target(small):
    plan = plan_capacity(small, "h100", rate=50, input_len=512, output_len=64, tpot=0.004, max_tp=4)
    assert [c.layout for c in plan.candidates] == ["TP1", "TP2", "TP4"]
    for c in plan.feasible:
        assert c.tpot_s <= 0.004
        if c.limited_by == "TPOT":
            layout = dict(TP1=1, TP2=2, TP4=4)[c.layout]
            nxt = steady_state(replica_for(small, "h100", tp=layout), c.batch + 1, 512, 64)
            assert nxt.tpot_s > 0.004
        assert c.replicas * c.tokens_per_s / 64 >= 50 > (c.replicas - 1) * c.tokens_per_s / 64
    best = plan.best_throughput
    assert best is max(plan.feasible, key=lambda c: c.tokens_per_s_per_device)
    assert plan.best_latency.min_tpot_s == min(c.min_tpot_s for c in plan.candidates)


def test_an_unreachable_target_names_why(small):
    plan = plan_capacity(small, "h100", rate=1, input_len=512, output_len=64, tpot=1e-5, max_tp=1)
    assert plan.best_throughput is None
    assert "TPOT" in plan.candidates[0].why_not and "misses the target" in plan.candidates[0].why_not


def test_a_dataflow_layout_adds_chips_for_its_kv_cache(small):
    r = replica_for(small, "groq-lpu")
    assert r.devices(1, 128) <= r.devices(256, 4096)
    assert r.memory(256, 4096).fits
