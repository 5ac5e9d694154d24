"""The QA pass on the CLI's outputs: each test checks a fixed defect against a hand computation."""

from __future__ import annotations

import json

import pytest

from narrowpipe.cli import main


def test_mfu_says_when_part_of_the_matmuls_ran_at_a_faster_peak(capsys):
    """QA: gpt2 on TPU v5e with int4 activations read MFU 96.6%, above the MXU fold's ~89%: MFU holds
    every FLOP against the fp32 peak (fp32 weights at --fp32-matmul highest: six bf16 passes, 197 / 6 = 32.83
    TFLOP/s) while attention (int4 q, k, v) runs on the int8 MXUs (394 TFLOP/s). By hand at seq 256, per layer and
    over 2 * seq * 768: attention 2 * seq, the matmuls 9216 (qkv 2304, proj 768, fc 3072, proj 3072),
    plus lm_head's 50257 once: 12 * 512 / (12 * 512 + 12 * 9216 + 50257) = 3.7% -> '4%'."""
    assert main(["analyze", "gpt2", "--target", "tpu-v5e", "--activations", "int4", "--set", "seq=256",
                 "--fp32-matmul", "highest"]) == 0      # full float32: six passes (the default is one)
    text = " ".join(capsys.readouterr().out.split())
    assert "MFU holds every FLOP against the fp32 as 6x bf16 peak (32.83 TFLOP/s)" in text
    share = 12 * 512 / (12 * 512 + 12 * 9216 + 50257)
    assert f"{share:.0%} of the matmul FLOPs ran at a faster peak (int4 as int8 at 394 TFLOP/s)" in text


def test_whatif_prices_the_scaled_chip_as_the_base_it_modifies(tmp_path, capsys):
    """QA: --price h100=2 priced only the base; the scaled chip took the catalog's $6.88/h. By hand
    from the JSON: cost = time x $2/h / 3600 s/h on both sides."""
    out = tmp_path / "wp.json"
    assert main(["whatif", "gpt2", "--target", "h100", "--scale", "compute=2", "--price", "h100=2",
                 "--set", "seq=128", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    for side in ("base", "scaled"):
        t = doc[side]["timing"]
        assert t["price_per_hour"] == 2.0 and t["price_basis"] == "given"
        assert t["cost_usd"] == pytest.approx(t["time_s"] * 2.0 / 3600, rel=1e-12)
    # a price on the scaled name itself wins (the last '=' splits a pair: the name has its own)
    assert main(["whatif", "gpt2", "--target", "h100", "--scale", "compute=2", "--price", "h100=2",
                 "--price", "h100-sxm@compute=2=3", "--set", "seq=128", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert (doc["base"]["timing"]["price_per_hour"], doc["scaled"]["timing"]["price_per_hour"]) == (2.0, 3.0)


def test_whatif_shows_the_fit_of_both_sides_and_the_notes_they_share(monkeypatch, capsys):
    """QA: llama-3-70b on one H100 (bf16 weights 2 x 70.55 G params = 141 GB, more than the 85.5 GB
    the H100 leaves) printed only the speed-up; doubling its memory flipped the fit and printed
    'moved no kernel's time'."""
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["whatif", "llama-3-70b", "--target", "h100", "--scale", "hbm_bandwidth=2", "--set", "seq=1"]) == 0
    text = capsys.readouterr().out
    row = next(ln for ln in text.splitlines() if ln.strip("│ ").startswith("memory"))
    assert row.count("does not fit: 141 GB > 85.5 GB") == 2
    # the note both sides share, at the runtime's 6%: 0.94 x 85.52 = 80.4 GB usable, ceil(141 / 80.4) = 2
    assert "does not fit with the runtime reserve: 141 GB needed, 80.4 of 85.5 GB usable per device" in text
    assert "needs >= 2 devices" in text
    assert main(["whatif", "llama-3-70b", "--target", "h100", "--scale", "memory_capacity=2", "--set", "seq=1"]) == 0
    text = capsys.readouterr().out
    row = next(ln for ln in text.splitlines() if ln.strip("│ ").startswith("memory"))
    assert "does not fit: 141 GB > 85.5 GB" in row and "fits: 141 GB of 171 GB" in row   # 2 x 85.5
    assert "the model fits the modified chip (it did not fit the base)" in text
    assert "base: does not fit" in text


def test_a_target_file_alias_over_a_catalog_name_is_warned(tmp_path, capsys):
    """QA: a copy of the H100 file named 'my-chip' with aliases ['h100'] took `--targets h100` over
    silently (a file named 'h100-sxm' was warned about); the warning names file, alias and chip."""
    from pathlib import Path

    import narrowpipe.backends
    text = (Path(narrowpipe.backends.__file__).parent / "catalog" / "h100-sxm.toml").read_text()
    text = text.replace('name = "h100-sxm"', 'name = "my-chip"', 1)
    text = text.replace('aliases = ["h100", "h100-sxm5", "h100-sxm-80gb"]', 'aliases = ["h100"]', 1)
    chip = tmp_path / "alias.toml"
    chip.write_text(text)
    assert main(["compare", "gpt2", "--targets", "h100", "--target-file", str(chip), "--set", "seq=1"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert (f"warning: {chip}: its chip 'my-chip' lists the alias 'h100', which names the catalog's h100-sxm; "
            "--targets h100 means this file's chip here") in err


def test_analyze_warns_of_a_price_that_prices_nothing(capsys):
    """QA: analyze dropped --price silently for another chip and without a target (compare warns)."""
    assert main(["analyze", "gpt2", "--target", "h100", "--price", "b200=2", "--set", "seq=8"]) == 0
    assert "warning: --price for b200: not the analyzed target (h100-sxm), so it prices nothing" in \
        " ".join(capsys.readouterr().err.split())
    assert main(["analyze", "gpt2", "--price", "h100=2", "--set", "seq=8"]) == 0
    assert "--price for h100: analyze without --target times nothing" in " ".join(capsys.readouterr().err.split())


def test_an_output_under_a_file_says_not_a_directory(tmp_path, capsys):
    """QA: --trace o.txt/x.json (o.txt a file) said 'File exists'."""
    (tmp_path / "o.txt").write_text("x")
    bad = tmp_path / "o.txt" / "x.json"
    assert main(["analyze", "gpt2", "--target", "h100", "--set", "seq=8", "--trace", str(bad)]) == 2
    assert f"{tmp_path / 'o.txt'} is a file, not a directory" in " ".join(capsys.readouterr().err.split())
    # missing folders are created on purpose (README)
    deep = tmp_path / "a" / "b" / "r.json"
    assert main(["analyze", "gpt2", "--set", "seq=8", "--json", str(deep)]) == 0 and deep.exists()


def test_expert_balance_on_a_dense_model_is_warned(capsys):
    assert main(["analyze", "gpt2", "--set", "seq=8", "--expert-balance", "hot:0.5"]) == 0
    assert "--expert-balance hot:0.5: the model has no experts" in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("argv", [["compare", "gpt2", "--targets", "h100,,b200"],
                                  ["analyze", "gpt2", "--target", "h100", "--price", "h100=2,,b200=3"],
                                  ["analyze", "gpt2", "--set", "seq=8,,16"]])
def test_an_empty_item_between_commas_is_refused_by_every_list_flag(argv, capsys):
    assert main(argv) == 2
    assert "has an empty item between commas" in capsys.readouterr().err


def test_a_trailing_comma_ends_every_list(capsys):
    assert main(["compare", "gpt2", "--targets", "h100,", "--set", "seq=8,"]) == 0


def test_errors_name_what_the_user_typed_not_internals(capsys):
    assert main(["whatif", "gpt2", "--target", "h100", "--scale", "colour=2"]) == 2
    err = capsys.readouterr().err
    assert "cannot scale 'colour': not a resource" in err and "scaled()" not in err
    assert main(["analyze", "gpt2", "--target", "h100", "--weights", "fp7"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--weights 'fp7' is not a number format; choose from fp64, fp32, tf32, bf16, fp16, fp8_e4m3" in err
    assert not any(w in err for w in ("bool", "string", "complex128", "int64"))


def test_json_dash_is_stdout_and_the_tables_go_to_stderr(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["analyze", "gpt2", "--set", "seq=8", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["format"] == "narrowpipe.report" and "by op type" in err
    assert not (tmp_path / "-").exists()


def test_bare_narrowpipe_prints_help_on_stderr_and_exits_2(capsys):
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "usage: narrowpipe" in err


def test_mfu_above_one_on_winograd_convolutions_says_why():
    """QA: VGG-19 (onnx's light_vgg19) on an A100 read MFU 101.8% of the fp32 peak with no note: its
    3x3 fp32 layers run as Winograd on the CUDA cores, fewer multiplies than the direct count MFU
    holds (39.3 GFLOP in 1.98 ms is 19.9 TFLOP/s against 19.5). The note says so; tensor-core
    implicit GEMMs execute at least the direct FLOPs and get none (an A100 runs fp32 convolutions on
    them by default, as cuDNN under PyTorch does: the CUDA-core case is ``fp32_conv="highest"``)."""
    from pathlib import Path

    import onnx

    import narrowpipe

    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_vgg19.onnx"
    graph = narrowpipe.load(path)
    r = narrowpipe.analyze(graph, "a100", fp32_conv="highest")
    assert r.modeled_flops / (r.time_s * 19.5e12) == pytest.approx(r.timing.mfu) and r.timing.mfu > 1
    convs = [(t.flops, t.executed_flops) for t in r.timeline if t.op == "conv"]
    saved = 1 - sum(e for _, e in convs) / sum(f for f, _ in convs)
    assert f"MFU passes 100%: {saved:.0%} of the convolution FLOPs were never executed" in " ".join(r.timing.notes)
    tf32 = narrowpipe.analyze(graph, "a100")
    assert tf32.timing.mfu < 1 and not any("MFU passes 100%" in n for n in tf32.timing.notes)
