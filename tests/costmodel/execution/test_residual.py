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
