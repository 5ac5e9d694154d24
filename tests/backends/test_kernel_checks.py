"""The shipped kernel-model checks (backends/kernel_checks.toml) and where they are shown.

The file is written by benchmarks/kernel_accuracy.py from the same run as its committed results
(benchmarks/results/kernel_accuracy.json), so a rerun that moves one number and forgets the other
fails here; the displays are checked against the results file's numbers, not against the module.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from narrowpipe.backends import get_target, targets
from narrowpipe.backends.kernel_checks import (
    CHECKS_FILE,
    check_text,
    checks_document,
    copied_from,
    kernel_check,
    kernel_checks,
)
from narrowpipe.backends.tomlio import read_toml
from narrowpipe.cli import main

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "kernel_accuracy.json"


@pytest.fixture(scope="module")
def results() -> dict:
    return json.loads(RESULTS.read_text())


def _rows(results: dict) -> list[dict]:
    cols = results["row_columns"]
    return [dict(zip(cols, r)) for r in results["held_out_rows"]]


def test_the_shipped_checks_are_the_committed_benchmark_run(results):
    assert read_toml(CHECKS_FILE) == checks_document(results, _rows(results))


def test_every_chip_with_held_out_rows_has_its_numbers(results):
    checked = {chip: s["all"] for chip, s in results["held_out"].items() if s["all"].get("n")}
    assert set(kernel_checks()) == set(checked)
    for chip, a in checked.items():
        c = kernel_check(chip)
        assert c is not None and c.rows == a["n"]
        assert c.median_abs == pytest.approx(a["median_abs"], abs=1e-4)
        assert c.p90_abs == pytest.approx(a["p90_abs"], abs=1e-4)
        assert c.meets(results["bars"]["median_abs"], results["bars"]["p90_abs"]) == (
            a["median_abs"] <= results["bars"]["median_abs"] and a["p90_abs"] <= results["bars"]["p90_abs"])
        sources = {r["source"] for r in _rows(results) if r["chip"] == chip}
        assert set(c.sources) == sources


def test_class_checks_add_up_to_the_chip(results):
    for chip, c in kernel_checks().items():
        assert sum(k.rows for k in c.classes.values()) == c.rows, chip


def test_chips_without_timings_name_whose_terms_they_copy():
    assert copied_from(get_target("h200")) == "h100-sxm"
    assert copied_from(get_target("tpu-v7")) == "tpu-v7-tensorcore"
    assert copied_from(get_target("groq-lpu")) is None
    assert kernel_check("h200") is None
    assert check_text("h200") == "unchecked (h100-sxm's terms)"
    assert check_text("groq-lpu") == "unchecked"
    assert check_text("my-own-chip") == "unchecked"          # a user's target: not in the catalog


def test_check_text_reads_the_results_numbers(results):
    a = results["held_out"]["mi300x"]["all"]
    assert check_text("mi300x") == f"{a['median_abs'] * 100:.0f}%/{a['p90_abs'] * 100:.0f}% on {a['n']} timings"


def test_targets_checks_lists_every_chip_with_its_verdict(capsys, monkeypatch, results):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["targets", "--checks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    bars = results["bars"]
    for name, _ in targets():
        line = next(x for x in lines if x.split() and x.split()[0] == name)
        a = results["held_out"].get(name, {}).get("all", {})
        if a.get("n"):
            met = a["median_abs"] <= bars["median_abs"] and a["p90_abs"] <= bars["p90_abs"]
            assert f" {a['n']} " in line and (" met " in line) == met and (" missed " in line) == (not met)
        else:
            assert "none" in line


def test_target_card_breaks_the_check_down_by_class(capsys, monkeypatch, results):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["targets", "--show", "t4"]) == 0
    out = capsys.readouterr().out
    s = results["held_out"]["t4"]
    assert f"over {s['all']['n']} held-out timings" in out
    for cls in ("small GEMM", "conv fwd", "conv bwd"):
        assert f"{cls}: median {s[cls]['median_abs']:.1%}, p90 {s[cls]['p90_abs']:.1%} ({s[cls]['n']} rows)" in out
    assert main(["targets", "--show", "h200"]) == 0
    assert "its fitted kernel terms are h100-sxm's" in capsys.readouterr().out


def test_compare_says_how_far_each_column_is_checked(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["compare", "gpt2", "--targets", "h100,mi300x,groq-lpu", "--set", "seq=64"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "kernel model checked on public kernel timings" in out
    for name in ("h100-sxm", "mi300x", "groq-lpu"):
        assert f"{name} {check_text(name)}" in out


def test_the_html_page_has_a_checked_cell_per_target():
    from html import escape

    import narrowpipe
    from narrowpipe.models.examples import load_example
    from narrowpipe.render.html import html_page

    page = html_page(narrowpipe.compare(load_example("gpt2"), ["h100", "h200", "groq-lpu"], seq=64))
    assert "kernel model checked" in page
    for name in ("h100-sxm", "h200", "groq-lpu"):
        row = page[page.index(f'<tr data-target="{name}"'):]
        assert escape(check_text(name)) in row[:row.index("</tr>")]
