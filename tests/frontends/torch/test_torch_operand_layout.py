"""The torch frontend states a contraction's operand storage (``operand_major``) from the strides the
export recorded: eager torch hands a row-major or transposed-contiguous operand to the BLAS call as
it is (a ``t()`` view is read in place), so its unit-stride dim is what the kernel streams; an
operand with no such dim is copied first, and its layout is left unstated. Predictions on chips
whose layout terms are the defaults do not move."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

import narrowpipe  # noqa: E402
from narrowpipe.backends import get_target  # noqa: E402
from narrowpipe.ir import OPERAND_MAJOR, Graph, Op  # noqa: E402


class _Layouts(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(16, 8)
        self.w = torch.nn.Parameter(torch.randn(8, 4))       # [K, N]
        self.v = torch.nn.Parameter(torch.randn(8, 16))      # [N, K]

    def forward(self, x, y):
        h = self.lin(x)                              # linear: x [M, K], weight [N, K]
        a = h @ self.w                               # row-major [K, N]: N-major
        b = x @ self.v.t()                           # a t() view of [N, K]: K-major
        c = torch.bmm(y.transpose(1, 2), y)          # lhs [B, M, K] with M unit-stride
        return a, b, c


def _dots(graph: Graph) -> list:
    return [n for n in graph.nodes if n.op is Op.DOT]


def test_each_contraction_states_its_operands_unit_stride_dim():
    g = narrowpipe.from_torch(_Layouts(), (torch.randn(2, 16), torch.randn(3, 5, 6)))
    majors = [n.attrs.get(OPERAND_MAJOR) for n in _dots(g)]
    assert majors == [("k", "k"), ("k", "mn"), ("k", "k"), ("mn", "mn")]


def test_an_operand_whose_unit_stride_dim_is_a_batch_dim_states_no_layout():
    class Batch(torch.nn.Module):
        def forward(self, y):
            z = y.permute(2, 0, 1)                   # [6, 3, 5]: the batch dim is the unit-stride one
            return torch.bmm(z, z.transpose(1, 2))
    (dot,) = _dots(narrowpipe.from_torch(Batch(), (torch.randn(3, 5, 6),)))
    assert OPERAND_MAJOR not in dot.attrs


def test_a_traced_graph_module_states_the_layout_its_propagated_strides_give():
    gm = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.Linear(16, 8)))
    (dot,) = _dots(narrowpipe.from_torch(gm, (torch.randn(2, 16),)))
    assert dot.attrs[OPERAND_MAJOR] == ("k", "k")


def test_symbolic_batch_keeps_the_layout():
    lin = torch.nn.Linear(16, 8)
    batch = torch.export.Dim("batch", min=2)
    ep = torch.export.export(lin, (torch.randn(4, 16),), dynamic_shapes=({0: batch},))
    (dot,) = _dots(narrowpipe.from_torch(ep))
    assert dot.attrs[OPERAND_MAJOR] == ("k", "k")


def _stripped(graph: Graph) -> Graph:
    out = graph.clone()
    for n in _dots(out):
        n.attrs.pop(OPERAND_MAJOR)
    return out


def _time(graph: Graph, target) -> float:
    return narrowpipe.analyze(graph, target).time_s


@pytest.mark.parametrize("chip", ["h100", "a100", "v100-sxm2", "p100-pcie", "mi300x"])
def test_chips_with_default_layout_terms_predict_exactly_as_without_the_layout(chip):
    mlp = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024))
    graph = narrowpipe.from_torch(mlp, (torch.randn(4, 1024),))
    assert {n.attrs[OPERAND_MAJOR] for n in _dots(graph)} == {("k", "k")}
    assert _time(graph, chip) == _time(_stripped(graph), chip)


def test_t4_streams_a_decode_linears_k_major_weight_slower_in_fp32():
    """T4's SGEMM term: a 4-row fp32 linear is a weight stream, K-major as torch stores it."""
    mlp = torch.nn.Sequential(torch.nn.Linear(1024, 4096))
    graph = narrowpipe.from_torch(mlp, (torch.randn(4, 1024),))
    t4 = get_target("t4")
    plain = dataclasses.replace(t4, gemm_k_major_read_efficiency_fp32=None,
                                sources={k: v for k, v in t4.sources.items()
                                         if k != "gemm_k_major_read_efficiency_fp32"})
    assert _time(graph, t4) > _time(graph, plain)
    assert _time(_stripped(graph), t4) == _time(graph, plain)
