"""masked_fill against the torch.where that computes the same thing, through the torch frontend:
both backwards are one select over x, so FLOPs and bytes must agree, and nothing is unmodeled."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import narrowpipe  # noqa: E402
from narrowpipe.costmodel.training import build_training_graph  # noqa: E402


class _MaskedFill(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x, mask):
        return self.lin(x).masked_fill(mask, -1e4).softmax(-1)


class _Where(_MaskedFill):
    def forward(self, x, mask):
        return torch.where(mask, torch.tensor(-1e4), self.lin(x)).softmax(-1)


def _select_rows(model):
    x, mask = torch.randn(4, 16), torch.rand(4, 16) > 0.5
    step = build_training_graph(narrowpipe.from_torch(model, (x, mask)), loss="sum")
    report = narrowpipe.analyze(step)
    assert report.unmodeled == [] and step.meta["training"]["no_backward_rule"] == []
    return [(r.flops, r.bytes) for r in report.ops if r.phase == "backward" and r.op == "where"]


def test_masked_fill_backward_equals_the_torch_where_model():
    """Hand count for 4x16 fp32: 64 selects; reads mask 64 B + dy 256 B, writes dx 256 B."""
    torch.manual_seed(0)
    assert _select_rows(_MaskedFill()) == _select_rows(_Where()) == [(64, 64 + 256 + 256)]
