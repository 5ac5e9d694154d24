"""Recorded arguments no real call could have: a damaged or hand-edited trace, said as an error.

The trace lowering (:func:`narrowpipe.frontends.trace.lower.lower_call`) returns None for arguments
that do not fit an op's schema, which the diagnosis then lists as unmodeled time. For most ops that
is right (an overload the lowering does not map), but a contraction whose contracted dims disagree
cannot have run: torch raises before any kernel starts. Counting it as unmodeled time called a
one-op trace of ``aten::mm`` with dims ``[[4, 4], [5, 4]]`` input/launch-bound; the trace reader
already refuses non-integer dims the same way (``op 'aten::mm' at ts 0 us: ...``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...frontends.trace.read import TensorArg

__all__ = ["contraction_mismatch"]

#: aten contraction -> (lhs input, rhs input, lhs contracted dim, rhs contracted dim), dims counted
#: from the end where negative: the operand positions of torch's schemas (``addmm(self, mat1,
#: mat2)``, ``baddbmm(self, batch1, batch2)``).
_CONTRACTIONS: dict[str, tuple[int, int, int, int]] = {
    "mm": (0, 1, -1, 0), "mv": (0, 1, -1, 0), "dot": (0, 1, -1, 0), "vdot": (0, 1, -1, 0),
    "addmm": (1, 2, -1, 0), "addmv": (1, 2, -1, 0), "bmm": (0, 1, 2, 1), "baddbmm": (1, 2, 2, 1),
}


def contraction_mismatch(name: str, inputs: Sequence[TensorArg | list[TensorArg] | None]) -> str | None:
    """Why a recorded contraction's operands cannot be multiplied (their contracted dims differ), or
    None where they can or the call is not one this checks. ``linear`` contracts the input's last
    dim with the weight's dim 1 (dim 0 for a 1-D weight); ``matmul`` the last with the second last
    (the only one for a 1-D right operand)."""
    base = name.split("::", 1)[-1].rstrip("_")
    if not name.startswith("aten::"):
        return None
    if base in _CONTRACTIONS:
        li, ri, ld, rd = _CONTRACTIONS[base]
    elif base == "linear":
        li, ri, ld = 0, 1, -1
        w = inputs[1] if len(inputs) > 1 else None
        rd = 1 if isinstance(w, TensorArg) and len(w.shape) == 2 else 0
    elif base == "matmul":
        li, ri, ld = 0, 1, -1
        b = inputs[1] if len(inputs) > 1 else None
        rd = -2 if isinstance(b, TensorArg) and len(b.shape) >= 2 else 0
    else:
        return None
    if max(li, ri) >= len(inputs):
        return None
    a, b = inputs[li], inputs[ri]
    if not isinstance(a, TensorArg) or not isinstance(b, TensorArg) or not a.shape or not b.shape:
        return None
    if not (-len(a.shape) <= ld < len(a.shape) and -len(b.shape) <= rd < len(b.shape)):
        return None
    if a.shape[ld] == b.shape[rd]:
        return None
    return (f"inputs {li} {list(a.shape)} and {ri} {list(b.shape)} disagree on the contracted dim "
            f"({a.shape[ld]} vs {b.shape[rd]}): no such call runs (torch raises before any kernel)")
