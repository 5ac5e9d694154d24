"""Which dim of each GEMM operand eager torch hands the BLAS call unit-stride (a DOT's ``operand_major``).

``mm``, ``addmm``, ``bmm`` and ``baddbmm`` pass their operands as they are stored (a ``t()`` view is
read in place). ``torch.matmul`` (and ``linear``, which is ``matmul(x, w.t())`` where it does not
take the ``addmm`` path) reshapes them first: a >= 3-D operand times a matrix is folded to one
matrix (``reshape(-1, K)``) when the matrix needs a gradient or the fold is a view (the small
operand's transpose times the large one's when the small one is the lhs); otherwise the batch dims
of both are broadcast and merged into one (``expand(...).reshape(P, rows, cols)``). A reshape that
cannot be a view copies the operand to a contiguous tensor, so the kernel streams the copy's
layout, not the view's (ATen's ``LinearAlgebra.cpp``: ``_matmul_impl``, ``should_fold``). Eager
attention's ``q @ k.transpose(-1, -2)`` on heads split by ``view(b, s, h, d).transpose(1, 2)`` is
that case: ``k``'s batch dims do not merge, the copy is row-major ``[b * h, d, s]``, N-major.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .aten_args import tensor_meta

__all__ = ["stored_major", "matmul_majors"]

#: An operand as eager torch views it before the BLAS call: per dim, in that order, its role in the
#: GEMM (``"k"`` contracted, ``"mn"`` free, ``"b"`` batch), size and stride.
_View = list[tuple[str, Any, Any]]


def _known(x: Any) -> bool | None:
    """A (possibly symbolic) condition when the export's shape facts decide it, else ``None``."""
    if isinstance(x, bool):
        return x
    try:
        if statically_known_true(x):
            return True
        if statically_known_true(torch.sym_not(x)):
            return False
    except Exception:     # a condition the shape environment cannot evaluate: undecided
        return None
    return None


def _major(view: _View | None) -> str | None:
    """``"k"`` or ``"mn"``: the role of the one unit-stride dim longer than 1; ``None`` when there is
    no such dim, several, or a batch dim (the BLAS call copies such an operand first, so its
    storage is not what the kernel reads)."""
    if view is None:
        return None
    unit = [role for role, size, stride in view if _known(stride == 1) and not _known(size == 1)]
    return unit[0] if len(unit) == 1 and unit[0] != "b" else None


def _merges(view: _View, lo: int, hi: int) -> bool | None:
    """Whether dims ``lo..hi`` of ``view`` merge into one as a view (no copy); ``None``: undecided."""
    kept = [(size, stride) for _, size, stride in view[lo:hi + 1] if not _known(size == 1)]
    verdicts = [_known(a[1] == b[1] * b[0]) for a, b in zip(kept, kept[1:])]
    return None if any(v is None for v in verdicts) else all(verdicts)


def _reshaped(view: _View | None, lo: int, hi: int, role: str) -> str | None:
    """The major after eager merges dims ``lo..hi`` of ``view`` into one of ``role``: the view's own
    where the merge is a view, else the contiguous copy's (its last dim unit-stride)."""
    if view is None:
        return None
    ok = True if hi <= lo else _merges(view, lo, hi)
    if ok is None:
        return None
    if not ok:
        return view[-1][0]
    return _major([(role if lo <= i <= hi else r, size, stride) for i, (r, size, stride) in enumerate(view)])


def _view(t: torch.Tensor | None, roles: list[str]) -> _View | None:
    return None if t is None else list(zip(roles, t.shape, t.stride()))


def _roles(rank: int, lhs: bool) -> list[str]:
    """Roles of a matmul operand's dims: batch dims, then ``[M, K]`` (lhs) or ``[K, N]`` (rhs)."""
    return ["b"] * (rank - 2) + (["mn", "k"] if lhs else ["k", "mn"])


def stored_major(x: Any, roles: list[str]) -> str | None:
    """The major of fx argument ``x``, read in place, its dims in ``roles`` (mm, bmm, addmm, ...)."""
    return _major(_view(tensor_meta(x), roles))


def _expanded(view: _View, sizes: list[Any]) -> _View:
    """``view``'s batch dims broadcast to ``sizes`` (missing and size-1 dims: stride 0)."""
    own = len(view) - 2
    pad: _View = [("b", s, 0) for s in sizes[:len(sizes) - own]]
    kept = [("b", s, stride if not _known(size == 1) else 0)
            for s, (_, size, stride) in zip(sizes[len(sizes) - own:], view[:own])]
    return pad + kept + view[own:]


def matmul_majors(n: fx.Node, linear: bool = False) -> tuple[str | None, str | None]:
    """The majors of ``torch.matmul(a, b)``'s operands (``n.args[:2]``) as its BLAS call reads them;
    ``linear``: ``b`` is a ``linear`` weight ``[N, K]``, multiplied as ``w.t()``."""
    ta, tb, out = tensor_meta(n.args[0]), tensor_meta(n.args[1]), tensor_meta(n)
    if ta is None or tb is None or out is None:
        return None, None
    ra, rb = ta.dim(), tb.dim()
    if ra < 2 or rb < 2:
        return (_major(_view(ta, ["mn", "k"][2 - ra:])),
                _major(_view(tb, (["mn", "k"] if linear else ["k", "mn"])[2 - rb:])))
    va = _view(ta, _roles(ra, True))
    vb = _view(tb, _roles(rb, False)) if not linear else \
        [("k", tb.shape[1], tb.stride()[1]), ("mn", tb.shape[0], tb.stride()[0])]
    assert va is not None and vb is not None
    if ra == 2 and rb == 2:
        return _major(va), _major(vb)
    if rb == 2 and (tb.requires_grad or _merges(va, 0, ra - 2)):
        # folded: a.reshape(-1, K) @ b, a's leading dims become M
        return _reshaped(va, 0, ra - 2, "mn"), _major(vb)
    if ra == 2 and ta.requires_grad:
        # folded the other way: (b.mT.reshape(-1, K) @ a.mT).mT, b's batch dims and N become rows
        return _major(va), _reshaped(vb[:-2] + [vb[-1], vb[-2]], 0, rb - 2, "mn")
    # the batch dims broadcast (expand) and merged into one: [P, rows, cols] per operand
    sizes = list(out.shape[:-2])
    last = len(sizes) - 1
    return _reshaped(_expanded(va, sizes), 0, last, "b"), _reshaped(_expanded(vb, sizes), 0, last, "b")
