"""The torch frontend records how many nn.Module calls the exported forward made (what an eager run
pays ``nn.Module.__call__`` for): checked against a hand count and against forward pre-hooks
counting the calls of an eager run."""

from __future__ import annotations

import torch
from torch import nn

from narrowpipe.frontends.torch.frontend import MODULE_CALLS_META, from_torch


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.act, self.drop = nn.Linear(8, 8), nn.ReLU(), nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(self.act(self.fc(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])     # iterated, never called
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(self.head(x)[:, :2].repeat(1, 4))  # the head called twice


def _eager_calls(model: nn.Module, x: torch.Tensor) -> int:
    calls = [0]
    hooks = [m.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1)) for m in model.modules()]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return calls[0]


def test_module_calls_match_a_hand_count_and_the_eager_run():
    model, x = Net().eval(), torch.randn(3, 8)
    # Net 1 + per block (Block, fc, act, drop) 4 x 2 + head twice 2; the ModuleList is not called
    hand = 1 + 4 * 2 + 2
    assert _eager_calls(model, x) == hand
    assert from_torch(model, (x,)).meta[MODULE_CALLS_META] == hand


def test_a_function_without_modules_records_one_call():
    class Plain(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x * 2).relu()
    assert from_torch(Plain(), (torch.randn(4),)).meta[MODULE_CALLS_META] == 1


def test_a_module_that_reaches_no_aten_op_is_not_counted():
    """What the docstring says the count misses: ``nn.Identity`` returns its input (no node, no
    ``nn_module_stack`` entry), while an eval-mode dropout records ``aten.dropout`` and is counted."""
    model, x = nn.Sequential(nn.Linear(4, 4), nn.Identity(), nn.Dropout(0.1)).eval(), torch.randn(2, 4)
    assert _eager_calls(model, x) == 4                                  # Sequential, Linear, Identity, Dropout
    assert from_torch(model, (x,)).meta[MODULE_CALLS_META] == 3         # Identity left out


def test_an_unlifted_exported_module_keeps_its_module_calls():
    """``ep.module()`` (an ATen GraphModule) keeps the export's module stacks: the same count as the
    exported program; a make_fx trace has no stacks and records none (an eager prediction then pays
    no module calls)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from narrowpipe.frontends.torch.frontend import from_graph_module
    model, x = Net().eval(), torch.randn(3, 8)
    ep = torch.export.export(model, (x,))
    assert from_graph_module(ep.module(), (x,)).meta[MODULE_CALLS_META] == 1 + 4 * 2 + 2
    with torch.no_grad():
        traced = make_fx(model)(x)
    assert MODULE_CALLS_META not in from_graph_module(traced, (x,)).meta
