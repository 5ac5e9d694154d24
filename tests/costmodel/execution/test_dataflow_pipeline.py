"""Dataflow chips as a pipeline: more inputs never take less time.

A QA pass found Groq's Llama-3-8B decode step taking 1.35 ms at batch 1 and 313 us at batch 16, and
a 16-token prompt beating a 2-token one: the pipelined run divided every kernel's fixed latency and
every weight read by the number of microbatches. Now the fixed latencies are paid once (the fill),
each microbatch re-reads its stage's weights, and the compiler picks the microbatch count.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import narrowpipe
from narrowpipe.costmodel.execution.dataflow import _microbatch_counts
from narrowpipe.costmodel.execution.pipeline import StageParts, pass_schedule, pipelined_seconds
from narrowpipe.models.examples import load_example


def test_the_pipelined_run_by_hand():
    stages = [StageParts(fixed=1.0, per_pass=2.0, work=8.0), StageParts(fixed=0.5, per_pass=1.0, work=4.0)]
    assert pipelined_seconds(stages, 1) == pytest.approx(1.5 + 10 + 5)              # the stages end to end
    # m = 4: passes of 2 + 2 and 1 + 1; fill 1.5 + 4 + 2, then the slowest pass 3 more times
    assert pipelined_seconds(stages, 4) == pytest.approx(1.5 + 4 + 2 + 3 * 4)
    assert _microbatch_counts(1) == [1] and _microbatch_counts(12) == [1, 2, 4, 8, 12]


@pytest.mark.parametrize("target", ["groq-lpu", "cerebras-wse3", "sambanova-sn40l"])
def test_decode_and_prefill_never_get_faster_with_more_inputs(target):
    g = load_example("llama-3-8b")
    batch = [narrowpipe.analyze(g, target, dims={"batch": b, "seq": 1}).time_s for b in (1, 2, 4, 8, 16)]
    seq = [narrowpipe.analyze(g, target, dims={"batch": 1, "seq": s}).time_s for s in (1, 2, 4, 16, 128, 1024)]
    for times in (batch, seq):
        assert all(b >= a * (1 - 1e-12) for a, b in zip(times, times[1:])), times


def test_batch_one_decode_is_the_stages_end_to_end():
    """One input, one microbatch: the run is every kernel's time in turn (what the published batch-1
    decode rates calibrate, benchmarks/published_decode.py)."""
    r = narrowpipe.analyze(load_example("llama-3-8b"), "groq-lpu", dims={"batch": 1, "seq": 1})
    plan = r.timing.plan
    assert plan["inputs"] == 1 and plan["microbatches"] == 1
    assert r.time_s == pytest.approx(sum(plan["stage_seconds"]), rel=1e-12)


def test_prefill_picks_the_microbatch_count_that_finishes_first():
    r = narrowpipe.analyze(load_example("llama-3-8b"), "groq-lpu", dims={"batch": 1, "seq": 512})
    plan = r.timing.plan
    assert plan["chips"] > 1 and plan["inputs"] == 512 and 1 < plan["microbatches"] < 512
    assert r.time_s < sum(plan["stage_seconds"])          # the chips overlap


def test_the_passes_of_the_hand_pipeline():
    """The stages above with m = 4: stage 0 starts after its fill (1) and runs a pass of 2 + 8/4 = 4
    every 4; stage 1 starts when the first pass has left stage 0 and its own fill has passed
    (1 + 4 + 0.5), and runs its passes of 1 + 4/4 = 2 at stage 0's pace; its last ends at the total."""
    first, second = pass_schedule([1.0, 0.5], [4.0, 2.0], 4)
    assert (first.start_s, first.every_s, first.end_s) == (1.0, 4.0, 1.0 + 3 * 4 + 4)
    assert (second.start_s, second.every_s, second.end_s) == (5.5, 4.0, 5.5 + 3 * 4 + 2)
    stages = [StageParts(fixed=1.0, per_pass=2.0, work=8.0), StageParts(fixed=0.5, per_pass=1.0, work=4.0)]
    assert second.end_s == pytest.approx(pipelined_seconds(stages, 4))


_times = st.floats(0.0, 1e-3, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_times, _times, _times), min_size=1, max_size=8), st.integers(1, 64))
def test_the_passes_end_when_the_closed_form_says(parts, m):
    """Any stages, any microbatch count: placing every pass (each after its own previous pass and
    after the microbatch has left the stage before, a fill later) ends at :func:`pipelined_seconds`,
    and no stage runs two passes at once."""
    stages = [StageParts(fixed=f, per_pass=p, work=w) for f, p, w in parts]
    passes = [s.per_pass + s.work / m for s in stages]
    placed = pass_schedule([s.fixed for s in stages], passes, m)
    assert placed[-1].end_s == pytest.approx(pipelined_seconds(stages, m), rel=1e-9, abs=1e-15)
    assert max(s.end_s for s in placed) == pytest.approx(placed[-1].end_s, rel=1e-9, abs=1e-15)
    for before, stage in zip([None, *placed], placed):
        assert stage.every_s >= stage.pass_s * (1 - 1e-12)
        if before is not None:                 # pass j leaves the stage before, then reaches this one
            for j in range(m):
                left = before.start_s + j * before.every_s + before.pass_s
                assert stage.start_s + j * stage.every_s >= left * (1 - 1e-12)
