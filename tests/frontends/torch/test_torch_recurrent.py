"""``aten.gru`` / ``lstm`` / ``rnn_tanh`` / ``rnn_relu`` lowered to the IR the ONNX frontend gives the
same modules (input and recurrent projections as dots over all steps, the cell's elementwise steps):
they were unmodeled on the torch path while the ONNX path counted them.

References: FlopCounterMode where torch's CPU kernel runs addmm's it sees (GRU, RNN, an LSTM with
``proj_size``; a plain LSTM runs one mkldnn kernel the counter reads as 0), the ONNX path of the same
module, and the hand count per layer and direction ``2 T B G H (in + H)`` (+ ``2 T B H P`` for a
projection).
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import narrowpipe  # noqa: E402

nn = torch.nn


def _hand(t, b, gates, hidden, inputs, proj=0):
    """Per layer and direction: x @ W_ih^T, h @ W_hh^T (h is P wide with a projection), h @ W_hr^T."""
    h_in = proj or hidden
    return 2 * t * b * gates * hidden * inputs + 2 * t * b * gates * hidden * h_in + 2 * t * b * hidden * proj


CASES = {   # module, input, hand count, counted by FlopCounterMode
    "gru_bidirectional": (lambda: nn.GRU(8, 16, bidirectional=True), (5, 2, 8), 2 * _hand(5, 2, 3, 16, 8), True),
    "lstm_2_layers": (lambda: nn.LSTM(8, 16, num_layers=2), (5, 2, 8), _hand(5, 2, 4, 16, 8) + _hand(5, 2, 4, 16, 16),
                      False),
    "lstm_batch_first_bidirectional_proj": (
        lambda: nn.LSTM(8, 16, num_layers=2, batch_first=True, proj_size=4, bidirectional=True), (2, 5, 8),
        2 * _hand(5, 2, 4, 16, 8, proj=4) + 2 * _hand(5, 2, 4, 16, 8, proj=4), True),
    "rnn_relu_no_bias": (lambda: nn.RNN(8, 16, nonlinearity="relu", bias=False), (5, 2, 8), _hand(5, 2, 1, 16, 8),
                         True),
    "rnn_tanh_unbatched_2_layers": (lambda: nn.RNN(8, 16, num_layers=2), (5, 8),
                                    _hand(5, 1, 1, 16, 8) + _hand(5, 1, 1, 16, 16), True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_recurrent_module_counts_its_projections(name):
    make, shape, hand, counted = CASES[name]
    torch.manual_seed(0)
    module, x = make().eval(), torch.randn(*shape)
    with FlopCounterMode(display=False) as counter, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out, state = module(x)
    graph = narrowpipe.from_torch(module, (x,))
    report = narrowpipe.analyze(graph, strict=True)
    assert report.unmodeled == []
    assert report.flops_by_group["contraction"] == hand
    if counted:
        assert counter.get_total_flops() == hand
    states = state if isinstance(state, tuple) else (state,)
    assert [tuple(v.shape) for v in graph.outputs] == [tuple(t.shape) for t in (out, *states)]
    assert narrowpipe.ir.problems(graph) == []
    assert report.params == sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("name", ["gru_bidirectional", "lstm_2_layers", "rnn_relu_no_bias"])
def test_the_torch_and_onnx_paths_count_a_recurrent_module_alike(name, tmp_path):
    pytest.importorskip("onnx")
    make, shape, hand, _ = CASES[name]
    torch.manual_seed(0)
    module, x = make().eval(), torch.randn(*shape)
    path = tmp_path / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), str(path), dynamo=False)
    via_onnx = narrowpipe.analyze(narrowpipe.load(str(path)))
    via_torch = narrowpipe.analyze(narrowpipe.from_torch(module, (x,)))
    assert via_torch.flops_by_group["contraction"] == via_onnx.flops_by_group["contraction"] == hand
