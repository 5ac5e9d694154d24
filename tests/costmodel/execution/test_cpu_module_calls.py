"""An eager whole-model prediction on the CPU pays the graph's nn.Module calls at the target's cost per
call, spread over the launched kernels; a bare-op prediction (and a graph without calls) does not."""

from __future__ import annotations

import dataclasses

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.ir import DType
from tests.graph_builders import gemm_graph


def _cpu(**fields: object) -> narrowpipe.backends.Target:
    epyc = get_target("epyc-9755")
    sources = {**epyc.sources, **{k: "assumption: test" for k in fields}}
    return dataclasses.replace(epyc, sources=sources, **fields)


def test_module_calls_add_their_cost_to_an_eager_run_only():
    cpu = _cpu(eager_op_overhead=1e-6, eager_module_call_overhead=3e-6)
    g = gemm_graph(64, 64, 64, DType.FP32)
    g.meta["module_calls"] = 10
    eager = narrowpipe.analyze(g, cpu)
    bare = narrowpipe.analyze(g, cpu, eager_overhead=False)
    (k,) = bare.timeline
    assert eager.time_s == pytest.approx(bare.time_s + 1e-6 + 10 * 3e-6)
    assert eager.timeline[0].overhead_s == pytest.approx(k.overhead_s + 1e-6 + 10 * 3e-6)
    g.meta["module_calls"] = 0
    assert narrowpipe.analyze(g, cpu).time_s == pytest.approx(bare.time_s + 1e-6)
