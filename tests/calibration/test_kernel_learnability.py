"""The learner behind ``benchmarks/kernel_learnability.py``: what it concludes about the kernel bars
holds only if it learns what the shapes determine and cannot see the held-out times.

Synthetic rows with known answers: kernel times that follow the shape (a roofline of FLOPs and
bytes, with a per-kind plateau), and the same rows with a per-problem factor that no shape word
carries (an algorithm pick drawn at random per problem).
"""

from __future__ import annotations

import math
import random

import pytest
from benchmark_module import load_benchmark  # tests/benchmark_module.py

pytest.importorskip("sklearn")
kl = load_benchmark("kernel_learnability")

#: Two settings keep the cross-validation short; the benchmark chooses among 16.
SETTINGS = ({"loss": "squared_error", "max_depth": None, "learning_rate": 0.1, "min_samples_leaf": 5,
             "max_iter": 200},
            {"loss": "absolute_error", "max_depth": 4, "learning_rate": 0.1, "min_samples_leaf": 5, "max_iter": 200})


def _rows(n: int, pick_spread: float, seed: int = 0) -> list[dict]:
    """GEMM and forward-conv rows; time = max(FLOPs / plateau, bytes / bandwidth) + 5 us, times a
    per-problem factor exp(U(-pick_spread, pick_spread)); every other row held out."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        if i % 2:
            m, nn, k = (2 ** rng.randint(6, 13) for _ in range(3))
            shape, kind, plateau = f"b=1 m={m} n={nn} k={k}", "gemm", 100e12
            flops, nbytes = 2 * m * nn * k, 2 * (m * k + k * nn + m * nn)
        else:
            n_, c, h, kk = (2 ** rng.randint(lo, hi) for lo, hi in ((0, 5), (4, 9), (3, 7), (4, 9)))
            shape, kind, plateau = f"n={n_} c={c} h={h} w={h} k={kk} r=3 s=3 ph=1 pw=1 sh=1 sw=1", "conv_fwd", 60e12
            flops, nbytes = 2 * n_ * h * h * kk * c * 9, 2 * n_ * h * h * (c + kk)
        t = (max(flops / plateau, nbytes / 2e12) + 5e-6) * math.exp(rng.uniform(-pick_spread, pick_spread))
        rows.append({"chip": "x", "kind": kind, "dtype": "fp16", "shape": shape, "layout": "",
                     "held_out": bool(i % 4 >= 2), "measured_s": t, "predicted_s": flops / plateau + 5e-6,
                     "error": 0.0})
    return rows


def _held_stats(rows: list[dict], with_model: bool) -> dict[str, float]:
    fit = [r for r in rows if not r["held_out"]]
    held = [r for r in rows if r["held_out"]]
    return kl._stats(kl.learn(fit, held, with_model, SETTINGS, folds=3).errors)


def test_the_learner_reaches_the_bars_where_the_shapes_determine_the_time():
    s = _held_stats(_rows(400, 0.0), with_model=False)
    assert s["median_abs"] <= 0.10 and s["p90_abs"] <= 0.25, s


def test_the_learner_cannot_learn_a_per_problem_pick_the_shapes_do_not_carry():
    """A factor of up to e^0.7 = 2x either way per problem: the held-out tail stays near it, with or
    without narrowpipe's (here: the roofline without the pick) prediction as an input."""
    rows = _rows(400, 0.7)
    for with_model in (False, True):
        s = _held_stats(rows, with_model)
        assert s["p90_abs"] > 0.4, s


def test_features_read_the_shape_words_of_both_kinds():
    gemm = {"kind": "gemm", "dtype": "bf16", "shape": "b=2 m=256 n=512 k=1024", "layout": "NT", "predicted_s": 1e-5}
    conv = {"kind": "conv_bwd_filter", "dtype": "fp32", "shape": "n=8 c=3 h=224 w=224 k=64 r=7 s=7 ph=3 pw=3 sh=2 sw=2",
            "layout": "", "predicted_s": 1e-4}
    g = kl.features(gemm, with_model=True)
    assert g[:3] == [0.0, 3.0, 2.0] and g[3:7] == [1.0, 8.0, 9.0, 10.0]
    assert g[-2] == pytest.approx(math.log2(2 * 2 * 256 * 512 * 1024)) and g[-1] == pytest.approx(math.log(1e-5))
    c = kl.features(conv, with_model=False)
    # 224 + 6 - 7 = 223 // 2 + 1 = 112 output rows and columns
    assert c[3:7] == pytest.approx([math.log2(8 * 112 * 112), 6.0, math.log2(3 * 49), math.log2(3)])
    assert c[7:11] == [49.0, 2.0, 3.0, 1.0] and len(c) == len(g) - 1


def test_repeat_spread_compares_only_the_same_problem():
    rows = [{"chip": "x", "kind": "gemm", "dtype": "fp16", "shape": "b=1 m=1 n=1 k=1", "layout": "NN", "measured_s": t}
            for t in (1.0, 1.5)]
    rows.append({**rows[0], "layout": "TN", "measured_s": 9.0})
    assert kl.repeat_spread(rows) == {"x": [pytest.approx(0.5)]}


def test_the_output_features_keep_only_depth_and_output_size():
    """Two GEMMs of the same K and b x M x N look the same to the two-number learner, and differ to
    the learner that reads every dim."""
    a = {"kind": "gemm", "dtype": "bf16", "shape": "b=1 m=4096 n=256 k=1024", "layout": "", "predicted_s": 1e-5}
    b = {**a, "shape": "b=4 m=256 n=1024 k=1024"}
    assert kl.gemm_output_features(a) == kl.gemm_output_features(b) == [0.0, 3.0, 0.0, 10.0, 20.0]
    assert kl.features(a, False) != kl.features(b, False)
