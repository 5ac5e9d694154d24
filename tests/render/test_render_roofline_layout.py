"""The roofline's text stays readable: the footnote inside the figure, roof labels clear of each
other, bandwidth labels clear of the bottleneck callouts (QA's two cases: llama-3-8b at seq 512 on an
H100, and gpt2 at seq 128 on a calibrated 1-thread Xeon host whose fp32 matrix, fp16 matrix and
fp32 vector roofs are 181, 183 and 166 GFLOP/s: ``data/qa_host.toml``, written by ``calibrate``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import narrowpipe
from narrowpipe.models.examples import load_example
from narrowpipe.render.roofline import roofline_figure

QA_HOST = Path(__file__).resolve().parent / "data" / "qa_host.toml"
SAVE_DPI = 150   # plot_roofline's


def _boxes(fig, gid):
    from matplotlib.text import Annotation, Text
    renderer = fig.canvas.get_renderer()
    out = []
    for t in fig.axes[0].texts:
        if t.get_gid() == gid:
            if isinstance(t, Annotation):
                t.update_positions(renderer)
            out.append((t.get_text(), Text.get_window_extent(t, renderer)))
    return out


@pytest.fixture(scope="module")
def llama_h100():
    fig = roofline_figure(narrowpipe.analyze(load_example("llama-3-8b"), "h100", dims={"seq": 512}))
    fig.set_dpi(SAVE_DPI)
    return fig


@pytest.fixture(scope="module")
def gpt2_host():
    fig = roofline_figure(narrowpipe.analyze(load_example("gpt2"), str(QA_HOST), dims={"seq": 128}))
    fig.set_dpi(SAVE_DPI)
    return fig


@pytest.mark.parametrize("case", ["llama_h100", "gpt2_host"])
def test_the_footnote_is_inside_the_figure_and_whole(case, request):
    fig = request.getfixturevalue(case)
    (text, box), = _boxes(fig, "footnote")
    assert text.rstrip().endswith("of the busy time")         # the tail the SVG lost off the edge
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width and box.y0 >= 0
    axes = fig.axes[0].get_window_extent()
    assert box.y1 < axes.y0                                    # under the axes, over no point


def test_close_roofs_labels_do_not_overprint(gpt2_host):
    roofs = _boxes(gpt2_host, "roof-label")
    names = [t for t, _ in roofs]
    assert any(t.startswith("fp32 matrix 181") for t in names) and any("vector 166" in t for t in names)
    for i, (a, ba) in enumerate(roofs):
        for b, bb in roofs[i + 1:]:
            assert not ba.overlaps(bb), (a, b)


def test_bandwidth_labels_clear_of_the_bottleneck_callouts(llama_h100):
    slopes = _boxes(llama_h100, "slope-label")
    assert any(t.startswith("memory 3.35 TB/s") for t, _ in slopes)
    callouts = [b for _, b in _boxes(llama_h100, "bottleneck")]
    assert len(callouts) == 3
    for text, box in slopes:
        assert not any(box.overlaps(c) for c in callouts), text
