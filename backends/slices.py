"""Standard TPU slices: the shapes a pod is rented in, and the system a job on one of them runs on.

Why: a torus pod is not allocated chip by chip. A job on 64 TPU v5p chips gets a 4x4x4 cube whose
wraparound links close every axis, not 64 chips of an 8x8x8 slice laid out as an 8x8 plane; a job on
32 gets a 2x4x4 mesh (no wraparound below a full cube). The shapes are data in the pod's system file
(``slices``, with their source: Google's published slice topologies), each axis marked ``w`` where
wraparound links close it: ``"2x4x4"`` is a mesh, ``"4wx4wx8w"`` a torus of two cubes, ``"8x16w"`` a
v5e slice whose 16-long axis wraps (the fixed 16x16 wiring; SB-TPU). The slice's system is derived
here from the pod's: the same chips and links (per-link peak and measured bus bandwidth, per-hop
latency), the slice's dims and wraparound, and as many links per chip as the slice's axes wire (two
per axis longer than two, one on an axis of two), and the pod's scale-out network for multislice.
"""

from __future__ import annotations

import dataclasses
import re
from math import prod
from typing import TYPE_CHECKING

from ..errors import TargetSpecError

if TYPE_CHECKING:
    from .system import Level, System

__all__ = ["parse_slice", "slice_sizes", "sub_slice", "multislice_unit"]

_AXIS = re.compile(r"(\d+)(w?)")


def parse_slice(label: str, text: object) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """(dims, wraparound per axis) of a slice written ``"4wx4wx8w"`` / ``"2x4x4"`` / ``"8x16w"``."""
    if not isinstance(text, str) or not text:
        raise TargetSpecError(f"field {label!r}: expected a slice shape such as \"4x4x8\" or \"8x16w\", "
                              f"got {text!r}")
    dims: list[int] = []
    wraps: list[bool] = []
    for part in text.split("x"):
        match = _AXIS.fullmatch(part)
        if match is None or int(match.group(1)) < 1:
            raise TargetSpecError(f"field {label!r}: {text!r} is not a slice shape (axis lengths joined by "
                                  "'x', each a positive integer, 'w' after an axis closed by wraparound links)")
        dims.append(int(match.group(1)))
        wraps.append(bool(match.group(2)))
    return tuple(dims), tuple(wraps)


def _shapes(system: System) -> list[tuple[tuple[int, ...], tuple[bool, ...]]]:
    return [parse_slice(f"slices[{i}]", s) for i, s in enumerate(system.slices)]


def slice_sizes(system: System) -> list[int]:
    """The chip counts of the system's standard slices, ascending (the system's own size included)."""
    return sorted({prod(d) for d, _ in _shapes(system)} | {system.devices})


def sub_slice(system: System, devices: int) -> System | None:
    """The system of the standard slice of ``devices`` chips of ``system`` (None: no such slice, or
    ``devices`` is the system's own size)."""
    if devices == system.devices or system.scale_up is None:
        return None
    found = [(d, w) for d, w in _shapes(system) if prod(d) == devices]
    if not found:
        return None
    dims, wraps = found[0]
    shape = "x".join(map(str, dims))
    up = _slice_level(system.scale_up, dims, wraps)
    sources = {k: v for k, v in system.sources.items() if k.startswith("scale_out")}
    what = f"the standard {shape} slice of {system.name} (its 'slices': {system.sources.get('slices', '')})"
    sources.update({
        "devices": f"derived: {shape} = {devices} chips, {what}",
        "scale_up_domain": f"derived: one ICI slice, {what}",
        "scale_up.bandwidth": f"derived: {up.links} links in use x {system.name}'s per-link rate "
                              f"({system.sources.get('scale_up.bandwidth', '')})",
        "scale_up.latency": f"{system.name}: {system.sources.get('scale_up.latency', '')}",
        "scale_up.links": f"derived: a chip of a {shape} slice has {up.links} neighbours (two per axis longer "
                          "than two, one on an axis of two)",
        "scale_up.dims": f"derived: {what}",
        "scale_up.wraparound": f"derived: the axes marked 'w' in {shape}'s entry of {system.name}'s slices "
                               f"({system.sources.get('slices', '')})",
    })
    if up.bus_bandwidth is not None:
        sources["scale_up.bus_bandwidth"] = (f"derived: {up.links} links x {system.name}'s measured per-link "
                                             f"rate ({system.sources.get('scale_up.bus_bandwidth', '')})")
    kind = "torus" if all(wraps) else "mesh" if not any(wraps) else "partial torus"
    return dataclasses.replace(
        system, name=f"{system.chip}-{shape}", aliases=(), slices=(), devices=devices, scale_up_domain=devices,
        display_name=f"{system.chip} slice {shape} ({devices} chips, a {kind}; from {system.name})",
        notes=f"The standard {shape} slice of {system.name}, derived from it ({kind}).", scale_up=up,
        sources=sources)


def _slice_level(level: Level, dims: tuple[int, ...], wraps: tuple[bool, ...]) -> Level:
    """The pod's level cut to a slice: its per-link rates times the links the slice wires per chip."""
    pod_links = level.links or sum(2 if k > 2 else 1 for k in level.dims if k > 1)
    links = sum(2 if k > 2 else 1 for k in dims if k > 1) or 1
    bus = level.bus_bandwidth / pod_links * links if level.bus_bandwidth is not None else None
    return dataclasses.replace(level, topology="torus" if any(wraps) else "mesh", dims=dims, wraparound=wraps,
                               links=links, bandwidth=level.bandwidth / pod_links * links, bus_bandwidth=bus)


def multislice_unit(system: System, devices: int) -> int | None:
    """The slice size a multislice job of ``devices`` chips is built from: the largest standard slice
    that ``devices`` is a whole number (two or more) of, joined by the scale-out network (None: no
    scale-out level, or no slice divides ``devices``)."""
    if system.scale_out is None:
        return None
    units = [s for s in slice_sizes(system) if devices % s == 0 and devices // s >= 2]
    return max(units) if units else None
