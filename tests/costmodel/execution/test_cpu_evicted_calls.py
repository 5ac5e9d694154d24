"""An eager CPU prediction charges each kernel the host stall after the previous kernel's traffic, less
the stall its own calibration loop already paid (each call there follows its own traffic); nothing for
the first kernel, a bare-op prediction, or a host file without the term. Times checked by hand."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.calibration.evicted_calls import evicted_call_sizes, fit_evicted_calls
from narrowpipe.calibration.measurement import Measurement
from narrowpipe.costmodel.execution.host_stalls import evicted_call_time
from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind

MIB = 2**20
HOST = Path(narrowpipe.__file__).parent / "benchmarks" / "results" / "host.toml"
#: 10 us after a kernel that moved 1 MiB or less, 50 us after 16 MiB or more (fractions of 50 us)
AFTER = ((1 * MIB, 0.2), (16 * MIB, 1.0))
#: a loop of a 16 MiB kernel already pays 30 us of it; of a 1 MiB one, 1 us
OWN = ((1 * MIB, 0.02), (16 * MIB, 0.6))


def _cpu(**fields: object):
    epyc = get_target("epyc-9755")
    fields = {"eager_op_overhead": 1e-6, **fields}
    return dataclasses.replace(epyc, sources={**epyc.sources, **{k: "assumption: test" for k in fields}}, **fields)


def _stalls(**extra: object):
    return _cpu(eager_evicted_call_overhead=50e-6, eager_evicted_call_curve=AFTER,
                eager_evicted_call_self_curve=OWN, **extra)


def _chain() -> Graph:
    """A 1024x1024 fp32 GEMM by a 4096x1024 weight (20 MiB moved), then a relu of its 4 MiB output."""
    g = Graph("chain")
    a = g.add_input("a", TensorType(DType.FP32, (1024, 1024)))
    w = g.add_input("w", TensorType(DType.FP32, (1024, 4096)), ValueKind.PARAM)
    y = g.add_node(Op.DOT, [a, w], [TensorType(DType.FP32, (1024, 4096))],
                   {"lhs_contract": (1,), "rhs_contract": (0,)}).outputs[0]
    g.set_outputs(g.add_node(Op.RELU, [y], [TensorType(DType.FP32, (1024, 4096))]).outputs)
    return g


def _kernels(g: Graph, cpu) -> list[float]:
    return [row.time_s for row in narrowpipe.analyze(g, cpu).ops]


def test_the_stall_is_the_previous_kernels_less_the_own_loops():
    cpu = _stalls()
    assert evicted_call_time(cpu, 16 * MIB, 1 * MIB) == pytest.approx(50e-6 - 1e-6)     # small after large
    assert evicted_call_time(cpu, 1 * MIB, 16 * MIB) == pytest.approx(10e-6 - 30e-6)    # large after small
    assert evicted_call_time(cpu, 4 * MIB, 4 * MIB) == pytest.approx(50e-6 * (0.2 + 0.8 * 0.5 - (0.02 + 0.58 * 0.5)))
    assert evicted_call_time(_cpu(), 16 * MIB, 1 * MIB) == 0.0


def test_the_kernel_after_a_heavy_one_pays_it_and_the_first_kernel_does_not():
    g = _chain()
    plain, stalled = _kernels(g, _cpu()), _kernels(g, _stalls())
    gemm_bytes = 4 * (1024 * 1024 + 1024 * 4096 + 1024 * 4096)     # 36 MiB: past the curve's end
    relu_bytes = 4 * 2 * 1024 * 4096                                # 32 MiB
    assert gemm_bytes > 16 * MIB and relu_bytes > 16 * MIB
    assert stalled[0] == plain[0]                                   # the first kernel follows the caller
    assert stalled[1] - plain[1] == pytest.approx(50e-6 * (1.0 - 0.6))


def test_a_bare_op_prediction_and_an_older_host_file_pay_nothing(tmp_path: Path):
    g = _chain()
    assert narrowpipe.analyze(g, _stalls(), eager_overhead=False).time_s == narrowpipe.analyze(
        g, _cpu(), eager_overhead=False).time_s
    text = HOST.read_text()
    older = tmp_path / "host.toml"                                  # as written before the term existed
    older.write_text("".join(ln for ln in text.splitlines(keepends=True) if not ln.startswith("eager_evicted_call")))
    t = get_target(str(older))
    assert t.eager_evicted_call_overhead is None and t.eager_evicted_call_curve == ()
    if re.search(r"^eager_evicted_call_overhead\w* = ", text, re.M):
        full = get_target(str(HOST))
        assert narrowpipe.analyze(g, full).time_s != narrowpipe.analyze(g, t).time_s


def test_the_sizes_follow_the_l2_the_os_reports():
    assert evicted_call_sizes(2 * MIB) == (256 * 1024, 512 * 1024, MIB, 2 * MIB, 4 * MIB, 8 * MIB, 32 * MIB, 128 * MIB)
    assert evicted_call_sizes(1 * MIB)[-1] == 64 * MIB and max(evicted_call_sizes(8 * MIB)) == 128 * MIB


def test_the_fit_takes_the_stalls_as_fractions_and_bounds_the_own_loops_share():
    # 1 us after 1 MiB is the baseline (nothing evicted yet): the stalls are 0, 18 and 38 us
    ms = [Measurement("evicted_call", "fp32", (s,), 0, s, t) for s, t in ((MIB, 1e-6), (4 * MIB, 19e-6),
                                                                       (16 * MIB, 39e-6))]
    ms += [Measurement("evicted_self", "fp32", (s,), 0, s, t) for s, t in ((MIB, -1e-6), (4 * MIB, 8e-6),
                                                                        (16 * MIB, 90e-6))]
    full, after, own = fit_evicted_calls(ms)
    assert full == pytest.approx(38e-6)
    assert after == ((MIB, 1e-4), (4 * MIB, round(18 / 38, 4)), (16 * MIB, 1.0))
    # negative differences are none (floored at 1e-4 of the stall); 90 us is bounded by the 38 us stall after 16 MiB
    assert own == ((MIB, 1e-4), (4 * MIB, round(8 / 38, 4)), (16 * MIB, 1.0))
    assert fit_evicted_calls(ms[:1]) is None
