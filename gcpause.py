"""Python's cycle collector held off while a graph is built, indexed or costed.

Why: lowering a 100,000-node model, indexing it and costing it each allocate hundreds of thousands
of small objects and free none, so every collection meanwhile walks them all to find nothing. The
collector is off for the phase; and when it is turned back on, the objects the phase made are moved
straight to the oldest generation (``gc.freeze`` then ``gc.unfreeze``), where they would end up
anyway, instead of the first allocation afterwards paying a young collection over all of them
(0.1 s at 100,000 nodes). They are still collected by full collections, as before; the only change
is that garbage cycles made during the phase wait for the next full collection.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused_gc"]


@contextmanager
def paused_gc() -> Iterator[None]:
    """The collector off inside the block (nested blocks leave it to the outermost one)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.freeze()   # everything tracked now: skip the young generations ...
            gc.enable()
            gc.unfreeze()  # ... back as old objects, seen by full collections only
