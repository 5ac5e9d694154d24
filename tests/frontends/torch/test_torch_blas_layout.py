"""The layout the torch frontend states for a matmul's operands (``operand_major``) is the one eager
torch hands the BLAS call, checked against the strides of the ``mm``/``bmm`` eager dispatches: a
reshape that cannot be a view (split heads' batch dims, a transposed input folded to a matrix)
copies the operand to a contiguous tensor, whose layout is not the export's view's."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.ir import OPERAND_MAJOR, Op  # noqa: E402

_aten = torch.ops.aten
_GEMMS = {_aten.mm.default: 0, _aten.bmm.default: 0, _aten.addmm.default: 1, _aten.baddbmm.default: 1}


def _role(t: torch.Tensor, lhs: bool) -> str | None:
    """A BLAS operand's unit-stride dim among its matrix dims: ``"k"`` contracted, ``"mn"`` free."""
    unit = [i for i in (-2, -1) if t.stride(i) == 1 and t.shape[i] > 1]
    if len(unit) != 1:
        return None
    return ("k" if unit[0] == -1 else "mn") if lhs else ("k" if unit[0] == -2 else "mn")


class _BlasCalls(TorchDispatchMode):
    """Records, per GEMM that eager runs, the roles of its two operands' unit-stride dims."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str | None, str | None]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in _GEMMS:
            a, b = args[_GEMMS[func]:_GEMMS[func] + 2]
            self.calls.append((_role(a, True), _role(b, False)))
        return func(*args, **(kwargs or {}))


def _eager(module: torch.nn.Module, args: tuple) -> list[tuple[str | None, str | None]]:
    with _BlasCalls() as mode:
        module(*args)
    return mode.calls


def _stated(module: torch.nn.Module, args: tuple) -> list:
    g = narrowpipe.from_torch(module, args)
    return [n.attrs.get(OPERAND_MAJOR) for n in g.nodes if n.op is Op.DOT]


class _SplitHeads(torch.nn.Module):
    """Eager attention's scores: heads split by view + transpose, keys transposed again."""

    def forward(self, q, k):
        b, s, _ = q.shape
        q = q.view(b, s, 3, 4).transpose(1, 2)
        k = k.view(b, s, 3, 4).transpose(1, 2)
        return q @ k.transpose(-1, -2)


class _TransposedInput(torch.nn.Module):
    """A linear layer on a transposed 3-D activation (its weight needs a gradient: eager folds)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.lin(x.transpose(1, 2))


class _TransposedInputBuffer(torch.nn.Module):
    """The same product with a buffer (no gradient): eager does not fold, the bmm reads the view."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("w", torch.randn(8, 4))

    def forward(self, x):
        return x.transpose(1, 2) @ self.w


class _MatrixTimesBatch(torch.nn.Module):
    """A parameter matrix times a batch of matrices: eager folds ``x.mT`` (a copy) against ``w.mT``."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6, 8))

    def forward(self, x):
        return self.w @ x


def _x() -> tuple:
    return (torch.randn(2, 8, 5),)


@pytest.mark.parametrize(("module", "args"), [
    (_SplitHeads(), (torch.randn(2, 5, 12), torch.randn(2, 5, 12))),
    (_TransposedInput(), _x()),
    (_TransposedInputBuffer(), _x()),
])
def test_a_matmul_states_the_layout_eagers_blas_call_reads(module, args):
    (eager,) = _eager(module, args)
    assert None not in eager
    assert _stated(module, args) == [eager]


def test_split_heads_keys_are_copied_n_major():
    assert _stated(_SplitHeads(), (torch.randn(2, 5, 12), torch.randn(2, 5, 12))) == [("k", "mn")]


def test_a_matrix_times_a_batch_states_the_folded_transposed_call():
    """Eager runs ``x.mT.reshape(-1, K) @ w.mT``: the GEMM's lhs is the DOT's rhs."""
    (eager,) = _eager(_MatrixTimesBatch(), _x())
    assert _stated(_MatrixTimesBatch(), _x()) == [eager[::-1]] == [("k", "k")]


def test_symbolic_batch_and_sequence_decide_the_same_copies():
    b, s = torch.export.Dim("b", min=2), torch.export.Dim("s", min=2)
    args = (torch.randn(2, 5, 12), torch.randn(2, 5, 12))
    ep = torch.export.export(_SplitHeads(), args, dynamic_shapes=({0: b, 1: s}, {0: b, 1: s}))
    g = narrowpipe.from_torch(ep)
    assert [n.attrs.get(OPERAND_MAJOR) for n in g.nodes if n.op is Op.DOT] == [("k", "mn")]
