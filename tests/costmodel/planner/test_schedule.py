"""The step as timed slots: Megatron-LM's 1F1B and interleaved orders, dependencies kept, and the
makespan against the paper's formulas (Narayanan et al., SC'21, section 2.2) with equal stages."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe import Plan, PlanError
from narrowpipe.costmodel.planner.pipeline import Stage, pipeline_time
from narrowpipe.costmodel.planner.schedule import ChunkTimes, schedule_order, simulate, step_timeline


def test_1f1b_order_is_megatrons_warmup_then_one_forward_one_backward_then_cooldown():
    # p=4, m=6: rank 0 warms up with p-1 = 3 forwards, rank 3 (last) with none
    assert list(schedule_order(4, 6, 1, 0)) == [("forward", 0, 0), ("forward", 0, 1), ("forward", 0, 2),
                                          ("forward", 0, 3), ("backward", 0, 0), ("forward", 0, 4),
                                          ("backward", 0, 1), ("forward", 0, 5), ("backward", 0, 2),
                                          ("backward", 0, 3), ("backward", 0, 4), ("backward", 0, 5)]
    assert list(schedule_order(4, 6, 1, 3)[:4]) == [("forward", 0, 0), ("backward", 0, 0), ("forward", 0, 1),
                                              ("backward", 0, 1)]


def test_interleaved_order_groups_p_microbatches_per_chunk_and_reverses_chunks_backward():
    # p=2, v=2, m=4, rank 0: warm-up (p-1)*2 + (v-1)*p = 4 virtual forwards: chunk 0 for microbatches
    # 0, 1, then chunk 1 for 0, 1; backwards start with the last chunk (local 1)
    order = schedule_order(2, 4, 2, 0)
    assert list(order[:6]) == [("forward", 0, 0), ("forward", 0, 1), ("forward", 1, 0), ("forward", 1, 1),
                         ("forward", 0, 2), ("backward", 1, 0)]
    assert len(order) == 2 * 4 * 2 and len(set(order)) == len(order)


@pytest.mark.parametrize("p, m, v", [(4, 8, 1), (8, 16, 1), (2, 6, 1), (4, 8, 2), (8, 64, 4), (4, 12, 3), (4, 4, 2)])
def test_equal_stages_take_the_papers_makespan(p, m, v):
    f, b = 1.0, 2.0                         # per chunk; a device runs v chunks: t = v (f + b) per microbatch
    slots = simulate(p, m, v, [ChunkTimes(f, 0.0, b, 0.0)] * (p * v))
    t = v * (f + b)
    paper = m * t + (p - 1) * t / v         # 1F1B: (m + p - 1) t; interleaved: bubble (p - 1) / v stage-times
    assert max(s.end_s for s in slots) == pytest.approx(paper, rel=1e-12)
    closed, _ = pipeline_time([Stage(i, (), v * f, v * b) for i in range(p)], m, v)
    assert closed == pytest.approx(paper, rel=1e-12)


def test_every_pass_waits_for_its_input_and_devices_run_one_pass_at_a_time():
    p, m, v = 4, 8, 2
    chunks = [ChunkTimes(1.0 + 0.1 * g, 0.05, 2.0 + 0.2 * g, 0.1) for g in range(p * v)]
    slots = simulate(p, m, v, chunks, p2p_s=0.03)
    end = {(s.phase, s.chunk, s.microbatch): s.end_s for s in slots}
    for s in slots:
        if s.phase == "forward" and s.chunk > 0:
            assert s.start_s >= end[("forward", s.chunk - 1, s.microbatch)] - 1e-12
        if s.phase == "backward":
            dep = ("backward", s.chunk + 1, s.microbatch) if s.chunk < p * v - 1 else ("forward", s.chunk, s.microbatch)
            assert s.start_s >= end[dep] - 1e-12
    for d in range(p):
        mine = sorted((s for s in slots if s.device == d), key=lambda s: s.start_s)
        assert len(mine) == 2 * m * v
        assert all(a.end_s <= b.start_s + 1e-12 for a, b in zip(mine, mine[1:]))


def test_unequal_1f1b_stages_the_closed_form_is_exact_when_the_last_stage_is_slowest_and_an_upper_bound_else():
    p, m = 4, 8
    f = [1.0, 1.1, 0.9, 1.5]
    b = [2 * x for x in f]
    slots = simulate(p, m, 1, [ChunkTimes(f[i], 0.0, b[i], 0.0) for i in range(p)])
    # by hand: the first microbatch fills stages 0-2, the last stage runs m forward+backward pairs
    # back to back, the last backward drains through stages 2-0
    by_hand = sum(f[:3]) + m * (f[3] + b[3]) + sum(b[:3])
    assert max(s.end_s for s in slots) == pytest.approx(by_hand, rel=1e-12)
    assert by_hand == pytest.approx(pipeline_time([Stage(i, (), f[i], b[i]) for i in range(p)], m)[0], rel=1e-12)
    first_slowest = [1.5, 1.0, 1.1, 0.9]
    slots = simulate(p, m, 1, [ChunkTimes(x, 0.0, 2 * x, 0.0) for x in first_slowest])
    closed, _ = pipeline_time([Stage(i, (), x, 2 * x) for i, x in enumerate(first_slowest)], m)
    assert max(s.end_s for s in slots) < closed


def test_a_wrong_number_of_chunk_times_is_refused():
    with pytest.raises(PlanError, match="3 chunk times for pp=2 x interleave=2"):
        simulate(2, 4, 2, [ChunkTimes(1, 0, 1, 0)] * 3)


@pytest.fixture(scope="module")
def model() -> narrowpipe.Graph:
    return narrowpipe.transformer(8, 2048, 16, 32000, ffn=5504, gated_mlp=True, seq=2048, name="llama-8l-2k")


@pytest.mark.parametrize("fix", [{"tp": 2, "pp": 4, "interleave": 1}, {"tp": 2, "pp": 2, "interleave": 2},
                                 {"tp": 2, "pp": 1}, {"tp": 2, "pp": 4, "interleave": 2, "zero": 3}])
def test_the_plans_timeline_has_every_slot_and_the_plans_step_time(model, fix):
    plan = narrowpipe.plan(model, "dgx-h100", 16, global_batch=32, parallel={"microbatch": 1, "zero": 1,
                                                                             "recompute": "full", **fix})
    tl = step_timeline(plan)
    p, m, v = plan.parallel.pp, plan.parallel.microbatches, plan.parallel.interleave
    for d in range(p):
        assert sum(1 for s in tl.slots if s.device == d) == m * 2 * v
    busy = [sum(s.end_s - s.start_s for s in tl.slots if s.device == d) for d in range(p)]
    for d, stage in enumerate(sorted(plan.stages, key=lambda s: s["device"])):
        # a device is busy exactly the stage time the step model charges per microbatch, m times
        assert busy[d] == pytest.approx(m * (stage["forward_s"] + stage["backward_s"] + stage["p2p_s"]), rel=1e-9)
    assert tl.total_s == pytest.approx(tl.pipeline_s + plan.breakdown["dp_comm"] + plan.breakdown["optimizer"])
    # the plan's step is the simulated schedule (its closed form differs when the stages or chunks do)
    assert tl.total_s == pytest.approx(plan.step_time_s, rel=1e-12)
    crit = max(range(p), key=lambda d: busy[d])
    if p == 1 or (v == 1 and crit == p - 1):
        assert plan.closed_form_step_s == pytest.approx(plan.step_time_s, rel=1e-9)
    elif v == 1:
        assert plan.step_time_s <= plan.closed_form_step_s * (1 + 1e-9)
    assert all(x >= 0 for s in tl.slots for x in (s.start_s, s.gather_s, s.compute_s, s.comm_s, s.p2p_s))
    assert step_timeline(Plan.from_json(plan.to_json())).total_s == tl.total_s   # from a saved plan too
