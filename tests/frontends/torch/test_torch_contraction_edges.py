"""Contractions the torch path left unmodeled: ``tensordot``, einsum over three or more operands (in
torch's contraction order), ``addbmm``, ``addr``, ``nn.Bilinear``, and ``F.unfold``'s ``im2col``.

References: FlopCounterMode where it counts what torch runs (tensordot's mm, einsum's bmm's, along the
``path`` opt_einsum hands torch when it has one); hand counts where the counter reads 0 (addbmm,
addr and bilinear run kernels it has no formula for) and for im2col's bytes.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.costmodel.training import build_training_graph  # noqa: E402


class _Fn(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _both(fn, *shapes):
    torch.manual_seed(0)
    args = tuple(torch.randn(*s) for s in shapes)
    module = _Fn(fn)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        expected = module(*args)
    graph = narrowpipe.from_torch(module, args)
    report = narrowpipe.analyze(graph, strict=True)
    assert tuple(graph.outputs[0].shape) == tuple(expected.shape)
    assert narrowpipe.ir.problems(graph) == []
    return report, counter.get_total_flops()


@pytest.mark.parametrize("fn, shapes, hand", [
    (lambda a, b: torch.tensordot(a, b, dims=([1, 2], [0, 1])), [(3, 4, 5), (4, 5, 6)], 2 * 3 * 6 * 20),     # 720
    (lambda a, b: torch.tensordot(a, b, dims=([-1], [0])), [(3, 4, 5), (5, 6)], 2 * 12 * 6 * 5),
    (lambda a, b, c: torch.einsum("ij,jk,kl->il", a, b, c), [(4, 5), (5, 6), (6, 7)], 2 * 4 * 5 * 6 + 2 * 4 * 6 * 7),
    # left to right, as torch: a @ b over j (batch b; i kept for c), then with c over i (batch b), then
    # d's k stays in the output: nothing summed, a broadcast multiply (elementwise, as torch's mul)
    (lambda a, b, c, d: torch.einsum("bij,bjk,bi,kl->bkl", a, b, c, d), [(2, 3, 4), (2, 4, 5), (2, 3), (5, 6)],
     2 * 2 * 3 * 5 * 4 + 2 * 2 * 5 * 3),
    # opt_einsum's path [(1, 2), (0, 1)], as torch.einsum passes it: b @ c first, then a @ (bc)
    (lambda a, b, c: torch.ops.aten.einsum.default("ij,jk,kl->il", [a, b, c], path=[1, 2, 0, 1]),
     [(4, 5), (5, 6), (6, 7)], 2 * 5 * 6 * 7 + 2 * 4 * 5 * 7),                                              # 700
])
def test_tensordot_and_multi_operand_einsum_count_the_matmuls_torch_runs(fn, shapes, hand):
    report, counted = _both(fn, *shapes)
    assert report.flops_by_group["contraction"] == counted == hand


def test_an_einsum_pair_that_sums_nothing_is_a_broadcast_multiply():
    """``bi,bj->bij`` is an outer product per b: torch multiplies (FlopCounterMode 0), one FLOP per
    output element; it was a dot with no contracted dim, 2 FLOPs per element as a contraction."""
    report, counted = _both(lambda a, b: torch.einsum("bi,bj->bij", a, b), (2, 4), (2, 5))
    assert counted == report.flops_by_group["contraction"] == 0
    assert report.flops_by_group["elementwise"] == 2 * 4 * 5
    report, _ = _both(lambda a, b, c, d: torch.einsum("bij,bjk,bi,kl->bkl", a, b, c, d),
                      (2, 3, 4), (2, 4, 5), (2, 3), (5, 6))
    assert report.flops_by_group["elementwise"] == 2 * 5 * 6


def test_addbmm_addr_and_bilinear_count_their_arithmetic_by_hand():
    """FlopCounterMode reads 0 for all three. addbmm: 2 B M N K multiply-adds, then the add; addr: the
    outer product and the add, one FLOP per output element each; Bilinear(5, 6, 7) on 3 rows:
    x1 W is 2 x 3 x 7 x 5 x 6, that times x2 2 x 3 x 7 x 6, then the bias add."""
    report, counted = _both(lambda c, a, b: torch.addbmm(c, a, b), (4, 6), (3, 4, 5), (3, 5, 6))
    assert counted == 0 and report.flops_by_group["contraction"] == 2 * 3 * 4 * 6 * 5
    assert report.flops_by_group["elementwise"] == 4 * 6
    report, counted = _both(lambda c, u, v: torch.addr(c, u, v), (4, 6), (4,), (6,))
    assert counted == 0 and report.flops_by_group["elementwise"] == 2 * 4 * 6
    torch.manual_seed(0)
    for shape1, shape2, rows in (((3, 5), (3, 6), 3), ((2, 3, 5), (2, 3, 6), 6)):
        bilinear, x1, x2 = torch.nn.Bilinear(5, 6, 7), torch.randn(*shape1), torch.randn(*shape2)
        graph = narrowpipe.from_torch(bilinear, (x1, x2))
        report = narrowpipe.analyze(graph, strict=True)
        assert report.flops_by_group["contraction"] == 2 * rows * 7 * 5 * 6 + 2 * rows * 7 * 6
        assert report.flops_by_group["elementwise"] == rows * 7
        assert tuple(graph.outputs[0].shape) == tuple(bilinear(x1, x2).shape)


def test_im2col_moves_the_image_into_columns_and_trains():
    """``F.unfold(x, 3)`` on fp32 [2, 3, 6, 6]: reads 2 x 3 x 36 x 4 = 864 B, writes the [2, 27, 16]
    columns, 3456 B, no FLOPs; the matmul after it is FlopCounterMode's; its gradient (col2im) sums
    the columns back onto the image when the image takes a gradient."""
    fn = lambda x, w: w @ torch.nn.functional.unfold(x, 3)   # noqa: E731
    report, counted = _both(fn, (2, 3, 6, 6), (4, 27))
    (row,) = [r for r in report.ops if r.source_op == "aten.im2col.default" and r.bytes]
    assert (row.flops, row.bytes_read, row.bytes_written) == (0, 864, 3456)
    assert report.flops_by_group["contraction"] == counted == 2 * 2 * 4 * 27 * 16

    class Unfolded(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pre = torch.nn.Conv2d(3, 3, 1, bias=False)
            self.w = torch.nn.Parameter(torch.randn(4, 27))

        def forward(self, x):
            return self.w @ torch.nn.functional.unfold(self.pre(x), 3)

    graph = narrowpipe.from_torch(Unfolded(), (torch.randn(2, 3, 6, 6),))
    step = narrowpipe.analyze(build_training_graph(graph), strict=True)
    assert step.unmodeled == []
    (col2im,) = [r for r in step.ops if r.source_op == "aten.im2col.default.backward" and r.op == "reduce_sum"]
    assert col2im.flops == 2 * 27 * 16 and col2im.bytes_written == 2 * 3 * 36 * 4
