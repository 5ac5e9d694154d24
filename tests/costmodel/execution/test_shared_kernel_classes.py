"""Serving times hundreds of bindings of one graph, each once: the kernels' classes (equal kernels
timed once) are kept with the graph's cost index, so a new binding's first timing uses them.

Checked against the times each kernel gets on its own (routing.kernel_time, no memo), never
against the memo itself."""

from __future__ import annotations

import pytest

from narrowpipe.backends import get_target
from narrowpipe.costmodel.analyze import resolve_bindings
from narrowpipe.costmodel.execution import model_for, routing
from narrowpipe.costmodel.execution.common import TimingOptions
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.timing import fused_program, time_program
from narrowpipe.models import transformer


@pytest.fixture(scope="module")
def graph():
    return transformer(layers=4, hidden=256, heads=4, vocab=512, seq=64, name="tiny")


def _program(graph, target, batch: int, seq: int):
    table = interpret(graph, resolve_bindings(graph, {"batch": batch, "seq": seq}))
    return fused_program(table, target, TimingOptions())


def test_a_second_binding_is_classed_on_its_first_timing_and_times_every_kernel_as_alone(graph):
    target = get_target("h100")
    first = _program(graph, target, 1, 64)
    time_program(first, target)
    assert routing._CLASSES[first] is None             # a first program of a graph pays nothing extra
    for batch, seq in ((2, 128), (8, 32), (1, 1)):
        program = _program(graph, target, batch, seq)
        schedule = time_program(program, target)
        classes = routing._CLASSES[program]
        assert classes is not None and len(set(c for c in classes if c is not None)) < len(classes)
        alone = [routing.kernel_time(k, program, target, model_for(target)) for k in program.kernels]
        assert [t.time_s for t in schedule.times] == pytest.approx([t.time_s for t in alone], rel=1e-12)


def test_an_edited_graph_is_classed_again(graph):
    """The classes live in the graph's cost index, rebuilt when the graph changes (Graph.version)."""
    target = get_target("h100")
    g = transformer(layers=2, hidden=128, heads=2, vocab=256, seq=32, name="edit")
    time_program(_program(g, target, 1, 32), target)
    time_program(_program(g, target, 2, 32), target)
    g.version += 1                                          # as every mutation does
    program = _program(g, target, 3, 32)
    time_program(program, target)
    assert routing._CLASSES[program] is None               # a new index: its first program again

