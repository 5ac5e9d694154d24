"""On a dataflow chip, layout changes, elementwise chains and KV-cache writes ride their producer's
stream: no per-kernel latency of their own (costmodel/execution/dataflow_stream.py).

QA: Llama-3-8B decode with a 2k cache on Cerebras gave 1,467 tokens/s against the 1,761 the latency
was fitted to: the 4 KB per-layer k/v cache writes and the k/v transposes of [1, 8, 1, 128] tensors
each paid the full 1.4 us and were the top kernels.
"""

from __future__ import annotations

import dataclasses

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution.dataflow_stream import in_stream
from narrowpipe.costmodel.serving import serving_graph
from narrowpipe.models.decoder import transformer

LAYERS = 3


@pytest.fixture(scope="module")
def step():
    """A tiny Llama-style decoder's decode step with a 64-token cache (GQA, SwiGLU, RoPE)."""
    sg = serving_graph(transformer(LAYERS, 256, 4, 1000, kv_heads=2, ffn=512, gated_mlp=True))
    return sg.graph, sg.bindings(1, 1, 64)


def _time(step, target) -> float:
    graph, dims = step
    return narrowpipe.analyze(graph, target, dims=dims).time_s


@pytest.mark.parametrize("name", ["cerebras-wse3", "groq-lpu"])
def test_only_the_synchronising_kernels_pay_the_latency(step, name):
    """By hand, per layer: two RMS norms, seven projections (q, k, v, o, gate, up, down) and attention
    each need a whole row or a K dimension: 10 kernels pay the latency. The rest of the step pays 3:
    the embedding's gather, lm_head and the rotary table's iota. The RoPE-and-transpose, the v
    transpose, the rotary table's concat and the k/v cache writes pay none: the step's time grows by
    exactly (10 x layers + 3) latencies."""
    target = get_target(name)
    zero = dataclasses.replace(target, launch_overhead=0.0)
    one = dataclasses.replace(target, launch_overhead=1e-6)
    paid = (_time(step, one) - _time(step, zero)) / 1e-6
    per_layer = 2 + 7 + 1            # norms, projections, attention
    assert paid == pytest.approx(LAYERS * per_layer + 3, abs=1e-3)


def test_cache_writes_and_transposes_ride_the_stream(step):
    from narrowpipe.costmodel.analyze import resolve_bindings
    from narrowpipe.costmodel.execution import TimingOptions
    from narrowpipe.costmodel.interpreter import interpret
    from narrowpipe.costmodel.timing import fused_program
    graph, dims = step
    program = fused_program(interpret(graph, resolve_bindings(graph, dims)), get_target("cerebras-wse3"),
                            TimingOptions())
    streamed = [k for k in program.kernels if not k.is_free and in_stream(k)]
    names = " ".join(k.name for k in streamed)
    assert names.count("_cache") == 2 * LAYERS                        # k and v cache appends
    assert all(not in_stream(k) for k in program.kernels if k.kind in ("matmul", "attention", "normalization"))


def test_the_note_names_the_streamed_kernels(step):
    graph, dims = step
    r = narrowpipe.analyze(graph, "groq-lpu", dims=dims)
    assert any("ride their producer's stream" in n for n in r.timing.notes)
