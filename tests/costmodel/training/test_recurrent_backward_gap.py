"""A recurrent layer's training step says what it leaves out: the IR runs the steps at once, so the
gradient from each step into the previous hidden state (backpropagation through time) is not built.

The note must be true to the number: the step's matmul FLOPs fall short of ``FlopCounterMode`` over
``loss.backward()`` by exactly that per-step matmul, ``2 x batch x (gates x hidden) x hidden`` for
every step after the first, per direction; and a model with no recurrence gets no such note. (GRU and
RNN: FlopCounterMode counts 0 for the CPU LSTM's fused kernel.)
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.costmodel.training import build_training_graph  # noqa: E402

STEPS, BATCH, INPUT, HIDDEN = 5, 2, 8, 16


def _torch_training_flops(m: torch.nn.Module, x: torch.Tensor) -> int:
    with FlopCounterMode(display=False) as counter:
        m(x)[0].sum().backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("kind, gates", [("GRU", 3), ("RNN", 1)])
def test_the_note_names_exactly_the_matmuls_the_step_leaves_out(kind, gates):
    torch.manual_seed(0)
    m = getattr(torch.nn, kind)(INPUT, HIDDEN, bidirectional=True)
    x = torch.randn(STEPS, BATCH, INPUT)
    reference = _torch_training_flops(m, x)
    train = build_training_graph(narrowpipe.from_torch(m.eval(), (x,), {}), loss="sum")
    report = narrowpipe.analyze(train)
    left_out = 2 * (STEPS - 1) * 2 * BATCH * gates * HIDDEN * HIDDEN   # directions x steps after the first
    assert report.flops_by_group["contraction"] == reference - left_out
    assert any("backward through time not modeled" in n and "aten." in n for n in report.notes)


def test_a_model_without_recurrence_gets_no_such_note():
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    train = build_training_graph(narrowpipe.from_torch(m.eval(), (torch.randn(2, 8),), {}), loss="sum")
    assert not any("backward through time" in n for n in narrowpipe.analyze(train).notes)
