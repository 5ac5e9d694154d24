"""The compare/whatif/targets commands end to end, and user chips from TOML files."""

from __future__ import annotations

import dataclasses
import json

import pytest

import narrowpipe
from narrowpipe.backends import dump_target, get_target
from narrowpipe.cli import main
from narrowpipe.models.examples import load_example

ONE_PER_FAMILY = "h100,tpu-v5e,groq-lpu,xeon-6980p"


def test_compare_gpt2_one_chip_per_family_json_has_every_ops_bound(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    out = tmp_path / "cmp.json"
    assert main(["compare", "gpt2", "--targets", ONE_PER_FAMILY, "--set", "seq=256", "--json", str(out),
                 "--price", "h100=2.5"]) == 0
    text = capsys.readouterr().out
    for name in ("h100-sxm", "tpu-v5e", "groq-lpu", "xeon-6980p"):
        assert name in text
    data = json.loads(out.read_text())
    assert data["format"] == "narrowpipe.comparison"
    families = {t["timing"]["family"] for t in data["targets"]}
    assert families == {"gpu", "tpu", "dataflow", "cpu"}
    for t in data["targets"]:
        assert t["timing"]["time_s"] > 0
        modeled = [op for op in t["ops"] if op["modeled"]]
        assert modeled and all(op["bound"] in ("compute", "memory", "interconnect", "overhead") for op in modeled)
    h100 = next(t for t in data["targets"] if t["target"] == "h100-sxm")
    assert h100["timing"]["price_per_hour"] == 2.5 and h100["timing"]["cost_usd"] > 0


def test_user_chip_from_a_toml_file_needs_no_code(tmp_path, capsys):
    base = get_target("h100")
    path = dump_target(base.scaled(memory_bandwidth=1.5), tmp_path / "my-chip.toml")
    g = load_example("gpt2")
    a = narrowpipe.analyze(g, "h100", seq=1)
    b = narrowpipe.analyze(g, str(path), seq=1)
    assert b.time_s < a.time_s
    assert main(["compare", "gpt2", "--targets", "h100", "--target-file", str(path), "--set", "seq=1"]) == 0


def test_a_target_file_chip_can_be_named_in_targets(tmp_path, capsys):
    base = get_target("h100")
    chip = dataclasses.replace(base.scaled(memory_bandwidth=1.5), name="my-chip", aliases=("mine",),
                               sources={**base.sources})
    path = dump_target(chip, tmp_path / "chip.toml")
    out = tmp_path / "c.json"
    assert main(["compare", "gpt2", "--targets", "MINE,h100", "--target-file", str(path), "--set", "seq=1",
                 "--json", str(out)]) == 0
    names = [t["target"] for t in json.loads(out.read_text())["targets"]]
    assert names == ["my-chip", "h100-sxm"]          # named once, in the order --targets gives
    assert main(["compare", "gpt2", "--targets", "h100", "--target-file", str(path), "--set", "seq=1",
                 "--json", str(out)]) == 0
    assert [t["target"] for t in json.loads(out.read_text())["targets"]] == ["h100-sxm", "my-chip"]
    # a price names the file's chip as --targets does (it was looked up in the catalog only)
    assert main(["compare", "gpt2", "--targets", "mine,h100", "--target-file", str(path), "--set", "seq=1",
                 "--price", "my-chip=0.5", "--json", str(out)]) == 0
    prices = {t["target"]: t["timing"]["price_per_hour"] for t in json.loads(out.read_text())["targets"]}
    assert prices["my-chip"] == 0.5
    assert main(["analyze", "gpt2", "--target", str(path), "--set", "seq=1", "--price", "mine=0.5", "--json",
                 str(out)]) == 0
    assert json.loads(out.read_text())["timing"]["price_per_hour"] == 0.5


def test_a_target_file_named_like_a_catalog_chip_is_flagged_and_not_claimed_checked(tmp_path, capsys):
    """A user's file that reuses a catalog name (with other numbers) takes that name's place in
    --targets: said with a warning, and the catalog chip's kernel check is not shown as its own."""
    from narrowpipe.backends.kernel_checks import kernel_check
    base = get_target("h100")
    mine = dataclasses.replace(base.scaled(memory_bandwidth=2.0), name=base.name)
    path = dump_target(mine, tmp_path / "h100.toml")
    assert main(["compare", "gpt2", "--targets", "h100-sxm", "--target-file", str(path), "--set", "seq=1"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "h100.toml: its chip is named 'h100-sxm', which is the catalog's h100-sxm" in err
    assert kernel_check(base) is not None and kernel_check(get_target(str(path))) is None


def test_malformed_target_file_names_the_field(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\nfamily = "gpu"\nvendor = "x"\ndisplay_name = "x"\nmemory_capacity_gb = 80\n'
                   'memory_bandwidth_tbps = -3\nsm_count = 10\nl2_mb = 1\nsmem_per_sm_kib = 100\n'
                   '[matrix_tflops]\nbf16 = 100\n')
    assert main(["compare", "gpt2", "--targets", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.toml" in err and "memory_bandwidth_tbps" in err


def test_whatif_reports_speedup_and_bound_mix(capsys):
    assert main(["whatif", "llama-3-8b", "--target", "h100", "--scale", "hbm_bandwidth=2", "--set", "seq=1"]) == 0
    text = capsys.readouterr().out
    assert "speed-up" in text and "bound mix" in text
    w = narrowpipe.whatif(load_example("llama-3-8b"), "h100", {"hbm_bandwidth": 2}, seq=1)
    assert 1.5 < w.speedup < 2.0          # decode-like: mostly memory-bound
    assert w.base.timing.narrowest == "memory"


def test_whatif_on_the_matrix_peak_of_an_fp32_model_says_why_nothing_moved(capsys, monkeypatch):
    """A QA pass found ``--scale peak_flops=2`` giving 1.000x for fp32 GPT-2 on an H100 with no word
    why (its matmuls run on the vector units); compute=2 doubles every FLOP/s, as "if doubled" does."""
    monkeypatch.setenv("COLUMNS", "200")
    g = load_example("gpt2")
    assert main(["whatif", "gpt2", "--target", "h100", "--scale", "peak_flops=2"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "speed-up: 1.000x" in text and "moved no kernel's time" in text and "use compute" in text
    w = narrowpipe.whatif(g, "h100", {"compute": 2})
    assert w.speedup == pytest.approx(w.base.timing.speedup_if_doubled["compute"], rel=1e-9)
    assert not any("moved no kernel" in n for n in w.scaled.timing.notes)


def test_every_report_carries_resource_speedups():
    r = narrowpipe.analyze(load_example("llama-3-8b"), "h100", seq=2048)
    assert r.timing.narrowest == "compute"
    assert set(r.timing.speedup_if_doubled) >= {"compute", "memory", "overhead"}
    assert abs(sum(r.timing.bound_mix.values()) - 1) < 1e-9
    assert abs(sum(row.time_s or 0 for row in r.ops) - r.time_s) < 1e-9 * r.time_s


def test_interconnect_doubling_covers_links_given_only_as_a_latency():
    """SambaNova's catalog gives its chip-to-chip links a latency and no bandwidth, so its BERT run
    is interconnect-bound on latency: "if doubled" left interconnect out and named memory the
    narrowest pipe (1.07x) while halving the link latency runs 1.5x faster."""
    r = narrowpipe.analyze(load_example("bert-base"), "sambanova-sn40l", seq=128)
    halved = narrowpipe.whatif(load_example("bert-base"), "sambanova-sn40l", {"link_latency": 0.5}, seq=128)
    assert r.timing.bound_mix.get("interconnect", 0) > 0.5
    assert r.timing.speedup_if_doubled["interconnect"] == pytest.approx(halved.speedup, rel=1e-9)
    assert r.timing.narrowest == "interconnect"


def test_whatif_prints_the_models_notes(capsys, monkeypatch):
    """The dim-range note analyze prints (seq=1 below the exported range) was missing from whatif."""
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["whatif", "llama-3-8b", "--target", "h100", "--set", "seq=1", "--scale", "memory_bandwidth=2"]) == 0
    assert "seq=1 is outside the range the graph was exported for" in " ".join(capsys.readouterr().out.split())


def test_a_system_where_one_chip_is_timed_is_refused_with_its_chip(capsys, tmp_path):
    """A system (by name or file) given to analyze said "missing required field 'family'"; serve and
    plan take it (by name too)."""
    import shutil

    from narrowpipe.backends.registry import SYSTEMS_DIR
    path = tmp_path / "dgx-h100.toml"
    shutil.copy(SYSTEMS_DIR / "dgx-h100.toml", path)
    for spec in ("dgx-h100", str(path)):
        assert main(["analyze", "gpt2", "--target", spec]) == 2
        err = capsys.readouterr().err
        assert "is a system (8 x h100-sxm), not a chip" in err and "'h100-sxm'" in err
    assert main(["serve", "llama-3-8b", "--target", "dgx-h100", "--mode", "decode", "--batch", "8",
                 "--context", "1024"]) == 0
    assert "on h100-sxm" in capsys.readouterr().out


def test_targets_listing_and_show(capsys):
    assert main(["targets"]) == 0
    assert "groq-lpu" in capsys.readouterr().out
    assert main(["targets", "--show", "h100"]) == 0
    out = capsys.readouterr().out
    assert "NV-H100" in out


def test_targets_show_spells_fields_as_the_file_and_resolves_sources(capsys):
    assert main(["targets", "--show", "h100"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "1830" in lines["clock_mhz"] and "MLE-ACC" in lines["clock_mhz"]   # value and source
    assert "50" in lines["l2_mb"] and "clock_hz" not in lines
    legend = out[out.index("sources:"):]
    assert "NV-H100:" in legend and "nvidia.com/en-us/data-center/h100" in legend
    assert [n for n, f in narrowpipe.targets() if f == "dataflow"]


def test_targets_listing_marks_a_price_on_another_basis(capsys):
    assert main(["targets"]) == 0
    rows = {line.split()[0]: line.split()[-1] for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert rows["h100-sxm"] == "6.88" and rows["h100-pcie"] == "3.29*" and rows["groq-lpu"] == "-"


def test_the_highlighted_fastest_row_is_the_verdicts_fastest(tmp_path):
    """Groq's 10 chips finish gpt2 batch 8 first, per chip the H100 is faster: the verdict calls
    Groq fastest (system time) and the H100 most per chip, and the table and the HTML page highlight
    the verdict's fastest, never another pick beside it."""
    from narrowpipe.costmodel.verdict import fastest_target, verdict
    out = tmp_path / "c.html"
    assert main(["compare", "gpt2", "--targets", "h100,groq-lpu", "--set", "batch=8", "--html", str(out)]) == 0
    c = narrowpipe.compare(load_example("gpt2"), ["h100", "groq-lpu"], batch=8)
    pick = verdict(c.reports)
    assert min(c.reports, key=lambda r: r.time_s).target == "groq-lpu"          # the time alone says Groq
    assert pick.per_chip and fastest_target(c.reports) == pick.fastest.target == "groq-lpu"
    assert pick.most_per_chip.target == "h100-sxm"
    assert '<tr data-target="groq-lpu" class="fastest">' in out.read_text()


def test_two_targets_of_one_name_are_refused(tmp_path, capsys):
    """Two calibrations both named 'host' printed as two 'host' columns, priced and ranked by name."""
    base = get_target("h100")
    a = dump_target(dataclasses.replace(base, name="host", aliases=()), tmp_path / "a.toml")
    b = dump_target(dataclasses.replace(base.scaled(memory_bandwidth=2), name="host", aliases=()), tmp_path / "b.toml")
    assert main(["compare", "gpt2", "--targets", f"{a},{b}", "--set", "seq=1"]) != 0
    err = " ".join(capsys.readouterr().err.split())
    assert "two targets are named 'host'" in err and "a.toml" in err and "b.toml" in err
    assert main(["compare", "gpt2", "--targets", "h100,h100-sxm", "--set", "seq=1"]) != 0


def test_two_target_files_of_one_name_are_named_by_their_files(tmp_path, capsys):
    """Given with --target-file they were 'a Target object and a Target object'."""
    base = get_target("h100")
    a = dump_target(dataclasses.replace(base, name="host", aliases=()), tmp_path / "a.toml")
    b = dump_target(dataclasses.replace(base.scaled(memory_bandwidth=2), name="host", aliases=()), tmp_path / "b.toml")
    assert main(["compare", "gpt2", "--targets", "h100", "--target-file", str(a), "--target-file", str(b),
                 "--set", "seq=1"]) != 0
    err = " ".join(capsys.readouterr().err.split())
    assert "two targets are named 'host'" in err and "a.toml" in err and "b.toml" in err


def test_targets_show_prints_a_system_file_as_written(capsys):
    """A system (or its alias) shows its file's fields in the file's units, each with its source
    (a source key names the field without its unit suffix); it was 'unknown target'."""
    assert main(["targets", "--show", "hgx-h100"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "450" in lines["scale_up.bandwidth_gbps"] and "derived:" in lines["scale_up.bandwidth_gbps"]
    assert "h100-sxm" in lines["chip"] and "8" in lines["devices"]
    assert "MLE-NET:" in out[out.index("sources:"):]
