"""A pipelined dataflow run keeps its fill apart in each kernel's share of the run.

QA: Llama-3-70B prefill on 4 WSE-3 wafers read "bound mix C 72% I 15% O 14%" while the verdict said
overhead-bound (halving the per-kernel latency sped it up 1.34x). The shares of the pipelined total
had been the kernels' own times scaled by one factor, which shrank the launch latencies (paid once,
on the critical path, as the pipeline fills) with the overlapping passes.
"""

from __future__ import annotations

import dataclasses

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.costmodel.analyze import resolve_bindings
from narrowpipe.costmodel.execution import DeviceGroup, TimingOptions
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.summary import bound_mix
from narrowpipe.costmodel.timing import fused_program, time_program
from narrowpipe.models.decoder import transformer
from narrowpipe.models.examples import load_example

LATENCY = 2e-6


def _schedule(launch: float):
    """A tiny decoder's 256-token prefill over Groq chips shrunk to 4 MB each, so that it spans several
    and its tokens stream through them in microbatches."""
    graph = transformer(4, 256, 4, 1000, kv_heads=2, ffn=512, gated_mlp=True, seq=256)
    target = dataclasses.replace(get_target("groq-lpu"), memory_capacity=4e6, launch_overhead=launch)
    program = fused_program(interpret(graph, resolve_bindings(graph, {})), target, TimingOptions())
    return time_program(program, DeviceGroup(target))


def test_the_shares_keep_the_fill_that_the_run_pays():
    run, without = _schedule(LATENCY), _schedule(0.0)
    assert run.devices > 1 and run.pipelining is not None and run.pipelining.microbatches > 1
    assert sum(t.time_s for t in run.times) == pytest.approx(run.total_s, rel=1e-9)
    # what the launch latencies add to the run, measured by taking them away (the microbatch count
    # that finishes first does not move: the fill is the same for every count)
    on_critical_path = run.total_s - without.total_s
    assert on_critical_path > 0.1 * run.total_s
    assert sum(t.overhead_s for t in run.times) == pytest.approx(on_critical_path, rel=1e-6)
    # and the bound mix shows that share as overhead: the fill is a term of its own
    assert bound_mix(run)["overhead"] == pytest.approx(on_critical_path / run.total_s, rel=1e-6)


def test_the_qa_case_reads_overhead_bound_in_the_mix_as_in_the_verdict():
    r = narrowpipe.analyze(load_example("llama-3-70b"), "cerebras-wse3", batch=1, seq=2048)
    t = r.timing
    assert t.devices == 4 and t.narrowest == "overhead"
    assert max(t.bound_mix, key=t.bound_mix.get) == "overhead"
    # halving the latencies halves the overhead share: the if-doubled figure, read from the mix
    assert t.speedup_if_doubled["overhead"] == pytest.approx(1 / (1 - t.bound_mix["overhead"] / 2), rel=0.01)
    # the timeline's entries: a pipelined kernel's time_s is its busy time over its passes; its last
    # pass ends start_s + (passes - 1) x every_s + pass_s, and the last of those ends the run
    ends = [e.start_s + (e.passes - 1) * e.every_s + e.pass_s for e in r.timeline]
    assert max(ends) == pytest.approx(t.time_s, rel=1e-9)
