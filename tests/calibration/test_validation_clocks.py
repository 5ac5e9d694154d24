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


def test_a_busy_machine_is_named_with_the_clock_each_error_uses() -> None:
    """QA: gpt2 on a shared core, 1 s of wall time for 499 ms of the thread's CPU time, per-op rows
    -50 to -60%, and no warning. 0.499 / 1.0 = 50% < 80%: busy; 0.97 / 1.0 = 97%: quiet."""
    from narrowpipe.calibration.contention import busy_validation
    busy = busy_validation([Case("model", "gpt2 b1", measured_s=1.0, predicted_s=0.5, cpu_s=0.499),
                            Case("linear", "gpt2 b1", measured_s=0.4, predicted_s=0.2)])
    assert busy is not None and "busy" in busy and "1 s of wall time for 0.499 s" in busy and "(50%" in busy
    assert "'error' is on the wall clock" in busy and "'error vs CPU' is on the thread's CPU clock" in busy
    assert busy_validation([Case("model", "gpt2 b1", measured_s=1.0, predicted_s=0.5, cpu_s=0.97)]) is None
    assert busy_validation([Case("model", "gpt2 b1", measured_s=1.0, predicted_s=0.5)]) is None   # no CPU clock


def test_validate_run_warns_when_its_forwards_had_a_fraction_of_the_cpu(monkeypatch, one_thread) -> None:
    """The warning comes from the run itself: its samples here are QA's 1 s wall / 0.499 s CPU."""
    pytest.importorskip("torch")
    import warnings

    import narrowpipe.calibration.model_validation as mv
    from narrowpipe.calibration.guards import ValidationWarning
    from narrowpipe.calibration.interleave import Samples

    def busy(fns, **kw):
        return [Samples([1.0] * 5, [0.499] * 5) for _ in fns]
    monkeypatch.setattr(mv, "interleaved_samples", busy)
    monkeypatch.setattr(mv, "warn_if_not_this_machine", lambda target: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mv.validate_run(["gpt2"], "epyc-9755", batches=[1], seq=16, tiny=True, profile=False, probes=False)
    said = [str(w.message) for w in caught if issubclass(w.category, ValidationWarning)]
    assert any("the machine was busy while measuring" in s for s in said)
