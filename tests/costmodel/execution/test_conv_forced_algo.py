"""A harness-forced convolution algorithm replaces the library's choice (issue 12, round 6): an fp32
3x3 layer on T4's CUDA cores, where the model's fastest plan is a Winograd form, runs the implicit
GEMM when the row's harness forced IMPLICIT_PRECOMP_GEMM; a model's own layer keeps the choice."""

from __future__ import annotations

import pytest

from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution import TimingOptions
from narrowpipe.costmodel.execution.conv_algos import conv_plans
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.timing import fused_program, time_program
from narrowpipe.errors import NarrowpipeError
from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind


def _conv3x3(forced: str | None) -> Graph:
    attrs = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1, "output_padding": (0, 0),
             "transposed": False, **({"forced_algo": forced} if forced else {})}
    g = Graph("conv")
    x = g.add_input("x", TensorType(DType.FP32, (16, 256, 14, 14)))
    w = g.add_input("w", TensorType(DType.FP32, (256, 256, 3, 3)), ValueKind.PARAM)
    node = g.add_node(Op.CONV, [x, w], [TensorType(DType.FP32, (16, 256, 14, 14))], attrs)
    g.set_outputs(node.outputs)
    return g


def _kernel(g: Graph):
    t4 = get_target("t4")
    return time_program(fused_program(interpret(g, {}), t4, TimingOptions()), t4).times[-1]


def test_forced_implicit_gemm_is_the_only_plan():
    free, forced = interpret(_conv3x3(None), {}), interpret(_conv3x3("IMPLICIT_PRECOMP_GEMM"), {})
    names = [p.name for p in conv_plans(free, free.graph.nodes[0], k_step=1, winograd=True)]
    assert names[0] == "implicit GEMM" and any("Winograd" in n for n in names)
    (plan,) = conv_plans(forced, forced.graph.nodes[0], k_step=1, winograd=True)
    # the implicit GEMM: M = 16 x 14 x 14 positions, N = 256 filters, K = 256 x 3 x 3 (by hand)
    assert (plan.name, plan.gemm.m, plan.gemm.n, plan.gemm.k) == ("implicit GEMM", 3136, 256, 2304)
    assert plan.gemm.flops == 2 * 3136 * 256 * 2304


def test_forcing_removes_the_faster_winograd_plan_on_t4():
    free, forced = _kernel(_conv3x3(None)), _kernel(_conv3x3("IMPLICIT_PRECOMP_GEMM"))
    assert "Winograd" in free.note and "Winograd" not in forced.note
    assert forced.time_s > free.time_s
    # the implicit GEMM executes at least the layer's FLOPs; F(4x4, 3x3) 36 products per 16 outputs
    # instead of 144 (Lavin & Gray): a quarter of them
    assert forced.executed_flops >= 2 * 3136 * 256 * 2304
    assert free.executed_flops < 0.5 * forced.executed_flops


def test_an_unmodelled_forced_algorithm_is_an_error_naming_the_node():
    table = interpret(_conv3x3("FFT_TILING"), {})
    with pytest.raises(NarrowpipeError, match="FFT_TILING"):
        conv_plans(table, table.graph.nodes[0], k_step=1, winograd=True)
