"""The heaviest kernels of a timed run, repeated layers counted together, and both comparison layouts."""

from __future__ import annotations

import re

import pytest

import narrowpipe
from narrowpipe.cli import main
from narrowpipe.models.examples import load_example


def _anchor_rows(report, pattern: str):
    rx = re.compile(pattern)
    return [r for r in report.ops if r.time_s and rx.fullmatch(r.scope) and r.kernel == r.name]


def test_repeated_layers_are_one_hotspot_with_their_summed_time():
    r = narrowpipe.analyze(load_example("llama-3-8b"), "h100")
    t = r.timing
    labels = [b.scope for b in t.top]
    assert "model.layers.*.mlp.down_proj" in labels
    down = next(b for b in t.top if b.scope == "model.layers.*.mlp.down_proj")
    rows = _anchor_rows(r, r"model\.layers\.\d+\.mlp\.down_proj")    # per-op times, added here by hand
    assert down.count == len(rows) == 32
    assert down.time_s == pytest.approx(sum(row.time_s for row in rows))
    assert down.share == pytest.approx(down.time_s / r.time_s)
    assert down.label == "model.layers.*.mlp.down_proj x32" and down.bound == "compute"
    assert t.top == sorted(t.top, key=lambda b: -b.time_s)


def test_last_layer_with_a_fused_residual_epilogue_still_counts_with_its_layer():
    """At decode the last down_proj also absorbs the final residual add (3 ns more of 42 us)."""
    r = narrowpipe.analyze(load_example("llama-3-8b"), "h100", seq=1)
    down = next(b for b in r.timing.top if b.scope == "model.layers.*.mlp.down_proj")
    rows = _anchor_rows(r, r"model\.layers\.\d+\.mlp\.down_proj")
    assert down.count == 32 and down.time_s == pytest.approx(sum(row.time_s for row in rows))


def test_identical_layers_group_whole_on_a_dataflow_pipeline():
    """On groq-lpu a chip-to-chip hop follows some layers and not others; grouping by predicted time
    split llama's down_proj into x22 and x10. Same kernel, same scope pattern: one group of 32."""
    r = narrowpipe.analyze(load_example("llama-3-8b"), "groq-lpu")
    for proj in ("gate_proj", "up_proj", "down_proj"):
        scope = f"model.layers.*.mlp.{proj}"
        groups = [b for b in r.timing.top if b.scope == scope]
        assert [b.count for b in groups] == [32], (proj, [b.label for b in r.timing.top])
        rows = _anchor_rows(r, re.escape(scope).replace(r"\*", r"\d+"))
        assert groups[0].time_s == pytest.approx(sum(row.time_s for row in rows))


def test_unrepeated_kernel_keeps_its_own_name():
    r = narrowpipe.analyze(load_example("gpt2"), "h100")
    head = next(b for b in r.timing.top if b.scope == "lm_head")
    assert head.count == 1 and head.label == "lm_head"


def test_kernels_of_different_shapes_are_not_merged():
    """ResNet's 1x1 and 3x3 convolutions share a module path up to indices but not their shapes."""
    r = narrowpipe.analyze(load_example("resnet50"), "h100")
    merged_apart = False
    for b in r.timing.top:
        same_path = _anchor_rows(r, re.escape(b.scope).replace(r"\*", r"\d+"))
        each = b.time_s / b.count
        members = [row for row in same_path if row.time_s == pytest.approx(each, rel=5e-3)]
        assert len(members) >= b.count   # a stride-2 first block can cost the same and still stay apart
        merged_apart |= b.count < len(same_path)
    assert merged_apart     # some kernel on the same path pattern has other shapes and stayed apart


@pytest.mark.parametrize("columns,wide", [(250, True), (80, False)])
def test_compare_layout_follows_the_terminal_width(columns, wide, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["compare", "llama-3-8b", "--targets", "h100,tpu-v6e,groq-lpu"]) == 0
    text = capsys.readouterr().out
    assert max(len(line) for line in text.splitlines()) <= columns
    assert ("┃ target" in text) is wide                       # the one-row-per-target table
    assert "model.layers.*.mlp" in text and "x32" in text       # hotspot labels are never folded
    for name in ("h100-sxm", "tpu-v6e", "groq-lpu"):
        assert name in text
