"""torch's ``transpose``/``permute`` are views: eager PyTorch launches no kernel for them.

The frontend marks them ``STRIDED_VIEW`` and fusion joins each to its one consumer in every mode, so
the consumer reads the input through swapped strides and only a ``contiguous()`` copies. QA measured
``x.transpose(1, 2) + 1`` on [8, 1024, 1024] fp32 in eager torch: one kernel (11.6 ms on its host),
the transpose alone 1.5 us; it was predicted as a 134 MB copy plus the add (25.6 ms).
"""

from __future__ import annotations

import torch

import narrowpipe
from narrowpipe.costmodel.execution import TimingOptions
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.timing import fused_program
from narrowpipe.ir import STRIDED_VIEW, Op

SHAPE = (8, 64, 32)
BYTES = 8 * 64 * 32 * 4


class AddOne(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2) + 1


class Contiguous(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2).contiguous() * 2


def _kernels(module: torch.nn.Module, target: str = "xeon-6980p"):
    graph = narrowpipe.from_torch(module, (torch.zeros(SHAPE),))
    program = fused_program(interpret(graph, {}), narrowpipe.get_target(target), TimingOptions())
    return graph, [k for k in program.kernels if not k.is_free]


def test_a_transpose_is_marked_a_strided_view() -> None:
    graph, _ = _kernels(AddOne())
    (perm,) = [n for n in graph.nodes if n.op is Op.PERMUTE]
    assert perm.attrs.get(STRIDED_VIEW) is True


def test_an_eager_transpose_is_read_by_its_consumer_no_copy() -> None:
    _, kernels = _kernels(AddOne())                     # a CPU target: eager, one kernel per op
    assert len(kernels) == 1 and kernels[0].kind == "elementwise"
    assert (kernels[0].cost.bytes_read, kernels[0].cost.bytes_written) == (BYTES, BYTES)


def test_contiguous_after_a_transpose_is_the_one_copy() -> None:
    _, kernels = _kernels(Contiguous())
    assert [k.kind for k in kernels] == ["copy", "elementwise"]
    assert sum(k.cost.bytes_read + k.cost.bytes_written for k in kernels) == 4 * BYTES
