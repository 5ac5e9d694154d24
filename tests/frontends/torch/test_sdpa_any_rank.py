"""``scaled_dot_product_attention`` on q/k/v that are not 4-D: torch takes ``(..., L, E)`` and reads
the dim before ``L`` as the heads. The frontend views them as ``[B, H, L, E]`` (free reshapes) for the
one ``ATTENTION`` layout the cost rule reads, and the output back; a 5-D query was costed on its
first four dims (2,304 FLOPs for 53,760) and a 3-D one failed with an IndexError.

References: FlopCounterMode (the CPU math path runs the bmm's it counts) and hand counts,
``2 * batch * L * S * (E + Ev)``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.costmodel.training import build_training_graph  # noqa: E402
from narrowpipe.ir import Op  # noqa: E402


class _Sdpa(torch.nn.Module):
    def forward(self, q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _counted(args):
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        _Sdpa()(*args)
    return counter.get_total_flops()


def _attention_flops(args):
    graph = narrowpipe.from_torch(_Sdpa(), args)
    report = narrowpipe.analyze(graph, strict=True)
    return report.flops_by_group["attention"], graph


@pytest.mark.parametrize("shapes, hand", [
    (((2, 3, 4, 5, 16), (2, 3, 4, 7, 16), (2, 3, 4, 7, 16)), 2 * 24 * 5 * 7 * (16 + 16)),   # 5-D: 53,760
    (((4, 5, 16), (4, 7, 16), (4, 7, 16)), 2 * 4 * 5 * 7 * (16 + 16)),                       # 3-D: 8,960
    (((5, 16), (7, 16), (7, 32)), 2 * 5 * 7 * (16 + 32)),                                    # 2-D, wider V
])
def test_sdpa_of_any_rank_counts_every_leading_dim(shapes, hand):
    args = tuple(torch.randn(*s) for s in shapes)
    flops, graph = _attention_flops(args)
    assert flops == hand == _counted(args)
    (att,) = [n for n in graph.nodes if n.op is Op.ATTENTION]
    assert narrowpipe.ir.problems(graph) == []
    assert all(v is not None and v.type.rank == 4 for v in att.inputs)
    assert tuple(graph.outputs[0].shape) == tuple(_Sdpa()(*args).shape)


@pytest.mark.parametrize("mask_shape", [(7,), (5, 7), (3, 1, 5, 7), (2, 3, 4, 5, 7)])
def test_a_mask_on_a_five_d_sdpa_is_viewed_with_the_query(mask_shape):
    q, k, v = torch.randn(2, 3, 4, 5, 16), torch.randn(2, 3, 4, 7, 16), torch.randn(2, 3, 4, 7, 16)
    mask = torch.randn(*mask_shape)
    flops, graph = _attention_flops((q, k, v, mask))
    assert flops == 2 * 24 * 5 * 7 * 32 == _counted((q, k, v, mask))
    (att,) = [n for n in graph.nodes if n.op is Op.ATTENTION]
    assert narrowpipe.ir.problems(graph) == []
    m = att.inputs[3]
    assert m is not None and (m.type.rank <= 2 or tuple(m.type.shape[:2]) in {(6, 4), (1, 1)})


def test_a_three_d_sdpa_trains():
    """The views' gradients are views; the attention backward is 2.5x the forward's (as for 4-D)."""
    class Proj(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(16, 48)

        def forward(self, x):                       # [4, 5, 16] -> q, k, v [4, 5, 16]
            q, k, v = self.lin(x).chunk(3, dim=-1)
            return F.scaled_dot_product_attention(q, k, v)

    graph = narrowpipe.from_torch(Proj(), (torch.randn(4, 5, 16),))
    report = narrowpipe.analyze(build_training_graph(graph), strict=True)
    forward = 2 * 4 * 5 * 5 * 32
    assert report.flops_by_group["attention"] == forward + 5 * forward // 2
