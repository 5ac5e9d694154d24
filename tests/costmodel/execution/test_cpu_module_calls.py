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


def _onnx_two_ops() -> narrowpipe.ir.Graph:
    """An ONNX graph (MatMul then Relu, 64 x 64): ONNX keeps no ``nn.Module`` stack."""
    from onnx import TensorProto, helper

    from narrowpipe.frontends.onnx.frontend import from_onnx_model
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64]),
                                             helper.make_tensor_value_info("w", TensorProto.FLOAT, [64, 64])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [64, 64])])
    return from_onnx_model(helper.make_model(graph))


def test_an_onnx_graph_records_no_module_calls_and_pays_none():
    g = _onnx_two_ops()
    assert "module_calls" not in g.meta
    with_cost = narrowpipe.analyze(g, _cpu(eager_op_overhead=1e-6, eager_module_call_overhead=3e-6))
    without = narrowpipe.analyze(g, _cpu(eager_op_overhead=1e-6))
    assert with_cost.time_s == without.time_s
    assert [k.overhead_s for k in with_cost.timeline] == [k.overhead_s for k in without.timeline]


def test_the_calls_are_shared_evenly_by_the_launched_kernels():
    """10 calls at 3 us over 2 launched kernels: 15 us more overhead on each, 30 us in all."""
    g = _onnx_two_ops()
    cpu = _cpu(eager_op_overhead=1e-6, eager_module_call_overhead=3e-6)
    base = narrowpipe.analyze(g, cpu)
    g.meta["module_calls"] = 10
    paid = narrowpipe.analyze(g, cpu)
    launched = [k for k in base.timeline if k.time_s > 0]
    assert len(launched) == 2 == len(paid.timeline)
    for before, after in zip(base.timeline, paid.timeline):
        assert after.overhead_s == pytest.approx(before.overhead_s + 15e-6)
    assert paid.time_s == pytest.approx(base.time_s + 30e-6)
