"""What makes an evaluated attention mask causal, and how wide its window is; shared by the torch and
ONNX frontends (numpy only).

Both frontends prove a materialised mask causal the same way: evaluate the subgraph that builds it at
each of :data:`SIZES` (every symbolic dim set to that size) and test the result here. A sliding-window
mask (Hugging Face's ``kv_idx > q_idx - sliding_window`` AND ``kv_idx <= q_idx``, transformers'
``sliding_window_causal_mask_function``) is the causal triangle cut to a band of ``window`` keys per
query, the query's own included. A probe shows the band only when its keys outnumber the window: a
window of 4096 evaluated at 7 tokens is exactly the triangle. So each evaluation says "causal with
this window", or "causal, and any window is at least the keys it had", or "not causal"; the frontends
probe long enough sequences to tell (:func:`agreed_band` joins what the probes saw).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir import CAUSAL, WINDOW, DimRole

__all__ = ["Band", "causal_band", "agreed_band", "band_attrs", "is_lower_triangle", "MAX_NODES", "SIZES",
           "ADDITIVE_MASKED", "PROBE_BATCH", "window_probes", "MAX_PROBE_ELEMENTS", "LONG_ROLES", "PAST_WINDOW",
           "MAX_CANDIDATES"]

#: the largest mask-building subgraph evaluated (Hugging Face masks take about 40 nodes)
MAX_NODES = 400
#: every symbolic dim takes these sizes in turn; two sizes rule out a pattern that fits one by chance
SIZES = (5, 7)
#: an additive mask blocks a position with a value at or below this (``-inf``, ``finfo.min``)
ADDITIVE_MASKED = -1e4
#: a probe for a window longer than :data:`SIZES` sets the sequence dims past the window and every
#: other dim (batch, heads) to this, so the mask is ``2 x (W+1)^2``, not ``W x W^2``
PROBE_BATCH = 2
#: the most elements any tensor of a long probe may hold: a ``[2, 1, 4099, 4099]`` mask (Mistral's
#: window of 4096) is 34M booleans; a window whose probe would exceed this is not looked for
MAX_PROBE_ELEMENTS = 1 << 26
#: the dims a long probe sets past the window: the ones queries and keys run along
LONG_ROLES = frozenset({DimRole.SEQUENCE, DimRole.KV_LENGTH})
#: a long probe's sequence dims, past the candidate window by these (two sizes, as :data:`SIZES`)
PAST_WINDOW = (1, 3)
#: the most window candidates evaluated per mask (each evaluates the subgraph twice)
MAX_CANDIDATES = 4


@dataclass(frozen=True, slots=True)
class Band:
    """A causal mask as probes saw it: ``window`` keys per query (the query's own included), or None
    when every query reached key 0 (plain causal: a window, if any, is at least ``reach`` keys)."""

    window: int | None
    reach: int


def _allowed(mask: np.ndarray) -> np.ndarray | None:
    """The positions the mask lets attend (``True``, or ``0`` in an additive mask), else None (a bias:
    ALiBi, relative positions; or an integer tensor)."""
    if mask.dtype == np.bool_:
        return mask
    if np.issubdtype(mask.dtype, np.floating):
        if not bool(((mask == 0) | (mask <= ADDITIVE_MASKED)).all()):
            return None
        return mask == 0
    return None


def causal_band(mask: np.ndarray) -> Band | None:
    """The band of an evaluated mask, or None when it is not causal.

    Causal with window ``w`` means: in every leading (batch, head) slice, query row ``i`` of ``sq`` is
    at position ``p = i + sk - sq`` (bottom-right aligned, as after a cache) and attends exactly the
    keys ``p - w < k <= p``. The last row (``p = sk - 1``) reaches the most keys, ``min(w, sk)``: all
    ``sk`` of them reads as plain causal (``w >= sk``), fewer as the window itself.
    """
    if mask.ndim < 2:
        return None
    sq, sk = mask.shape[-2:]
    if sq < 2 or sk < 1:
        return None
    allowed = _allowed(mask)
    if allowed is None:
        return None
    reach = int(allowed.reshape(-1, sq, sk)[0, -1].sum())
    if reach == 0:
        return None
    p = np.arange(sq)[:, None] + (sk - sq)
    k = np.arange(sk)[None, :]
    expected = (k <= p) & (k > p - reach)
    if not np.array_equal(allowed, np.broadcast_to(expected, allowed.shape)):
        return None
    return Band(None if reach >= sk else reach, sk)


def agreed_band(bands: Iterable[Band | None]) -> Band | None:
    """What several probes of one mask prove together: one window every probe that shows a window
    agrees on, and every plain probe too short to show it (its ``reach`` at most the window); else
    plain causal when all are plain; else None (not causal, or probes that disagree)."""
    seen = list(bands)
    if not seen or any(b is None for b in seen):
        return None
    bands_ = [b for b in seen if b is not None]
    windows = {b.window for b in bands_ if b.window is not None}
    reach = max(b.reach for b in bands_ if b.window is None) if any(b.window is None for b in bands_) else 0
    if not windows:
        return Band(None, reach)
    if len(windows) > 1:
        return None
    (w,) = windows
    return Band(w, reach) if reach <= w else None


def band_attrs(band: Band) -> dict[str, Any]:
    """The attributes a proven causal mask gives the attention (or eager mask step) it feeds:
    :data:`~narrowpipe.ir.CAUSAL`, and :data:`~narrowpipe.ir.WINDOW` when the band is a window."""
    return {CAUSAL: True} if band.window is None else {CAUSAL: True, WINDOW: band.window}


def is_lower_triangle(mask: np.ndarray) -> bool:
    """True when the positions the mask lets attend are exactly ``k <= q`` (bottom-right aligned), in
    every leading (batch, head) slice: causal with no window shorter than its keys."""
    band = causal_band(mask)
    return band is not None and band.window is None


def window_probes(long: Collection[str], window: int) -> tuple[Callable[[str], int], ...]:
    """The evaluations that would show a candidate ``window``: each symbolic dim's size by name, the
    ``long`` ones (sequence, KV length) just past the window (:data:`PAST_WINDOW`), every other at
    :data:`PROBE_BATCH`. Shared by both frontends' long probes."""
    return tuple((lambda s, n=window + extra: n if s in long else PROBE_BATCH) for extra in PAST_WINDOW)
