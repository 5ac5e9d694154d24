"""Validation's per-op rows and summary are on the clock the model rows are judged on.

QA on a loaded machine: smollm2-135m (tiny) read model errors -3.7% / -1.3% on the thread's CPU
clock, but the JSON summary's ``model.median_abs_error`` was 0.50 (the wall clock's -54.8% / -44.4%)
and the per-op rows, from the profiler's wall times, read -70% / -86% beside vit-base's -14.1%.
"""

from __future__ import annotations

import json

import pytest

from narrowpipe.calibration.cases import Case, summarize
from narrowpipe.calibration.model_validation import OP_CLOCK

pytestmark = pytest.mark.timing   # it measures this host: the other test workers wait (tests/host_lock.py)


def test_summary_uses_the_cpu_clock_where_every_case_has_it() -> None:
    # QA's smollm2-135m rows: predicted / wall / CPU clock giving -54.8% / -3.7% and -44.4% / -1.3%
    a = Case("model", "b1", measured_s=2.2124, predicted_s=1.0, cpu_s=1.0382)
    b = Case("model", "b2", measured_s=1.7977, predicted_s=1.0, cpu_s=1.0134)
    s = summarize([a, b])["model"]
    assert s["clock"] == "cpu"
    assert s["median_abs_error"] == pytest.approx((1 - 1 / 1.0382 + 1 - 1 / 1.0134) / 2, rel=1e-9)   # 2.5%
    assert s["max_abs_error"] == pytest.approx(1 - 1 / 1.0382, rel=1e-9)


def test_summary_falls_back_to_the_wall_clock_for_a_group_without_it() -> None:
    a = Case("linear", "x", measured_s=2.0, predicted_s=1.0, cpu_s=1.0)
    b = Case("linear", "y", measured_s=1.0, predicted_s=1.5)
    s = summarize([a, b])["linear"]
    assert s["clock"] == "wall" and s["median_abs_error"] == pytest.approx(0.5) and s["max_abs_error"] == 0.5


def test_per_op_rows_are_on_the_ops_wall_clock_at_one_thread(host, one_thread) -> None:
    """Per-op rows have no CPU-clock column (the profiler has no per-op CPU clock; a forward's
    CPU/wall ratio put QA's addmm at 2.8x the core's peak); the model row keeps both clocks."""
    pytest.importorskip("torch")
    from narrowpipe.calibration.validate import validate_model
    r = validate_model("bert-base", host, batch=1, seq=32, tiny=True, repeats=2)
    assert r.by_op and all(c.cpu_s is None and c.measured_s > 0 and c.how == OP_CLOCK for c in r.by_op)
    assert r.end_to_end.cpu_s is not None
    s = summarize([r.end_to_end, *r.by_op])
    assert s["model"]["clock"] == "cpu" and all(v["clock"] == "wall" for k, v in s.items() if k != "model")


def test_validate_accepts_a_comma_list_of_batches(tmp_path, monkeypatch) -> None:
    """``--batch 1,2`` as every other size list (it was refused: '1,2' is not a whole number)."""
    import narrowpipe.calibration.validate as v
    from narrowpipe.cli import main
    seen = {}

    def fake(names, target, *, batches, **kw):
        seen["batches"] = list(batches)
        seen["probes"] = kw.get("probes", True)
        return v.ValidationRun([], [])
    monkeypatch.setattr(v, "validate_run", fake)
    out = tmp_path / "v.json"
    assert main(["validate", "gpt2", "--target", "epyc-9755", "--batch", "1,2", "--json", str(out)]) == 0
    assert seen["batches"] == [1, 2]
    assert seen["probes"] is True    # the README's drift probes run from the CLI too
    doc = json.loads(out.read_text())
    assert doc["version"] == 6 and doc["probes"] == []
