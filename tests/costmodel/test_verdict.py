"""The verdict line: picks follow the reports' own numbers, per chip when chip counts differ, and
targets where the program does not fit are never picked."""

from __future__ import annotations

import dataclasses

from rich.console import Console

from narrowpipe.costmodel.compare import compare
from narrowpipe.costmodel.verdict import verdict
from narrowpipe.models.examples import load_example
from narrowpipe.render.comparison import print_comparison


def test_fastest_cheapest_and_most_per_joule_are_the_extremes_of_the_reports():
    c = compare(load_example("gpt2"), ["h100", "mi300x", "a100"], dims={"batch": 4, "seq": 256})
    v = verdict(c.reports)
    timings = [r.timing for r in c.reports]
    assert not v.per_chip
    assert v.fastest.target == min(timings, key=lambda t: t.time_s).target
    assert v.cheapest.target == min(timings, key=lambda t: t.cost_per_million_items).target
    assert v.most_per_joule.target == max(timings, key=lambda t: t.items_per_joule).target
    assert v.fastest.narrowest == next(t for t in timings if t.target == v.fastest.target).narrowest


def test_targets_on_several_chips_are_compared_per_chip():
    c = compare(load_example("llama-3-8b"), ["h100", "groq-lpu"], dims={"batch": 1, "seq": 128})
    v = verdict(c.reports)
    groq = c["groq-lpu"].timing
    assert groq.devices > 1 and v.per_chip
    best = max((r.timing for r in c.reports), key=lambda t: t.throughput / t.devices)
    assert v.fastest.target == best.target and v.fastest.unit == "tokens/s per chip"


def test_a_target_that_does_not_fit_is_never_picked():
    c = compare(load_example("gpt2"), ["h100", "a100"], dims={"batch": 1, "seq": 64})
    h100 = c["h100"]
    small = dataclasses.replace(h100, timing=dataclasses.replace(h100.timing, fits=False, time_s=1e-9))
    v = verdict([small, c["a100"]])
    assert v.fastest.target == "a100-sxm-80gb" and v.excluded == ("h100-sxm",)


def test_compare_prints_the_verdict_line():
    console = Console(record=True, width=200)
    print_comparison(compare(load_example("gpt2"), ["h100", "tpu-v5e"], dims={"batch": 1, "seq": 64}), console)
    text = console.export_text()
    assert "verdict: fastest " in text and "-bound)" in text
