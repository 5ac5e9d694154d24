"""Validation's per-op rows: an honest clock, a like-for-like prediction, and no impossible times.

QA (qa94) on a shared core: per-op rows scaled by the forward's CPU/wall ratio read GPT-2 tiny's
addmm calls (50.3 MFLOP) at 233 us, 216 GFLOP/s on a core whose fp32 peak is 78; and every small op
read +200..+1000% because the prediction carried the eager glue the profiler's in-op times lack.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from narrowpipe.backends import get_target
from narrowpipe.calibration import model_validation as mv
from narrowpipe.calibration.cases import Case, summarize

QA_HOST = Path(__file__).resolve().parents[1] / "render" / "data" / "qa_host.toml"
#: GPT-2 tiny's addmm FLOPs at batch 1, seq 64, n_embd 128, 2 layers (QA's hand count):
#: 2 layers x 2 x 64 x 128 x (384 + 128 + 512 + 512) = 50,331,648.
ADDMM_FLOPS = 2 * (2 * 64 * 128 * 384 + 2 * 64 * 128 * 128 + 2 * 2 * 64 * 128 * 512)


def test_physical_floor_is_flops_at_the_fastest_fp32_rate_or_bytes_at_peak_bandwidth() -> None:
    """qa_host.toml: fp32 matrix 181.02 GFLOP/s (vector 166.4), 974.36 Gbit/s = 121.80 GB/s.
    50,331,648 FLOP / 181.02e9 = 278.0 us; 1.218 GB / 121.80 GB/s = 10.0 ms."""
    t = get_target(str(QA_HOST))
    assert ADDMM_FLOPS == 50_331_648
    assert mv.physical_floor_s(ADDMM_FLOPS, 0, "fp32", t) == pytest.approx(278.04e-6, rel=1e-3)
    assert mv.physical_floor_s(0, 1_217_952_610, "fp32", t) == pytest.approx(10.0e-3, rel=1e-3)


def test_an_op_faster_than_the_peak_is_flagged_not_reported(monkeypatch) -> None:
    """QA's 233 us for 50.3 MFLOP is under the 278 us floor (and 233 x 1.1 = 256 < 278): flagged; the
    summary leaves it out and counts it. 300 us (168 GFLOP/s, 93% of peak) is a measurement."""
    t = get_target(str(QA_HOST))
    rows = [SimpleNamespace(source_op="aten.addmm", time_s=400e-6, flops=ADDMM_FLOPS, bytes=0, dtype="fp32"),
            SimpleNamespace(source_op="aten.add", time_s=10e-6, flops=0, bytes=0, dtype="fp32")]
    for measured, flagged in ((233e-6, True), (300e-6, False)):
        monkeypatch.setattr(mv, "_profile_top_level", lambda *a, m=measured: {"addmm": m, "add": 8e-6})
        cases = {c.group: c for c in mv._by_op(SimpleNamespace(ops=rows), t, "gpt2 b1", None, {})}
        assert cases["addmm"].impossible is flagged and not cases["add"].impossible
        assert cases["addmm"].cpu_s is None and cases["addmm"].how == mv.OP_CLOCK   # one clock, said
        s = summarize(list(cases.values()))
        assert ("addmm" in s) is (not flagged)
        if not flagged:
            assert s["addmm"]["median_abs_error"] == pytest.approx(400 / 300 - 1)


def test_summary_counts_flagged_cases_beside_judged_ones() -> None:
    a = Case("linear", "a", measured_s=2.0, predicted_s=1.0)
    b = Case("linear", "b", measured_s=1e-9, predicted_s=1.0, impossible=True)
    s = summarize([a, b])["linear"]
    assert s["cases"] == 1 and s["flagged"] == 1 and s["median_abs_error"] == pytest.approx(0.5)


def test_per_op_rows_predict_the_bare_ops_and_the_model_row_keeps_the_glue(monkeypatch, one_thread) -> None:
    """With eager_op_overhead set to 1 s, a prediction with the glue is at least 1 s per kernel;
    the per-op rows (bare, as the profiler times them) must be microseconds, the model row seconds."""
    pytest.importorskip("transformers")
    t = dataclasses.replace(get_target(str(QA_HOST)), eager_op_overhead=1.0)
    monkeypatch.setattr(mv, "_profile_top_level", lambda m, a, kw, ops: {op: 1e-3 for op in ops})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = mv.validate_model("gpt2", t, batch=1, seq=16, tiny=True, repeats=1)
    assert r.by_op and r.kernels
    assert r.end_to_end.predicted_s >= r.kernels * 1.0
    assert all(c.predicted_s < 0.01 for c in r.by_op), [(c.group, c.predicted_s) for c in r.by_op]
    assert "warm-up" in (r.end_to_end.how or "") and "rounds" in (r.end_to_end.how or "")
