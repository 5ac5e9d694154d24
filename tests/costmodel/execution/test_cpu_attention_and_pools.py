"""CPU fused attention at its measured curve (by key length; causal saves whole key blocks only),
and average pools at the measured mean rate: hand-computed on one-op graphs."""

from __future__ import annotations

import dataclasses

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.backends.defaults import CPU_ATTENTION_KV_BLOCK
from narrowpipe.calibration.fit import fit_curves
from narrowpipe.calibration.sweeps import Measurement
from narrowpipe.ir import DType, Graph, Op, TensorType

CURVE = ((128.0, 0.4), (1024.0, 0.5))


def _cpu(**fields: object) -> narrowpipe.backends.Target:
    epyc = get_target("epyc-9755")
    keys = [f"{k}.{sub}" if isinstance(v, dict) else k for k, v in fields.items()
            for sub in (v if isinstance(v, dict) else [None])]
    sources = {**epyc.sources, **{k: "assumption: test" for k in keys}}
    return dataclasses.replace(epyc, sources=sources, **fields)


def attention_graph(b: int, h: int, s: int, d: int, causal: bool = False) -> Graph:
    g = Graph("sdpa")
    q, k, v = (g.add_input(n, TensorType(DType.FP32, (b, h, s, d))) for n in "qkv")
    g.set_outputs(g.add_node(Op.ATTENTION, [q, k, v], [TensorType(DType.FP32, (b, h, s, d))],
                             {"causal": causal}).outputs)
    return g


def test_fused_attention_runs_at_the_curve_for_its_key_length():
    cpu = _cpu(attention_curve=CURVE)
    peak = cpu.matrix_flops["fp32"]
    for s, eff in ((128, 0.4), (1024, 0.5)):
        r = narrowpipe.analyze(attention_graph(1, 8, s, 64), cpu, eager_overhead=False)
        flops = 4 * 8 * s * s * 64
        (k,) = r.timeline
        assert k.compute_s == pytest.approx(flops / (peak * eff))
        assert r.time_s == pytest.approx(max(k.compute_s, k.memory_s) + cpu.launch_overhead)


def test_causal_attention_skips_key_blocks_only_past_one_block():
    cpu = _cpu(attention_curve=CURVE)
    short = [narrowpipe.analyze(attention_graph(1, 8, 128, 64, c), cpu, eager_overhead=False).time_s
             for c in (False, True)]
    assert short[0] == short[1]                                   # one key block: nothing skipped
    s = 2 * CPU_ATTENTION_KV_BLOCK
    long = [narrowpipe.analyze(attention_graph(1, 8, s, 64, c), cpu, eager_overhead=False).timeline[0].compute_s
            for c in (False, True)]
    assert long[1] / long[0] == pytest.approx(0.75)               # 2 blocks: (2 + 1) / (2 x 2)


def test_the_attention_curve_is_fitted_by_key_length():
    peak = 1e11
    ms = [Measurement("attention", "fp32", (1, 12, 128, 64), 50_331_648, 0, 50_331_648 / (0.4 * peak)),
          Measurement("attention", "fp32", (8, 12, 128, 64), 402_653_184, 0, 402_653_184 / (0.36 * peak)),
          Measurement("attention", "fp32", (1, 8, 1024, 64), 2_147_483_648, 0, 2_147_483_648 / (0.5 * peak))]
    curve = fit_curves(ms, {"fp32": peak}).attention_curve
    assert curve == ((128.0, 0.38), (1024.0, 0.5))                # the two 128-key points: their median


def pool_graph(kind: str) -> Graph:
    g = Graph("pool")
    x = g.add_input("x", TensorType(DType.FP32, (8, 2048, 7, 7)))
    attrs = {"kind": kind, "kernel": (7, 7)} if kind == "avg" else {"kind": kind, "kernel": (3, 3), "stride": (2, 2)}
    out = (8, 2048, 1, 1) if kind == "avg" else (8, 2048, 3, 3)
    g.set_outputs(g.add_node(Op.POOL, [x], [TensorType(DType.FP32, out)], attrs).outputs)
    return g


def test_an_average_pool_runs_at_the_mean_rate_and_a_max_pool_at_the_pool_rate():
    cpu = _cpu(vector_op_flops={"pool": 1e8, "reduce_mean": 2e10})
    elements = 8 * 2048 * 7 * 7
    avg = narrowpipe.analyze(pool_graph("avg"), cpu, eager_overhead=False).timeline[0]
    mx = narrowpipe.analyze(pool_graph("max"), cpu, eager_overhead=False).timeline[0]
    assert avg.compute_s == pytest.approx(elements / 2e10)
    assert mx.compute_s == pytest.approx(elements / 1e8)
