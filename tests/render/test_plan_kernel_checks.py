"""``plan`` says how far its chip's kernel model is checked, as ``compare`` does (QA qa95 finding 2).

An unchecked chip's plan read like a prediction: tpu-v5p's 91.7% MFU (its catalog ``matmul_efficiency
= 1`` is an assumption, and its kernel terms are copied from tpu-v6e's fit, ``targets --checks``)
against MaxText's published 55-67% on v5e. The line is compare's own (``backends.kernel_checks.checks_line``),
so the two commands cannot word it differently; the reference here is the shipped checks table
(backends/kernel_checks.toml), not the plan.
"""

from __future__ import annotations

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.backends.kernel_checks import check_text, copied_from
from narrowpipe.cli import main


def test_the_plan_ends_with_the_chip_check_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "400")
    tiny = narrowpipe.transformer(2, 512, 8, 1000, ffn=1024, seq=256, name="tiny")
    path = tmp_path / "tiny.json"
    tiny.save(str(path))
    assert main(["plan", str(path), "--devices", "4", "--target", "tpu-v5p", "--global-batch", "8"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "kernel model checked on public kernel timings" in out
    assert f"tpu-v5p {check_text('tpu-v5p')} (narrowpipe targets --checks)" in out
    # tpu-v5p has no held-out timings of its own: its terms are another chip's
    assert copied_from(get_target("tpu-v5p")) and "unchecked" in check_text("tpu-v5p")


def test_a_chip_without_a_catalog_system_is_named_once(capsys, monkeypatch, tmp_path):
    """QA qa95: the v6e header read "tpu-v6e (tpu-v6e (chip fields))"; the chip's name is printed
    once, with "(chip fields)" saying its own link fields stand for a system."""
    monkeypatch.setenv("COLUMNS", "400")
    path = tmp_path / "tiny.json"
    narrowpipe.transformer(2, 512, 8, 1000, ffn=1024, seq=256, name="tiny").save(str(path))
    assert main(["plan", str(path), "--devices", "4", "--target", "tpu-v6e", "--global-batch", "8"]) == 0
    out = capsys.readouterr().out
    assert "4 x tpu-v6e (chip fields)," in out and "tpu-v6e (tpu-v6e" not in out
