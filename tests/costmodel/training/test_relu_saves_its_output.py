"""ReLU's backward reads its output (derivatives.yaml: ``threshold_backward(grad, result, 0)``), so a
training step saves what torch saves: checked against torch's own saved tensors
(``torch.autograd.graph.saved_tensors_hooks``), parameters left out."""

from __future__ import annotations

import pytest
import torch

import narrowpipe
from narrowpipe.costmodel.training.memory import training_memory


class Mlp(torch.nn.Module):
    def __init__(self, inplace: bool) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(64, 128), torch.nn.Linear(128, 64)
        self.relu = torch.nn.ReLU(inplace=inplace)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.relu(self.a(x)))


def _torch_saved_activation_bytes(model: torch.nn.Module, x: torch.Tensor) -> int:
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x).sum()
    return sum(saved.values())


@pytest.mark.parametrize("inplace", [False, True])
def test_saved_activations_equal_torchs(inplace: bool) -> None:
    torch.manual_seed(0)
    model, x = Mlp(inplace), torch.randn(32, 64)
    expected = _torch_saved_activation_bytes(model, x)
    assert expected == 32 * 64 * 4 + 32 * 128 * 4          # the input and ReLU's output, by hand
    assert training_memory(narrowpipe.from_torch(model, (x,))).activations == expected
