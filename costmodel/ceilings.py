"""A chip's roofline ceilings as plain data: one compute roof per precision, one slope per memory level.

A roofline drawn from a report must not need the target file (a user's ``--target-file`` chip may
not be at hand when the JSON is read again), so a timed report carries its target's ceilings. They
are the datasheet peaks of one device, exactly as the target states them; the achievable fractions
(``matmul_efficiency``, ``memory_efficiency``) ride along so a plot can show the ceiling the model
actually times against.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # report.py reads the result type without pulling in the backends
    from ..backends import Target

__all__ = ["Ceiling", "Ceilings", "ceilings_of"]


@dataclass(frozen=True)
class Ceiling:
    """One roof: ``value`` is FLOP/s (compute) or bytes/s (memory); ``field`` the target field it is."""

    label: str
    value: float
    field: str


@dataclass(frozen=True)
class Ceilings:
    """Per device: matrix and vector peaks by dtype, bandwidth by memory level, achievable fractions."""

    target: str
    compute: list[Ceiling] = field(default_factory=list)
    memory: list[Ceiling] = field(default_factory=list)
    matmul_efficiency: float = 1.0
    memory_efficiency: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target,
                "compute": [asdict(c) for c in self.compute], "memory": [asdict(c) for c in self.memory],
                "matmul_efficiency": self.matmul_efficiency, "memory_efficiency": self.memory_efficiency}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ceilings:
        return cls(data["target"], [Ceiling(**c) for c in data["compute"]], [Ceiling(**c) for c in data["memory"]],
                   data["matmul_efficiency"], data["memory_efficiency"])


def ceilings_of(target: Target) -> Ceilings:
    """Every rate ``target`` lists: a matrix roof per dtype, a vector roof per dtype, and the
    bandwidth of main memory, the on-chip level, the external tier (dataflow) and the host link."""
    compute = [Ceiling(f"{dtype} {unit}", rate, f"{unit}_flops.{dtype}")
               for unit, rates in (("matrix", target.matrix_flops), ("vector", target.vector_flops))
               for dtype, rate in rates.items()]
    levels: list[tuple[str, str, float | None]] = [
        ("on-chip", "onchip_bandwidth", target.onchip_bandwidth),
        ("memory", "memory_bandwidth", target.memory_bandwidth),
    ]
    external = getattr(target, "external_memory_bandwidth", None)    # a dataflow chip's streaming tier
    if external:
        levels.append(("external memory", "external_memory_bandwidth", external))
    levels.append(("host link", "host_bandwidth", target.host_bandwidth))
    memory = [Ceiling(label, float(bw), name) for label, name, bw in levels if bw]
    return Ceilings(target.name, sorted(compute, key=lambda c: -c.value), memory,
                    target.matmul_efficiency, target.memory_efficiency)
