"""Dataflow chips as a pipeline: more inputs never take less time.

A QA pass found Groq's Llama-3-8B decode step taking 1.35 ms at batch 1 and 313 us at batch 16, and
a 16-token prompt beating a 2-token one: the pipelined run divided every kernel's fixed latency and
every weight read by the number of microbatches. Now the fixed latencies are paid once (the fill),
each microbatch re-reads its stage's weights, and the compiler picks the microbatch count.
"""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.costmodel.execution.dataflow import _microbatch_counts, _StageParts, pipelined_seconds
from narrowpipe.models.examples import load_example


def test_the_pipelined_run_by_hand():
    stages = [_StageParts(fixed=1.0, per_pass=2.0, work=8.0), _StageParts(fixed=0.5, per_pass=1.0, work=4.0)]
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
