"""``plan --trace``: the step as a Chrome trace that parses, with one slice per scheduled pass, no
overlap within a track, the bubble as idle time, exposed communication outside compute, and the
plan's step time as its total (by the paper's formula on a hand-made plan)."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

import narrowpipe
from narrowpipe import Plan
from narrowpipe.cli import main
from narrowpipe.render.plan_trace import SLOT_CATEGORY, plan_trace

US = 1e6


def _spans(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def _track_names(doc: dict) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}


def _check_tracks(doc: dict) -> None:
    by_track = defaultdict(list)
    for e in _spans(doc):
        assert e["ts"] >= 0 and e["dur"] >= 0
        by_track[(e["pid"], e["tid"])].append(e)
    for events in by_track.values():
        events.sort(key=lambda e: e["ts"])
        for a, b in zip(events, events[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-6, (a["name"], b["name"])   # no overlap within a track


@pytest.mark.parametrize("pp, v, m", [(4, 1, 8), (4, 2, 8), (2, 3, 4), (1, 1, 4)])
def test_a_hand_made_plans_trace_totals_its_step_time_with_one_slice_per_pass(hand_plan, pp, v, m):
    plan = hand_plan(pp, v, m, p2p=2e-5, dp_total=3e-3, dp_exposed=1e-3, optimizer=5e-4)
    doc = json.loads(json.dumps(plan_trace(plan).to_dict()))
    _check_tracks(doc)
    run = next(e for e in _spans(doc) if e["cat"] == "run")
    assert run["dur"] / US == pytest.approx(plan.step_time_s, rel=1e-12)
    assert max(e["ts"] + e["dur"] for e in _spans(doc)) / US == pytest.approx(plan.step_time_s, rel=1e-12)
    slots = [e for e in _spans(doc) if e["cat"].startswith(SLOT_CATEGORY)]
    per_stage = defaultdict(int)
    for e in slots:
        per_stage[e["pid"]] += 1
    assert sorted(per_stage.values()) == [m * 2 * v] * pp          # p stages x m microbatches x fwd+bwd x v
    # the bubble: each stage idles (p - 1) / v stage-times of (f + b + 2 p2p) v
    names = _track_names(doc)
    idle = defaultdict(float)
    for e in _spans(doc):
        if names[(e["pid"], e["tid"])] == "idle (bubble)":
            idle[e["pid"]] += e["dur"] / US
    t = v * (1e-3 + 2e-3 + (2 * 2e-5 if pp > 1 else 0.0))
    assert all(x == pytest.approx((pp - 1) * t / v, rel=1e-9) for x in idle.values())
    assert len(idle) == (pp if pp > 1 else 0)


def test_exposed_communication_is_a_span_no_compute_overlaps(hand_plan):
    plan = hand_plan(2, 1, 4, dp_total=3e-3, dp_exposed=1e-3, optimizer=5e-4)
    doc = plan_trace(plan).to_dict()
    names = _track_names(doc)
    for pid in {e["pid"] for e in _spans(doc) if e["cat"].startswith(SLOT_CATEGORY)}:
        compute = [e for e in _spans(doc) if e["pid"] == pid and names[(pid, e["tid"])] == "compute"]
        exposed = [e for e in _spans(doc) if e["pid"] == pid and "exposed" in e["cat"]]
        assert exposed
        for x in exposed:
            for c in compute:
                assert x["ts"] + x["dur"] <= c["ts"] + 1e-6 or c["ts"] + c["dur"] <= x["ts"] + 1e-6
        hidden = [e for e in _spans(doc) if e["pid"] == pid and e["name"] == "gradient reduction (hidden)"]
        assert sum(e["dur"] for e in hidden) / US == pytest.approx(3e-3 - 1e-3)


def test_plan_trace_on_the_command_line_writes_a_trace_of_the_plan(tmp_path, capsys):
    out, saved = tmp_path / "step.json", tmp_path / "plan.json"
    assert main(["plan", "gpt2", "--devices", "8", "--target", "dgx-h100", "--global-batch", "16", "--seq", "512",
                 "--tp", "2", "--pp", "2", "--fix", "microbatch=1,recompute=full,interleave=1", "--trace", str(out),
                 "--json", str(saved)]) == 0
    assert "open it in ui.perfetto.dev" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    plan = Plan.from_json(saved.read_text())
    _check_tracks(doc)
    assert doc["otherData"]["format"] == "narrowpipe.trace"
    slots = [e for e in _spans(doc) if e["cat"].startswith(SLOT_CATEGORY)]
    assert len(slots) == 2 * plan.parallel.microbatches * 2
    run = next(e for e in _spans(doc) if e["cat"] == "run")
    assert run["dur"] / US == pytest.approx(doc["otherData"]["step_s"])
    assert doc["otherData"]["step_s"] == pytest.approx(plan.step_time_s, rel=1e-12)   # the plan's step is the trace's
    assert plan.step_time_s <= plan.closed_form_step_s * (1 + 1e-12)                   # 1F1B: the closed form bounds it


def test_a_saved_plan_traces_like_the_plan_it_was():
    model = narrowpipe.transformer(4, 1024, 8, 32000, seq=1024, name="tiny-4l")
    plan = narrowpipe.plan(model, "dgx-h100", 8, global_batch=16, parallel={"tp": 2, "pp": 2, "microbatch": 1})
    assert plan_trace(Plan.from_json(plan.to_json())).to_dict() == plan_trace(plan).to_dict()
