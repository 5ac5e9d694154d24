"""First-use trust in the CLI's output: what a new user reads is whole (no word lost to markup, no
name cut) and a --json path with new folders just works."""

from __future__ import annotations

import sys

import narrowpipe
from narrowpipe.cli import main


def test_pip_install_hint_keeps_its_extra_in_brackets(tmp_path, monkeypatch, capsys):
    """Rich read ``[torch]`` as a markup tag and printed ``pip install 'narrowpipe'``."""
    monkeypatch.setitem(sys.modules, "narrowpipe.frontends.torch.frontend", None)  # as if torch were absent
    model = tmp_path / "m.pt2"
    model.write_bytes(b"")
    assert main(["analyze", str(model)]) == 2
    assert "pip install 'narrowpipe[torch]'" in capsys.readouterr().err


def test_validate_without_torch_says_how_to_install_it(monkeypatch, capsys):
    """QA on a torch-free install: ``validate`` crashed with ModuleNotFoundError where ``calibrate``
    gave the install hint."""
    monkeypatch.setitem(sys.modules, "torch", None)          # as if torch were absent
    assert main(["validate", "gpt2", "--target", "epyc-9755"]) == 2
    err = capsys.readouterr().err
    assert "validate runs the model with torch: pip install 'narrowpipe[torch]'" in err and "Traceback" not in err


def test_json_into_a_missing_folder_creates_it(tmp_path, capsys):
    """The "wrote" line names the path on one line as given, however long (rich wrapped it at 80
    columns) and whatever brackets it holds (read as markup)."""
    out = tmp_path / "new" / ("a-folder-name-long-enough-to-pass-eighty-columns-[run 1]" * 2) / "r.json"
    assert main(["analyze", "gpt2", "--set", "seq=8", "--top", "1", "--json", str(out)]) == 0
    assert out.exists() and f"wrote {out}\n" in capsys.readouterr().out


def test_json_that_cannot_be_written_is_a_clear_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["analyze", "gpt2", "--set", "seq=8", "--top", "1", "--json", str(blocker / "r.json")]) == 2
    err = capsys.readouterr().err
    assert "cannot write --json" in err and "Traceback" not in err


def test_targets_names_are_whole_and_peak_is_one_dtype(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["targets"]) == 0
    text = capsys.readouterr().out
    assert max(len(line) for line in text.splitlines()) <= 80
    for name, _ in narrowpipe.targets():
        assert name in text                      # a100-sxm-80gb, not a100-sxm-8…
    assert "bf16 dense" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("a100-sxm-80gb"))
    assert "312 T" in row                        # its bf16 peak, not its int4 1.25 PFLOP/s
    b200 = next(line for line in text.splitlines() if line.strip().startswith("b200"))
    assert "2.25 P" in b200                      # not fp4's 9 PFLOP/s
    groq = next(line for line in text.splitlines() if line.strip().startswith("groq-lpu"))
    assert "[fp16]" in groq                      # no bf16 there: the rate used is named


def test_cli_leaves_other_warnings_to_pythons_filters(monkeypatch):
    """Recording our range warning must not switch on warnings the filters hide, and a warning
    shown again after the command is shown once (not recorded again, without end)."""
    import warnings

    import narrowpipe.cli as cli

    def noisy(args, console):
        warnings.warn("old API", DeprecationWarning, stacklevel=1)
        warnings.warn("torch says", UserWarning, stacklevel=1)
        return 0

    monkeypatch.setitem(cli._COMMANDS, "examples", noisy)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("always", UserWarning)
        assert main(["examples"]) == 0
    messages = [str(w.message) for w in shown]
    assert "old API" not in messages and messages.count("torch says") == 1
