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


def test_a_dataflow_batch_takes_the_fewest_chips_for_the_rate(small):
    """On Groq the chips grow with the batch's KV cache, so the largest batch meeting TPOT is not the
    cheapest fleet. Reference: an exhaustive search over every batch meeting the targets, each
    fleet ceil(demand / (b / TPOT(b))) x chips(b) by hand from steady_state and the replica."""
    from math import ceil
    rate, inp, out, tpot = 200, 512, 64, 0.004
    plan = plan_capacity(small, "groq-lpu", rate=rate, input_len=inp, output_len=out, tpot=tpot)
    (c,) = plan.feasible
    r = replica_for(small, "groq-lpu")
    fleets = {}
    for b in range(1, 4097):
        s = steady_state(r, b, inp, out)
        if s.tpot_s > tpot:
            break
        fleets[b] = ceil(rate * out / (b / s.tpot_s)) * r.devices(b, inp + out)
    largest = max(fleets)
    assert c.total_devices == min(fleets.values()) == fleets[c.batch]
    assert c.total_devices < fleets[largest]          # the largest batch costs more chips
    assert c.replicas * c.tokens_per_s >= rate * out


def test_the_answer_and_cheapest_rank_the_rates_fleet():
    """Llama-3-70B on H100s at 1 req/s of 2048/256, TPOT <= 50 ms: TP4 has the most tokens/s per
    device but a replica is 4 devices, and one TP2 replica (2 devices) already serves the 256 tok/s;
    the answer is the 2. By hand: each candidate's fleet is ceil(1 x 256 / tokens/s) x devices, its
    $/h that x the given $1/h. (At 5.3 req/s TP2's 3 replicas, 6 devices, beat TP4's 2, 8, while the
    engines' all-reduce was priced as NCCL's 14-step ring; with their one-shot kernel one TP4 replica
    holds batch 71 under 50 ms and serves the 5.3 alone.)"""
    from math import ceil

    from narrowpipe.models.examples import load_example
    plan = plan_capacity(load_example("llama-3-70b"), "h100", rate=1.0, input_len=2048, output_len=256,
                         tpot=0.050, max_tp=8, price={"h100-sxm": 1.0})
    for c in plan.feasible:
        assert c.total_devices == ceil(1.0 * 256 / c.tokens_per_s) * c.devices
        assert c.fleet_price_per_hour == pytest.approx(c.total_devices * 1.0)
        assert c.cost_per_million_tokens_at_rate == pytest.approx(c.total_devices / 3600 / (1.0 * 256) * 1e6)
    most_per_device = max(plan.feasible, key=lambda c: c.tokens_per_s_per_device)
    assert most_per_device.layout == "TP4" and most_per_device.total_devices == 4
    assert plan.best_throughput.layout == "TP2" and plan.best_throughput.total_devices == 2
    assert plan.cheapest is plan.best_throughput


def test_prices_are_per_target_and_nothing_priced_is_no_cheapest(small):
    plan = plan_capacity(small, ["h100", "h200"], rate=10, input_len=512, output_len=64, tpot=0.004, max_tp=1,
                         price={"h100-sxm": 1.0})
    by = {c.target: c for c in plan.feasible}
    assert by["h100-sxm"].price_per_hour == 1.0
    assert by["h200"].price_per_hour == narrowpipe.get_target("h200").price_per_hour
    assert plan.cheapest.target == "h100-sxm"
    unpriced = plan_capacity(small, "groq-lpu", rate=10, input_len=512, output_len=64, tpot=0.004)
    assert unpriced.feasible and unpriced.cheapest is None and unpriced.unpriced == ["groq-lpu"]
    assert unpriced.to_dict()["cheapest"] is None


def test_a_graph_without_a_recognised_architecture_says_only_one_device_was_tried():
    """An ONNX decoder whose layout serving cannot read (onnxruntime-GenAI's GroupQueryAttention at
    Llama-3-70B sizes: 141 GB of fp16 weights) was planned on TP1 alone, then "none holds even one
    sequence in memory", --devices 8 silently unused: the plan now says why no wider layout was tried."""
    import dataclasses

    from narrowpipe.costmodel.serving.capacity import ONE_DEVICE_NOTE
    from narrowpipe.costmodel.serving.prepare import serving_graph

    g = narrowpipe.transformer(layers=2, hidden=256, heads=4, vocab=1000, ffn=512, kv_heads=2, gated_mlp=True, past=16)
    unknown = dataclasses.replace(serving_graph(g), spec=None)
    plan = plan_capacity(unknown, "h100", rate=1, input_len=8, output_len=8, tpot=0.05, max_tp=8)
    assert [c.layout for c in plan.candidates] == ["TP1"] and ONE_DEVICE_NOTE in plan.notes
    known = plan_capacity(g, "h100", rate=1, input_len=8, output_len=8, tpot=0.05, max_tp=8)
    assert len(known.candidates) > 1 and ONE_DEVICE_NOTE not in known.notes
    huge = dataclasses.replace(serving_graph(g), spec=None)
    small_h100 = narrowpipe.get_target("h100").scaled(memory_capacity=1e-6)
    none = plan_capacity(huge, small_h100, rate=1, input_len=8, output_len=8, tpot=0.05)
    assert none.why_none() == ("none holds even one sequence in memory on one device (the only layout tried: "
                               "see the note)")


def test_a_ttft_target_below_the_iteration_that_prefills_is_not_met(small):
    """QA: batch 474 at TPOT 112 ms was said to meet a 60 ms TTFT. A first token cannot come before
    the iteration that prefills its prompt ends, and an arrival waits half an iteration on average
    (generate's module doc): TTFT >= 1.5 x TPOT at every batch, so a TTFT target T caps TPOT at T / 1.5."""
    plan = plan_capacity(small, "h100", rate=10, input_len=512, output_len=16, tpot=1.0, ttft=0.004, max_tp=1)
    (c,) = plan.candidates
    assert c.meets and c.limited_by == "TTFT"
    assert c.ttft_s <= 0.004 and c.ttft_s >= 1.5 * c.tpot_s * (1 - 1e-9)
    assert c.tpot_s <= 0.004 / 1.5
