"""An eager CPU prediction pays each host call's cold-state cost by the forward's footprint (weights
plus peak live activations) on the target's curve, or all of it past half the LLC without a curve;
a bare-op prediction and a host file without the term pay nothing."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.ir import DType
from tests.graph_builders import gemm_graph

MIB = 2**20
HOST = Path(narrowpipe.__file__).parent / "benchmarks" / "results" / "host.toml"


def _cpu(**fields: object) -> narrowpipe.backends.Target:
    epyc = get_target("epyc-9755")
    fields = {"eager_op_overhead": 1e-6, "eager_module_call_overhead": 3e-6, **fields}
    sources = {**epyc.sources, **{k: "assumption: test" for k in fields}}
    return dataclasses.replace(epyc, sources=sources, **fields)


def _extra(g: narrowpipe.ir.Graph, cpu: narrowpipe.backends.Target) -> float:
    plain = _without_cold(cpu)
    return narrowpipe.analyze(g, cpu).time_s - narrowpipe.analyze(g, plain).time_s


def _without_cold(cpu: narrowpipe.backends.Target) -> narrowpipe.backends.Target:
    sources = {k: v for k, v in cpu.sources.items() if not k.startswith("eager_cold_call")}
    return dataclasses.replace(cpu, sources=sources, eager_cold_call_overhead=None, eager_cold_call_curve=())


CURVE = ((1 * MIB, 0.1), (8 * MIB, 1.0))


def test_a_large_forward_pays_the_full_cost_per_kernel_and_module_call():
    g = gemm_graph(2048, 2048, 2048, DType.FP32)          # 16 MiB of weights: past the curve's end
    g.meta["module_calls"] = 10
    assert _extra(g, _cpu(eager_cold_call_overhead=2e-6, eager_cold_call_curve=CURVE)) == pytest.approx(11 * 2e-6)


def test_a_small_forward_pays_the_curves_first_fraction():
    g = gemm_graph(16, 16, 16, DType.FP32)                # 3 KiB in all
    g.meta["module_calls"] = 10
    assert _extra(g, _cpu(eager_cold_call_overhead=2e-6, eager_cold_call_curve=CURVE)) == pytest.approx(
        11 * 0.1 * 2e-6)


def test_between_points_the_fraction_is_log_linear_in_the_footprint():
    g = gemm_graph(1, 1024, 1024, DType.FP32)             # 4 MiB of weights, 8 KiB of activations
    fraction = 0.1 + 0.9 * math.log(4) / math.log(8)      # 4 MiB is 2/3 of the way from 1 to 8 MiB
    assert _extra(g, _cpu(eager_cold_call_overhead=2e-6, eager_cold_call_curve=CURVE)) == pytest.approx(
        fraction * 2e-6, rel=2e-3)


def test_without_a_curve_the_cost_steps_in_past_half_the_last_level_cache():
    cpu = _cpu(eager_cold_call_overhead=2e-6, onchip_capacity=32 * MIB)
    assert _extra(gemm_graph(2048, 2048, 2048, DType.FP32), cpu) == pytest.approx(2e-6)    # 48 MiB > 16
    assert _extra(gemm_graph(512, 512, 512, DType.FP32), cpu) == 0.0                          # 3 MiB


def test_a_bare_op_prediction_pays_no_cold_state():
    g = gemm_graph(2048, 2048, 2048, DType.FP32)
    cpu = _cpu(eager_cold_call_overhead=2e-6, eager_cold_call_curve=CURVE)
    plain = _without_cold(cpu)
    assert narrowpipe.analyze(g, cpu, eager_overhead=False).time_s == narrowpipe.analyze(
        g, plain, eager_overhead=False).time_s


def test_a_host_file_without_the_term_loads_and_pays_nothing(tmp_path: Path):
    text = HOST.read_text()
    assert re.search(r"^eager_cold_call_overhead\w* = ", text, re.M)     # the calibrated file has the term
    older = tmp_path / "host.toml"                                         # as written before the term existed
    older.write_text("".join(ln for ln in text.splitlines(keepends=True) if not ln.startswith("eager_cold_call")))
    t = get_target(str(older))
    assert t.eager_cold_call_overhead is None and t.eager_cold_call_curve == ()
    g = gemm_graph(2048, 2048, 2048, DType.FP32)
    g.meta["module_calls"] = 10
    assert _extra(g, t) == 0.0
