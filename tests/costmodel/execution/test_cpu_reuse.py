"""An eager CPU prediction charges the stall of re-reading inputs that the traffic since their last touch
pushed out of the caches: the reuse distance of each input is counted by hand on a three-kernel chain,
the stall is the target's per-byte curve at it beyond what the kernel's own loop paid, weights and bare
ops pay nothing, and the fit's arithmetic is checked on made-up records."""

from __future__ import annotations

import dataclasses
import math

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.calibration.evicted_calls import fit_evicted_reads
from narrowpipe.calibration.measurement import Measurement
from narrowpipe.costmodel.execution.common import TimingOptions
from narrowpipe.costmodel.execution.program import Program
from narrowpipe.costmodel.execution.reuse import input_reuse, reuse_stall_time
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind

MIB = 2**20
#: no stall up to 1 MiB of traffic since the last touch, all of it (1 ns per byte) from 16 MiB
CURVE = ((1 * MIB, 1e-4), (16 * MIB, 1.0))


def _cpu(**fields: object):
    epyc = get_target("epyc-9755")
    fields = {"eager_op_overhead": 1e-6, **fields}
    return dataclasses.replace(epyc, sources={**epyc.sources, **{k: "assumption: test" for k in fields}}, **fields)


def _chain() -> Graph:
    """x [256, 1024] -> y = x @ w (w: 1024 x 4096 weight) -> z = relu(y) -> out = z + x."""
    g = Graph("chain")
    x = g.add_input("x", TensorType(DType.FP32, (256, 1024)))
    w = g.add_input("w", TensorType(DType.FP32, (1024, 4096)), ValueKind.PARAM)
    y = g.add_node(Op.DOT, [x, w], [TensorType(DType.FP32, (256, 4096))],
                   {"lhs_contract": (1,), "rhs_contract": (0,)}).outputs[0]
    z = g.add_node(Op.RELU, [y], [TensorType(DType.FP32, (256, 4096))]).outputs[0]
    x2 = g.add_node(Op.DOT, [x, g.add_input("v", TensorType(DType.FP32, (1024, 4096)), ValueKind.PARAM)],
                    [TensorType(DType.FP32, (256, 4096))], {"lhs_contract": (1,), "rhs_contract": (0,)}).outputs[0]
    g.set_outputs(g.add_node(Op.ADD, [z, x2], [TensorType(DType.FP32, (256, 4096))]).outputs)
    return g


def test_reuse_distances_count_the_bytes_since_the_last_touch():
    g = _chain()
    program = Program.fused(interpret(g, {}), TimingOptions(fusion="none"))
    kernels = program.kernels
    assert [k.kind for k in kernels] == ["matmul", "elementwise", "matmul", "elementwise"]
    mm1, relu, mm2, add = (float(k.cost.bytes) for k in kernels)
    assert mm1 == 4 * (256 * 1024 + 1024 * 4096 + 256 * 4096) and relu == 4 * 2 * 256 * 4096
    reads = input_reuse(kernels, program.table, 1e9, [True] * 4)
    x, y = 4 * 256 * 1024, 4 * 256 * 4096
    assert reads[0] == [(x, 1e9)]                                 # a graph input: a forward ago; w left out
    assert reads[1] == [(y, 0.5 * (mm1 - y))]                     # right after its producer
    assert reads[2] == [(x, mm1 - mm1 + relu + 0.5 * (mm1 - x))]  # x: last read by the first GEMM
    assert reads[3] == [(y, mm2 + 0.5 * (relu - y)), (y, 0.5 * (mm2 - y))]    # z after the relu, x2 after mm2


def test_the_stall_is_each_inputs_beyond_the_own_loops():
    cpu = _cpu(evicted_read_bandwidth=1e9, evicted_read_curve=CURVE)      # 1 ns per byte at the top
    assert reuse_stall_time(cpu, [(1000, 16 * MIB)], 1 * MIB) == pytest.approx(1000 * 1e-9 * (1 - 1e-4))
    assert reuse_stall_time(cpu, [(1000, 4 * MIB)], 1 * MIB) == pytest.approx(1000 * 1e-9 * (1 - 1e-4) * 0.5)
    assert reuse_stall_time(cpu, [(1000, 16 * MIB), (1000, 1 * MIB)], 4 * MIB) == pytest.approx(
        1000 * 1e-9 * (1.0 - 0.50005))                            # the hot input pays nothing, never less
    assert reuse_stall_time(_cpu(), [(1000, 16 * MIB)], 0.0) == 0.0


def test_an_eager_prediction_pays_it_and_a_bare_op_one_does_not():
    g = _chain()
    cpu = _cpu(evicted_read_bandwidth=1e9, evicted_read_curve=CURVE)
    rows, plain = narrowpipe.analyze(g, cpu).ops, narrowpipe.analyze(g, _cpu()).ops
    extra = [a.time_s - b.time_s for a, b in zip(rows, plain)]
    y = 4 * 256 * 4096

    def f(x: float) -> float:                                     # the curve, log-linear from 1 to 16 MiB
        return min(1.0, 1e-4 + (1 - 1e-4) * math.log(x / MIB) / math.log(16))
    # the first GEMM moves 21 MiB: its own loop already re-read x from as far; the add (12 MiB of its
    # own) re-reads z from past 16 MiB (the second GEMM ran since) and x2 from half that GEMM's other bytes
    assert extra[0] == pytest.approx(0.0, abs=1e-12)
    assert extra[3] == pytest.approx(y * 1e-9 * (1.0 - f(12 * MIB)), rel=1e-6)
    assert all(e >= 0 for e in extra)
    assert narrowpipe.analyze(g, cpu, eager_overhead=False).time_s == narrowpipe.analyze(
        g, _cpu(), eager_overhead=False).time_s


def test_the_fit_takes_the_reread_add_beyond_the_hot_one_per_input_byte():
    nbytes = 3 * 256 * 1024                                       # two 256 KiB inputs and the output
    ms = [Measurement("evicted_read_hot", "fp32", (0,), 0, nbytes, 8e-6)]
    ms += [Measurement("evicted_read", "fp32", (s,), 0, nbytes, t) for s, t in ((2 * MIB, 18.486e-6),
                                                                          (128 * MIB, 60.428e-6))]
    bw, curve = fit_evicted_reads(ms)
    per_byte = (60.428e-6 - 8e-6) / (2 * 256 * 1024)
    assert bw == pytest.approx(1 / per_byte, rel=1e-4)
    assert [x for x, _ in curve] == [nbytes, 2 * MIB + 256 * 1024, 128 * MIB + 256 * 1024]
    assert [y for _, y in curve] == [1e-4, pytest.approx(0.2, abs=1e-4), 1.0]
    assert fit_evicted_reads(ms[:2]) is None
