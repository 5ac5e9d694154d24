"""The cost of running one op (or a sum of ops): work, traffic and communication, as exact integers.

A small frozen value with ``+`` so passes can total per group, per layer or per program without
mutating nodes. Times are not here: they depend on a target and live in the timing results.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Cost", "ZERO"]


@dataclass(frozen=True, slots=True)
class Cost:
    """FLOPs (2 per multiply-add), transcendental evaluations, bytes and bytes sent to other devices.

    ``bytes_read``/``bytes_written`` are compulsory main-memory traffic of the unfused op: each
    distinct input read once, each output written once; views move nothing. ``comm_bytes`` is what
    one device sends over the interconnect for a collective.
    """

    flops: int = 0
    transcendentals: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    comm_bytes: int = 0

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte of compulsory traffic (inf for traffic-free ops)."""
        b = self.bytes
        return self.flops / b if b else float("inf") if self.flops else 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.flops + other.flops, self.transcendentals + other.transcendentals,
                    self.bytes_read + other.bytes_read, self.bytes_written + other.bytes_written,
                    self.comm_bytes + other.comm_bytes)

    def scaled(self, k: int) -> Cost:
        """This cost repeated ``k`` times (a loop body run ``k`` times)."""
        return Cost(self.flops * k, self.transcendentals * k, self.bytes_read * k,
                    self.bytes_written * k, self.comm_bytes * k)

    def to_dict(self) -> dict[str, int]:
        return {"flops": self.flops, "transcendentals": self.transcendentals,
                "bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
                "bytes": self.bytes, "comm_bytes": self.comm_bytes}


ZERO = Cost()
