"""``narrowpipe analyze MODEL --train``: the training step's phases, times and memory by term."""

import json

from narrowpipe.cli import main


def test_analyze_train_prints_phases_times_and_memory(tmp_path, capsys):
    out = tmp_path / "step.json"
    assert main(["analyze", "gpt2", "--train", "--recompute", "full", "--optimizer", "adamw", "--target", "h100",
                 "--set", "seq=128", "--top", "3", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "training step by phase" in text
    for word in ("forward", "recompute", "backward", "optimizer", "optimizer states", "activations"):
        assert word in text
    data = json.loads(out.read_text())
    assert list(data["flops_by_phase"]) == ["forward", "recompute", "backward", "optimizer"]
    assert sum(data["time_by_phase"].values()) > 0


def test_analyze_without_train_is_the_forward_pass(capsys):
    assert main(["analyze", "gpt2", "--set", "seq=64", "--top", "2"]) == 0
    assert "by phase" not in capsys.readouterr().out
