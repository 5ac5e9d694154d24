"""Systems: devices of one chip wired into a scale-up domain, and domains joined by a network.

Collective cost depends less on the chip than on how devices are wired, so the wiring is data too:
``scale_up`` describes the fast domain (NVLink/NVSwitch, TPU ICI torus, Infinity Fabric mesh) and
``scale_out`` the network between domains (InfiniBand, DCN, Ethernet). Each level is seen from one
device: its bandwidth is per device and one direction, its latency the alpha term per hop.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING

from ..errors import TargetSpecError
from .checks import normalize_fields
from .fields import spec_field
from .slices import parse_slice, sub_slice
from .sourcing import check_sources
from .target import NAME_PATTERN
from .vocab import TOPOLOGIES

if TYPE_CHECKING:
    from .target import Target

__all__ = ["Level", "System"]


@dataclass(frozen=True, kw_only=True)
class Level:
    """One network level as seen by one device. Its sources live in the owning System."""

    fabric: str = spec_field("text", required=True)
    topology: str = spec_field("text", required=True, choices=TOPOLOGIES)
    bandwidth: float = spec_field("quantity", units="bandwidth", unit="gbps", required=True)
    latency: float = spec_field("quantity", units="time", unit="us", required=True,
                                allow_zero=True)
    links: int | None = spec_field("count")
    dims: tuple[int, ...] = spec_field("dims")
    #: Per axis of ``dims``, whether wraparound links close it into a ring. Absent: every axis on a
    #: torus, none on a mesh; a TPU v5e 8x16 slice wraps only its 16-long axis (a partial torus).
    wraparound: tuple[bool, ...] = spec_field("flags")
    #: Achievable bus bandwidth of a collective at large messages (NCCL's ``busbw``), per device:
    #: what measurements reach, below the link peak. Collectives use it for the beta term.
    bus_bandwidth: float | None = spec_field("quantity", units="bandwidth", unit="gbps")
    #: The switches reduce in the network (NVLink SHARP / NVLS, InfiniBand SHARP): an all-reduce
    #: sends its buffer up once and receives the result once instead of 2(n-1)/n of it each way.
    in_network_reduction: bool | None = spec_field("flag")
    #: Achievable bus bandwidth of an all-reduce with in-network reduction (NVLS busbw).
    reduction_bus_bandwidth: float | None = spec_field("quantity", units="bandwidth", unit="gbps")
    #: Fixed time of one in-network all-reduce (NVLS: multicast setup and switch round trip), in
    #: place of the per-step latency; without it the reduction pays two steps of ``latency``.
    reduction_latency: float | None = spec_field("quantity", units="time", unit="us")

    def __post_init__(self) -> None:
        normalize_fields(self)
        if self.topology in ("torus", "mesh") and not self.dims:
            raise TargetSpecError(f"field 'dims': a {self.topology} level needs its dims")
        if self.wraparound:
            if len(self.wraparound) != len(self.dims):
                raise TargetSpecError(f"field 'wraparound': {len(self.wraparound)} flags for "
                                      f"{len(self.dims)} dims")
            if self.topology != "torus" and any(self.wraparound):
                raise TargetSpecError(f"field 'wraparound': a {self.topology} has no wraparound links; "
                                      "write topology = \"torus\" for a level with any")

    @property
    def wraps(self) -> tuple[bool, ...]:
        """Wraparound per axis of ``dims`` (the field, else all on a torus, none otherwise)."""
        return self.wraparound or tuple(self.topology == "torus" for _ in self.dims)


@dataclass(frozen=True, kw_only=True)
class System:
    """``devices`` chips of type ``chip``, in domains of ``scale_up_domain`` devices."""

    name: str = spec_field("text", required=True)
    display_name: str = spec_field("text", required=True)
    aliases: tuple[str, ...] = spec_field("names")
    notes: str = spec_field("text")
    chip: str = spec_field("text", required=True)
    devices: int = spec_field("count", required=True)
    scale_up_domain: int = spec_field("count", required=True)
    scale_up: Level | None = spec_field("level", schema=Level)
    scale_out: Level | None = spec_field("level", schema=Level)
    #: The standard slices a job on fewer chips runs on (a TPU pod's published slice shapes,
    #: :mod:`.slices`): ``"4wx4wx4w"``, ``"2x4x4"``, ``"8x16w"``.
    slices: tuple[str, ...] = spec_field("slices")
    sources: Mapping[str, str] = spec_field("sources")

    def __post_init__(self) -> None:
        normalize_fields(self)
        for label, name in [("name", self.name)] + [(f"aliases[{i}]", a)
                                                    for i, a in enumerate(self.aliases)]:
            if not NAME_PATTERN.fullmatch(name):
                raise TargetSpecError(f"field {label!r}: {name!r} is not a valid system name")
        if self.devices % self.scale_up_domain:
            raise TargetSpecError(f"field 'devices': {self.devices} devices do not split into "
                                  f"domains of {self.scale_up_domain}")
        if self.scale_up_domain > 1 and self.scale_up is None:
            raise TargetSpecError("field 'scale_up': a domain of several devices needs a level")
        if self.scale_up is not None:
            dims = self.scale_up.dims
            if dims and math.prod(dims) != self.scale_up_domain:
                raise TargetSpecError(
                    f"field 'scale_up.dims': {'x'.join(map(str, dims))} is not "
                    f"{self.scale_up_domain} devices")
        if self.devices > self.scale_up_domain and self.scale_out is None:
            raise TargetSpecError("field 'scale_out': devices span several domains but no "
                                  "scale-out level is given")
        for shape in self.slices:
            dims, _ = parse_slice("slices", shape)
            if self.scale_up is None or len(dims) != len(self.scale_up.dims) or prod(dims) > self.scale_up_domain:
                raise TargetSpecError(f"field 'slices': {shape!r} is not a slice of the scale-up level's "
                                      f"{'x'.join(map(str, self.scale_up.dims if self.scale_up else ()))}")
        object.__setattr__(self, "sources", check_sources(self))

    @property
    def topology(self) -> str:
        """Topology kind of the scale-up domain ("single" when the domain is one device)."""
        return self.scale_up.topology if self.scale_up is not None else "single"

    @property
    def domains(self) -> int:
        """Number of scale-up domains joined by the scale-out network."""
        return self.devices // self.scale_up_domain

    def target(self) -> Target:
        """The chip this system is built from, from the catalog."""
        from .registry import get_target  # registry loads systems, so import late

        return get_target(self.chip)

    def slice_of(self, devices: int) -> System | None:
        """The system of this pod's standard slice of ``devices`` chips (:mod:`.slices`), or None."""
        return sub_slice(self, devices)

    def replicate(self, count: int) -> System:
        """``count`` copies joined by the scale-out network, e.g. 16 DGX nodes for 128 GPUs."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise TargetSpecError(f"replicate(): count must be a positive integer, got {count!r}")
        if count == 1:
            return self
        if self.scale_out is None:
            raise TargetSpecError(f"replicate(): system {self.name!r} has no scale-out level")
        sources = dict(self.sources)
        sources["devices"] = f"{sources['devices']}; x{count} replicas"
        return dataclasses.replace(
            self, name=f"{self.name}+x{count}", aliases=(), devices=self.devices * count,
            display_name=f"{count}x {self.display_name}", sources=sources)
