"""Idle power: a chip's own where its file gives one, else the H200's measured share, said in the notes.

QA: the 11.5% idle share measured on an H200 (80 W of 700 W) was applied to the 23 kW CS-3 system,
and the 'most per joule' verdicts rested on it without a word.
"""

from __future__ import annotations

import dataclasses

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.backends.defaults import IDLE_POWER_FRACTION
from narrowpipe.costmodel.power import power_model
from narrowpipe.models.decoder import transformer


@pytest.fixture(scope="module")
def graph():
    return transformer(2, 256, 4, 1000, seq=64)


def test_a_given_idle_power_replaces_the_share(graph):
    """Every device idles through the run: energy moves by devices x time x the idle watts' change
    (this tiny model's kernels are mostly latency on the wafer, drawing idle power)."""
    wse = get_target("cerebras-wse3")
    assumed = narrowpipe.analyze(graph, wse).timing
    sources = {**wse.sources, "idle_power": "assumption: test"}
    given = narrowpipe.analyze(graph, dataclasses.replace(wse, idle_power=10_000.0, sources=sources)).timing
    assert power_model(wse).idle_w == pytest.approx(0.115 * 23_000)
    change = given.devices * given.time_s * (10_000.0 - IDLE_POWER_FRACTION * 23_000)
    # within 0.1%: the compute term's watts (TDP - idle - memory) shrink as idle grows, on busy kernels only
    assert given.energy_j - assumed.energy_j == pytest.approx(change, rel=1e-3)
    assert not any("idle power" in n for n in given.notes)


def test_the_assumed_share_is_said_for_dataflow_chips(graph):
    assert any("assumption: idle power 11.5% of TDP (2,645 W)" in n
               for n in narrowpipe.analyze(graph, "cerebras-wse3").timing.notes)
    assert any("idle power" in n for n in narrowpipe.analyze(graph, "groq-lpu").timing.notes)
    assert not any("idle power" in n for n in narrowpipe.analyze(graph, "h200").timing.notes)


def test_a_spec_file_gives_idle_power_in_watts(tmp_path):
    from narrowpipe.backends.loader import load_target_file
    from narrowpipe.backends.registry import CATALOG_DIR
    text = (CATALOG_DIR / "groq-lpu.toml").read_text().replace('name = "groq-lpu"', 'name = "my-lpu"')
    text = text.replace("tdp_w = 300\n", "tdp_w = 300\nidle_power_w = 90\n")
    text = text.replace("[sources]\n", '[sources]\nidle_power_w = "assumption: a test"\n')
    path = tmp_path / "my-lpu.toml"
    path.write_text(text)
    target = load_target_file(path)
    assert target.idle_power == 90 and power_model(target).idle_w == 90
