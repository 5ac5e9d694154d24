"""``plan --dtype fp8`` against published FP8 measurements (benchmarks/_nemo_fp8.py, in
benchmarks/results/megatron_validate.*), nothing fitted to them.

The published FP8/BF16 ratio: Fujii, Nakamura and Yokota (arXiv:2411.08719) trained Llama-3-70B with
Megatron-LM on H100s, BF16 415 TFLOP/s against FP8 "a maximum of 570", 1.37x. Their parallel layout
is not in what was read, so (assumption) the ratio is predicted in NeMo 24.07's 70B layout on 64 H100s
(TP4 PP4 CP2 VP5, sequence 8192, global batch 128): the same model, framework family and chip. Bar:
within 15% of 1.37 (the tool's BF16 steps alone are 10-16% off Megatron's; the ratio of two plans
cancels part of that). It fails when FP8 reaches too little of the step: with the backward GEMMs left
in bf16 the predicted ratio is 1.12.
"""

from __future__ import annotations

import pytest
from benchmark_module import load_benchmark  # tests/benchmark_module.py


def _mod():
    load_benchmark("megatron_validate")
    import _nemo_fp8
    return _nemo_fp8


def test_the_fp8_over_bf16_speedup_of_llama3_70b_is_within_15_percent_of_the_published_one():
    m = _mod()
    row = next(r for r in m.ROWS if r.model == "llama-3-70b" and r.source == "NEMO-2407")
    ratio = m.predict(row, "bf16").step_time_s / m.predict(row, "fp8").step_time_s
    assert m.PUBLISHED_RATIO == pytest.approx(570 / 415)
    assert ratio == pytest.approx(m.PUBLISHED_RATIO, rel=0.15), ratio


def test_the_committed_fp8_rows_are_what_the_code_predicts():
    import json

    from benchmark_module import BENCHMARKS
    m = _mod()
    committed = json.loads((BENCHMARKS / "results" / "megatron_validate.json").read_text())["fp8_rows"]
    row = m.ROWS[0]
    got = m.predict(row, "fp8").tokens_per_s / row.gpus
    mine = next(r for r in committed if r["row"] == row.name and r["source"] == row.source)
    assert mine["predicted_tokens_per_s_per_gpu"] == pytest.approx(got, rel=1e-9), \
        "rerun python benchmarks/megatron_validate.py and commit benchmarks/results/megatron_validate.*"
