"""Unbatched convolutions (``[C, L]``, ``[C, H, W]``, ``[C, D, H, W]`` inputs, which torch accepts):
the frontend runs them as a batch of one (a free unsqueeze, the conv, the bias on the channel axis,
a free squeeze), as aten's own ``conv*d`` does. The conv rule read the channels as the batch
(270 FLOPs for 630 on ``Conv1d(3, 5, 3)`` over ``[3, 9]``) and the bias add on axis 1 failed to
broadcast. Reference: FlopCounterMode, and the hand count ``2 * Cout * Cin/g * k * out_positions``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.costmodel.training import build_training_graph  # noqa: E402

nn = torch.nn

CASES = {
    "conv1d": (lambda bias: nn.Conv1d(3, 5, 3, bias=bias), (3, 9), 2 * 5 * 3 * 3 * 7),                # 630
    "conv2d": (lambda bias: nn.Conv2d(3, 5, 3, bias=bias), (3, 9, 9), 2 * 5 * 3 * 9 * 49),            # 13,230
    "conv3d_grouped": (lambda bias: nn.Conv3d(4, 6, 2, groups=2, bias=bias), (4, 3, 5, 5),
                       2 * 6 * 2 * 8 * (2 * 4 * 4)),
    "conv_transpose2d": (lambda bias: nn.ConvTranspose2d(3, 5, 3, bias=bias), (3, 9, 9), 2 * 3 * 5 * 9 * 81),
    "conv_transpose1d_strided": (lambda bias: nn.ConvTranspose1d(4, 2, 4, stride=2, bias=bias), (4, 6),
                                 2 * 4 * 2 * 4 * 6),
}


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("name", list(CASES))
def test_an_unbatched_conv_counts_as_a_batch_of_one(name, bias):
    make, shape, hand = CASES[name]
    torch.manual_seed(0)
    module, x = make(bias).eval(), torch.randn(*shape)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        expected = module(x)
    graph = narrowpipe.from_torch(module, (x,))
    report = narrowpipe.analyze(graph, strict=True)
    assert report.flops_by_group["convolution"] == counter.get_total_flops() == hand
    assert report.flops_by_group["elementwise"] == (expected.numel() if bias else 0)   # the bias add
    assert tuple(graph.outputs[0].shape) == tuple(expected.shape)
    assert narrowpipe.ir.problems(graph) == []


def test_an_unbatched_conv_trains_like_torch():
    """Forward, input gradient (a second conv feeds it) and weight gradients: FlopCounterMode over
    ``backward()``."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(3, 5, 3), nn.ReLU(), nn.Conv1d(5, 4, 3))
    x = torch.randn(3, 12)
    graph = narrowpipe.from_torch(model, (x,))
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    report = narrowpipe.analyze(build_training_graph(graph), strict=True)
    assert report.modeled_flops == counter.get_total_flops()
