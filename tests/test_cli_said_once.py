"""The command line says a thing once, and fails before it works: QA found ``serve-sweep --target
h100,nope`` printing h100's table and then failing without writing ``--json``, and ``analyze
llama-3-8b --set seq=100000`` printing the exported-range message as a note and as a warning."""

from __future__ import annotations

from narrowpipe.cli import main


def test_serve_sweep_checks_every_target_before_any_work(tmp_path, capsys):
    out = tmp_path / "s.json"
    rc = main(["serve-sweep", "llama-3-8b", "--target", "h100,nope", "--batches", "1,8", "--context", "1024",
               "--json", str(out)])
    captured = capsys.readouterr()
    assert rc == 2 and "unknown target 'nope'" in captured.err
    assert "context" not in captured.out and "1024" not in captured.out   # no h100 table first
    assert not out.exists()


def test_a_dim_above_its_exported_range_is_said_once(tmp_path, capsys):
    out = tmp_path / "a.json"
    assert main(["analyze", "llama-3-8b", "--target", "h100", "--set", "seq=100000", "--json", str(out)]) == 0
    captured = capsys.readouterr()
    said = captured.out + captured.err
    assert said.count("is above the range the graph was exported for") == 1
    assert "warning: seq=100000 is above the range" in " ".join(captured.err.split())
    assert "is above the range the graph was exported for" in out.read_text()   # the JSON keeps the note
