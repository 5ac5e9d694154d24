"""The command line's outputs and manners: ``roofline``, ``--quiet``/``--verbose``, progress only on a
terminal, and shell completion scripts that the shell accepts."""

from __future__ import annotations

import io
import shutil
import subprocess

import pytest
from rich.console import Console

from narrowpipe.cli import main
from narrowpipe.costmodel.sweep import sweep
from narrowpipe.models.examples import load_example
from narrowpipe.render.progress import progress


def test_roofline_command_writes_the_plot_and_names_the_bottlenecks(tmp_path, capsys):
    out = tmp_path / "plots" / "r.png"
    assert main(["roofline", "llama-3-8b", "--target", "h100", "--set", "seq=128", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert out.stat().st_size > 20_000 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "kernels as points" in text and "#1 model.layers.*.mlp" in text
    assert main(["roofline", "gpt2", "--target", "h100", "--out", str(tmp_path / "r.gif")]) == 2
    assert ".png or .svg" in capsys.readouterr().err


@pytest.mark.parametrize("before, after", [(["-q"], []), ([], ["--quiet"])])
def test_quiet_prints_nothing_but_still_writes(before, after, tmp_path, capsys):
    out = tmp_path / "c.json"
    assert main([*before, "compare", "gpt2", "--targets", "h100", "--set", "seq=8", "--json", str(out), *after]) == 0
    assert capsys.readouterr().out == "" and out.exists()


def test_verbose_says_what_was_loaded_and_how_long_it_took(capsys):
    assert main(["-v", "analyze", "gpt2", "--set", "seq=8", "--top", "1"]) == 0
    err = capsys.readouterr().err
    assert "loading gpt2:" in err and "nodes" in err and "analyze:" in err


def test_quiet_and_verbose_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        main(["analyze", "gpt2", "-q", "-v"])
    assert "not allowed with" in capsys.readouterr().err


def test_progress_draws_on_a_terminal_only():
    tty = Console(file=io.StringIO(), force_terminal=True, width=80)
    with progress(tty, "sweeping", total=2) as step:
        step("batch=1")
        step("batch=2")
    piped = Console(file=io.StringIO(), force_terminal=False)
    with progress(piped, "sweeping", total=2) as step:
        step("batch=1")
    quiet = Console(file=io.StringIO(), force_terminal=True, quiet=True)
    with progress(quiet, "sweeping", total=2) as step:
        step("batch=1")
    assert "sweeping" in tty.file.getvalue() or "batch" in tty.file.getvalue()
    assert piped.file.getvalue() == "" and quiet.file.getvalue() == ""


def test_sweep_reports_each_point():
    seen: list[str] = []
    sweep(load_example("gpt2"), ["h100"], {"batch": [1, 2], "seq": [8]}, progress=seen.append)
    assert seen == ["batch=1, seq=8", "batch=2, seq=8"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completion_script_loads_and_knows_the_commands(tmp_path, capsys):
    assert main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    assert "roofline" in script and "--trace" in script and "--html" in script and "completion" in script
    path = tmp_path / "narrowpipe.bash"
    path.write_text(script)
    done = subprocess.run(["bash", "-c", f"source {path} && complete -p narrowpipe"], capture_output=True, text=True)
    assert done.returncode == 0 and "narrowpipe" in done.stdout
    for shell in ("zsh", "tcsh"):
        assert main(["completion", shell]) == 0
        assert "roofline" in capsys.readouterr().out


def test_roofline_takes_o_and_tells_two_kernels_of_one_module_and_op_apart(tmp_path, capsys):
    """QA: ``roofline -o`` was refused, and a Cerebras decode printed "#1" and "#2" as the same
    text: the K and V cache copies of every layer's self_attn, one module path and one op."""
    out = tmp_path / "r.svg"
    assert main(["roofline", "llama-3-8b", "--target", "cerebras-wse3", "--mode", "decode", "--context", "2048",
                 "-o", str(out)]) == 0
    lines = [line.split(" ", 3)[-1] for line in capsys.readouterr().out.splitlines() if line.startswith("  #")]
    assert len(lines) == 3 and len(set(lines)) == 3, lines
    svg = out.read_text()
    import re
    labels = re.findall(r"<!-- (#[123] [^<]*?\(overhead, \d+%\))", svg)   # the plot's label of each point
    assert len(labels) >= 2 and len(set(labels)) == len(labels)
    # the cache copies now ride the dataflow stream and are no longer ranked: two bottlenecks of one
    # module path and op, as they were, are told apart by their heaviest kernels' names
    from narrowpipe.costmodel.report import Bottleneck
    from narrowpipe.render.comparison import bottleneck_label
    k = Bottleneck("copy_k_cache", "copy", "overhead", 1e-3, 0.2, "model.layers.*.self_attn", 32)
    v = Bottleneck("copy_v_cache", "copy", "overhead", 1e-3, 0.2, "model.layers.*.self_attn", 32)
    assert bottleneck_label(k, [k, v], with_op=False) != bottleneck_label(v, [k, v], with_op=False)
    assert "copy_k_cache" in bottleneck_label(k, [k, v])
