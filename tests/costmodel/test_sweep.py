"""Sweeps over a grid of dims: every point equals a plain ``compare`` at that binding, the CLI's
``--set batch=1,8`` parses as a list, and ``--json`` holds every point."""

from __future__ import annotations

import json

import pytest

from narrowpipe.cli import main, parse_grid, parse_sets
from narrowpipe.costmodel.compare import compare
from narrowpipe.costmodel.sweep import grid_points, sweep
from narrowpipe.errors import NarrowpipeError
from narrowpipe.models.examples import load_example


def test_grid_points_vary_the_first_dim_slowest():
    assert grid_points({"batch": [1, 8], "seq": [128, 512]}) == [
        {"batch": 1, "seq": 128}, {"batch": 1, "seq": 512}, {"batch": 8, "seq": 128}, {"batch": 8, "seq": 512}]
    with pytest.raises(NarrowpipeError, match="no values"):
        grid_points({"batch": []})


def test_every_sweep_point_equals_compare_at_that_binding():
    graph = load_example("gpt2")
    s = sweep(graph, ["h100", "tpu-v5e"], {"batch": [1, 4], "seq": [64]})
    assert [p.dims for p in s.points] == [{"batch": 1, "seq": 64}, {"batch": 4, "seq": 64}]
    for point in s.points:
        alone = compare(graph, ["h100", "tpu-v5e"], dims=point.dims)
        assert [r.time_s for r in point.reports] == [r.time_s for r in alone.reports]
        assert [r.flops for r in point.reports] == [r.flops for r in alone.reports]
    assert s.points[1].reports[0].flops > 3 * s.points[0].reports[0].flops


def test_set_values_without_a_name_continue_the_dim_before_them():
    assert parse_grid(["batch=1,8,64", "seq=512,2048"]) == {"batch": [1, 8, 64], "seq": [512, 2048]}
    assert parse_grid(["batch=8,seq=2048"]) == {"batch": [8], "seq": [2048]}
    assert parse_sets(["batch=8,seq=2048"]) == {"batch": 8, "seq": 2048}
    with pytest.raises(NarrowpipeError, match="several values"):
        parse_sets(["batch=1,8"])
    with pytest.raises(NarrowpipeError, match="DIM=VALUE"):
        parse_grid(["8"])
    with pytest.raises(NarrowpipeError, match="not an integer"):
        parse_grid(["batch=1,x"])
    assert parse_grid(["batch=1,8,"]) == {"batch": [1, 8]}               # a trailing comma ends the list


@pytest.mark.parametrize("items, reason", [(["batch=1,,8"], "empty item"), (["batch=1,8,1"], "lists 1 twice"),
                                           (["batch=1", "batch=8"], "given twice"), (["batch=1,seq=2,batch=4"],
                                                                                    "given twice")])
def test_set_refuses_what_a_sweep_would_have_to_guess(items, reason):
    """An empty item was dropped, a repeated value swept twice, a repeated dim kept its last list."""
    with pytest.raises(NarrowpipeError, match=reason):
        parse_grid(items)


def test_compare_with_value_lists_prints_one_row_per_point_and_target_and_writes_every_point(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    assert main(["compare", "gpt2", "--targets", "h100,groq-lpu", "--set", "batch=1,2", "--set", "seq=32",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    rows = [line for line in text.splitlines() if line.strip("│ ")[:1].isdigit()]   # the table's, boxed or compact
    assert "sweep over batch" in text and sum("h100-sxm" in r for r in rows) == 2 \
        and sum("groq-lpu" in r for r in rows) == 2
    assert "batch=1: verdict:" in text and "batch=2: verdict:" in text      # one verdict per point
    data = json.loads(out.read_text())
    assert data["format"] == "narrowpipe.sweep" and data["grid"] == {"batch": [1, 2], "seq": [32]}
    assert [p["dims"] for p in data["points"]] == [{"batch": 1, "seq": 32}, {"batch": 2, "seq": 32}]
    assert all(len(p["targets"]) == 2 for p in data["points"])


def test_a_sweep_stars_a_cost_whose_price_is_not_on_the_catalog_basis():
    from rich.console import Console

    from narrowpipe.render.sweep import print_sweep
    s = sweep(load_example("gpt2"), ["h100", "h100-pcie", "groq-lpu"], {"batch": [1, 2], "seq": [32]})
    console = Console(record=True, width=200)
    print_sweep(s, console)
    text = console.export_text()
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines()]
    cost = {r[1]: r[-1] for r in rows if len(r) > 3 and r[1] in ("h100-sxm", "h100-pcie", "groq-lpu")}
    assert cost["h100-pcie"].endswith("*") and not cost["h100-sxm"].endswith("*") and cost["groq-lpu"] == "-"
    assert "* price not a hyperscaler on-demand list rate" in text


def test_a_sweep_sets_apart_the_cost_of_a_point_that_does_not_fit(tmp_path, capsys, monkeypatch):
    """Llama-3-8B decode at context 4096 needs ~16.6 GB with serving's 10% reserve: more than a 16 GiB
    tpu-v5e holds, so its $/M (one chip's) is bracketed and its verdict line names it as not fitting;
    by hand the bracketed figure is that one chip's price x step time / batch."""
    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "sweep.json"
    assert main(["compare", "llama-3-8b", "--targets", "h100,tpu-v5e", "--set", "batch=1,8", "--mode", "decode",
                 "--context", "4096", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines()]
    v5e = [r for r in rows if len(r) > 3 and r[1] == "tpu-v5e"]
    points = json.loads(out.read_text())["points"]
    assert len(v5e) == len(points) == 2
    for point, row in zip(points, v5e):
        t = next(r["timing"] for r in point["targets"] if r["timing"]["target"] == "tpu-v5e")
        assert not t["fits"]
        by_hand = t["price_per_hour"] / 3600 * t["time_s"] / point["dims"]["batch"] * 1e6
        assert row[-1] == f"({by_hand:.3g})"
    assert "(cost) one device's" in text
    assert text.count("does not fit: tpu-v5e") == 2
