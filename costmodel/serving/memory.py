"""Does a batch fit: weights + KV cache + activations + the runtime's reserve, per device.

The terms fill memory in the order a serving runtime allocates them (vLLM: load the weights,
profile a forward pass for the activations, leave the reserve, give the rest to the KV cache), so
when a batch does not fit, the term that crosses the capacity is the one that overflows, by how
much it overflows, and what the terms before it left for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...backends.defaults import SERVING_MEMORY_RESERVE

__all__ = ["Memory", "memory_budget"]

_ORDER = ("reserve", "weights", "activations", "kv_cache")
_LABELS = {"reserve": "runtime reserve", "weights": "weights", "activations": "activations", "kv_cache": "KV cache"}


@dataclass(frozen=True)
class Memory:
    """Bytes per device: capacity and the four terms (see the module doc)."""

    capacity: float
    reserve: float
    weights: float
    activations: float
    kv_cache: float

    @property
    def required(self) -> float:
        return self.reserve + self.weights + self.activations + self.kv_cache

    @property
    def fits(self) -> bool:
        return self.required <= self.capacity

    @property
    def free(self) -> float:
        return self.capacity - self.required

    @property
    def overflow(self) -> tuple[str, float, float] | None:
        """(the term that overflows, bytes over the capacity, bytes the earlier terms left for it),
        or None when everything fits."""
        if self.fits:
            return None
        used = 0.0
        for name in _ORDER:
            need = getattr(self, name)
            if used + need > self.capacity:
                return name, self.required - self.capacity, max(self.capacity - used, 0.0)
            used += need
        return _ORDER[-1], self.required - self.capacity, 0.0   # unreachable: not fits means a term crosses

    def short(self, labels: dict[str, str] | None = None) -> str:
        """A few words for a table cell: ``fits``, ``KV cache +12.3 GB`` where the crossing term is
        the last (its own excess is the whole excess), else both: ``weights +0.6 GB, all +0.9 GB``
        (the weights alone are 0.6 GB over the room the terms before leave them; the KV cache and
        activations after them add 0.3 GB: a cell that said "weights +0.9 GB" overstated the
        weights' share). ``labels``: shorter term names for a narrow table."""
        over = self.overflow
        if over is None:
            return "fits"
        name, by, _ = over
        label = (labels or _LABELS)[name]
        own = self._own_excess(over)
        return f"{label} +{by / 1e9:.3g} GB" if own is None else f"{label} +{own / 1e9:.3g} GB, all +{by / 1e9:.3g} GB"

    def _own_excess(self, over: tuple[str, float, float]) -> float | None:
        """The crossing term's own excess over the room left for it, or None where that is the whole
        excess (the last term crosses)."""
        name, by, left = over
        own = getattr(self, name) - left
        return None if own >= by * (1 - 1e-9) else own

    def explain(self) -> str:
        """One sentence: fits with what to spare, or which term overflows and by how much."""
        gb = 1e9
        terms = (f"weights {self.weights / gb:.3g} GB + KV cache {self.kv_cache / gb:.3g} GB + activations "
                 f"{self.activations / gb:.3g} GB + reserve {self.reserve / gb:.3g} GB")
        over = self.overflow
        if over is None:
            return f"fits: {terms} = {self.required / gb:.3g} of {self.capacity / gb:.3g} GB per device"
        name, by, left = over
        label = _LABELS[name]
        verb = "overflow" if name in ("weights", "activations") else "overflows"   # plural nouns
        room = (f"the terms before it leave {left / gb:.3g} GB for the {label}, which needs "
                f"{getattr(self, name) / gb:.3g} GB")
        own = self._own_excess(over)
        if own is None:
            return (f"does not fit: the {label} {verb} by {by / gb:.3g} GB ({terms} = {self.required / gb:.3g} "
                    f"GB against {self.capacity / gb:.3g} GB per device; {room})")
        return (f"does not fit by {by / gb:.3g} GB: the {label} alone {verb} by {own / gb:.3g} GB "
                f"({room}) and the terms after it add {(by - own) / gb:.3g} GB ({terms} = "
                f"{self.required / gb:.3g} GB against {self.capacity / gb:.3g} GB per device)")

    def to_dict(self) -> dict[str, Any]:
        over = self.overflow
        return {"capacity": self.capacity, "reserve": self.reserve, "weights": self.weights,
                "activations": self.activations, "kv_cache": self.kv_cache, "required": self.required,
                "fits": self.fits, "overflow": None if over is None else
                {"term": over[0], "by_bytes": over[1], "room_bytes": over[2]}, "explain": self.explain()}


def memory_budget(capacity: float, *, weights: float, activations: float, kv_cache: float,
                  reserve_fraction: float = SERVING_MEMORY_RESERVE) -> Memory:
    """The per-device budget; the reserve is ``reserve_fraction`` of the capacity."""
    return Memory(capacity, capacity * reserve_fraction, weights, activations, kv_cache)
