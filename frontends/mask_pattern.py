"""What makes an evaluated attention mask causal; shared by the torch and ONNX frontends (numpy only).

Both frontends prove a materialised mask causal the same way: evaluate the subgraph that builds it at
each of :data:`SIZES` (every symbolic dim set to that size) and test the result here.
"""

from __future__ import annotations

import numpy as np

__all__ = ["is_lower_triangle", "MAX_NODES", "SIZES", "ADDITIVE_MASKED"]

#: the largest mask-building subgraph evaluated (Hugging Face masks take about 40 nodes)
MAX_NODES = 400
#: every symbolic dim takes these sizes in turn; two sizes rule out a pattern that fits one by chance
SIZES = (5, 7)
#: an additive mask blocks a position with a value at or below this (``-inf``, ``finfo.min``)
ADDITIVE_MASKED = -1e4


def is_lower_triangle(mask: np.ndarray) -> bool:
    """True when the positions the mask lets attend (``True``, or ``0`` in an additive mask) are
    exactly ``k <= q`` (bottom-right aligned), in every leading (batch, head) slice."""
    if mask.ndim < 2:
        return False
    sq, sk = mask.shape[-2:]
    if sq < 2:
        return False
    if mask.dtype == np.bool_:
        allowed = mask
    elif np.issubdtype(mask.dtype, np.floating):
        if not bool(((mask == 0) | (mask <= ADDITIVE_MASKED)).all()):
            return False   # a bias (ALiBi, relative positions), not a mask
        allowed = mask == 0
    else:
        return False
    expected = np.tril(np.ones((sq, sk), dtype=bool), k=sk - sq)
    return bool(np.array_equal(allowed, np.broadcast_to(expected, allowed.shape)))
