"""``narrowpipe plan``: prints the strategy, the step breakdown, memory and runners-up; writes the
plan as JSON that loads back; refuses what cannot fit with the overflowing term."""

from __future__ import annotations

from narrowpipe import Plan
from narrowpipe.cli import main


def test_plan_prints_the_breakdown_and_writes_a_plan_that_loads_back(tmp_path, capsys):
    out = tmp_path / "plan.json"
    rc = main(["plan", "gpt2", "--devices", "8", "--target", "dgx-h100", "--global-batch", "16", "--seq", "512",
               "--fix", "microbatch=1,recompute=full", "--tp", "2", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "plan: tp2" in text and "where the step goes" in text and "runners-up" in text
    assert "tensor-parallel" in text and "memory on the fullest device" in text
    plan = Plan.from_json(out.read_text())
    assert plan.parallel.tp == 2 and plan.parallel.recompute == "full" and plan.fits


def test_plan_that_cannot_fit_exits_2_naming_the_memory_term(capsys):
    rc = main(["plan", "llama-3-70b", "--devices", "1", "--target", "h100", "--global-batch", "1"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "no strategy fits" in err and "GB" in err


def test_bad_fix_values_exit_2(capsys):
    assert main(["plan", "gpt2", "--devices", "8", "--target", "dgx-h100", "--global-batch", "8",
                 "--fix", "tp=two"]) == 2
    assert "tp must be an integer" in capsys.readouterr().err
