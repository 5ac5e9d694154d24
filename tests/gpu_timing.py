"""A catalog GPU with its efficiency curves, wave fill and exposed epilogue switched off, and the
time of a graph's last kernel on it: what the execution-model tests compute by hand.

One definition, so the hand computations of several test files read the same target."""

from __future__ import annotations

import dataclasses
from typing import Any

from narrowpipe.backends import get_target
from narrowpipe.backends.families import GpuTarget
from narrowpipe.costmodel.execution import KernelTime, TimingOptions
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.timing import fused_program, time_program
from narrowpipe.ir import Graph


def flat_gpu(name: str, **changes: Any) -> GpuTarget:
    """``name`` with flat curves, no wave fill and no exposed epilogue, then ``changes``; a change to
    None drops that field's source too (the loader's rule: no source without a value)."""
    base = dict(matmul_curve=(), bandwidth_curve=(), matmul_skinny_curve=(), gemm_epilogue_exposed=0.0,
                gemm_wave_overhead=0.0)
    target = get_target(name)
    assert isinstance(target, GpuTarget)
    sources = {k: v for k, v in target.sources.items() if changes.get(k, 0) is not None}
    return dataclasses.replace(target, **{**base, **changes}, sources=sources)


def last_kernel(graph: Graph, target: GpuTarget) -> KernelTime:
    """The time of ``graph``'s last kernel (its only one, for the one-node graphs of these tests)."""
    return time_program(fused_program(interpret(graph, {}), target, TimingOptions()), target).times[-1]
