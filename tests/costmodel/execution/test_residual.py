"""Block-closing residual adds, found from the graph: where a tensor-parallel layout all-reduces."""

from __future__ import annotations

import pytest

from narrowpipe.costmodel.execution.residual import residual_adds
from narrowpipe.models import transformer
from narrowpipe.models.examples import load_example


@pytest.mark.parametrize("example,blocks", [("llama-3-8b", 32), ("gpt2", 12), ("bert-base", 12), ("vit-base", 12)])
def test_two_residual_adds_per_transformer_layer(example, blocks):
    # GPT-2's tanh GELU adds a contraction's output to a function of itself: not a residual
    assert len(residual_adds(load_example(example))) == 2 * blocks


def test_builder_graph_and_a_convnet():
    assert len(residual_adds(transformer(layers=3, hidden=64, heads=4, vocab=100))) == 6
    assert residual_adds(load_example("resnet50")) == []        # its residuals add convolutions


def test_all_reduce_with_a_link_bandwidth_takes_the_faster_algorithm():
    import dataclasses

    from narrowpipe.backends import get_target
    from narrowpipe.costmodel.execution.dataflow_tp import all_reduce_seconds
    base = get_target("sambanova-sn40l")
    sn = dataclasses.replace(base, chip_to_chip_bandwidth=100e9,
                             sources={**base.sources, "chip_to_chip_bandwidth": "assumption: test"})
    small, big = all_reduce_seconds(8192, 16, sn), all_reduce_seconds(64e6, 16, sn)
    assert small == pytest.approx(2e-6 + 15 * 8192 / 100e9)                     # one-shot: one latency
    assert big == pytest.approx(30 * (2e-6 + 64e6 / 16 / 100e9))                  # ring: 2(n-1) steps of S/n
    assert all_reduce_seconds(8192, 1, sn) == 0.0

