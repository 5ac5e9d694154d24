"""Which machine a plan runs on: the chip and the system that ``--target``/``--system`` name, cut to the
slice a TPU job of that many chips really gets.

Why a module of its own: the choice decides every collective's topology (64 TPU v5p chips are a
4x4x4 cube with wraparound, not part of an 8x8x8 slice), so it is made once, before the planner's
state exists, and the refusals (a count that is no slice, more chips than a system holds or joins)
name the sizes that would work.
"""

from __future__ import annotations

from typing import Any

from ...backends import System, Target, get_system, get_target
from ...backends.registry import chip_and_system, chip_on_system, is_system_file
from ...backends.registry import systems as _systems
from ...backends.slices import multislice_unit, slice_sizes
from ...errors import NarrowpipeError, PlanError

__all__ = ["resolve_machine"]


def resolve_machine(target: Any, system: Any = None, devices: int | None = None) -> tuple[Target, System | None]:
    """``target`` names a chip or a system; ``system`` (optional) a system. A chip with no system
    gets the catalog's system of that chip when there is one (``a100`` -> ``dgx-a100``); where the
    catalog has several (TPU v4 slices of 8, 16 and 64 chips), the one of ``devices`` chips, else the
    smallest that holds them, else one with a scale-out level to replicate. A pod or slice system that
    lists its standard slices (:mod:`...backends.slices`) runs fewer chips on the slice of that many
    (64 TPU v5p chips: a 4x4x4 cube with wraparound, not part of the 8x8x8), and refuses a count that
    is no slice, unless its scale-out level joins whole slices (multislice). Devices that no system of
    the chip holds or joins are refused: a slice's topology is not a larger machine's."""
    chip, sys_ = _named_machine(target, system, devices)
    return chip, (_on_slice(sys_, devices) if sys_ is not None and devices is not None else sys_)


def _named_machine(target: Any, system: Any, devices: int | None) -> tuple[Target, System | None]:
    """The chip and the system (before slicing) that ``target``/``system`` name."""
    if system is not None:
        return chip_on_system(target, system)
    if isinstance(target, Target) or is_system_file(target):
        chip, file_system = chip_and_system(target)
        if file_system is not None:
            return chip, file_system
    else:
        try:
            sys_ = get_system(target)
            return sys_.target(), sys_
        except NarrowpipeError:
            chip = get_target(target)
    candidates = [get_system(name) for name, chip_name in _systems() if chip_name == chip.name]
    if not candidates:
        return chip, None
    if devices is None:
        return chip, candidates[0]
    exact = [s for s in candidates if s.devices == devices]
    if exact:
        return chip, exact[0]
    sliced = [s for s in candidates if s.slices]
    if sliced:                       # a pod that lists its slices: it decides (slice, multislice or refusal)
        return chip, max(sliced, key=lambda s: s.devices)
    holding = sorted((s for s in candidates if s.devices >= devices), key=lambda s: s.devices)
    if holding:
        return chip, holding[0]
    joined = [s for s in candidates if s.scale_out is not None]
    if joined:
        return chip, joined[0]
    sizes = ", ".join(f"{s.name} ({s.devices})" for s in sorted(candidates, key=lambda s: s.devices))
    raise PlanError(f"{devices} x {chip.name}: the catalog's {chip.name} systems are {sizes}, none with a "
                    f"scale-out level to join more; plan on at most {max(s.devices for s in candidates)} devices, "
                    "or name a system file of that size with --system")


def _on_slice(system: System, devices: int) -> System:
    """The system ``devices`` chips of ``system`` run on: its standard slice of that many chips, or
    for a multislice job the slice it is a whole number of (the planner joins the copies over the
    scale-out level); ``system`` itself when it lists no slices or is that size. A count that is no
    slice and no whole number of slices is refused, with the sizes that are."""
    if not system.slices or devices in (1, system.devices):
        return system                # one chip runs no collective: any slice holds it
    if devices < system.devices:
        found = system.slice_of(devices)
        if found is not None:
            return found
    unit = multislice_unit(system, devices)
    if unit is not None:
        return system.slice_of(unit) or system
    sizes = ", ".join(map(str, slice_sizes(system)))
    more = (f"; or a whole number of them (multislice over {system.name}'s scale-out network)"
            if system.scale_out is not None else f"; {system.name} has no scale-out level to join slices")
    raise PlanError(f"{devices} x {system.chip} is not a slice of {system.name}: its standard slices have "
                    f"{sizes} chips{more}")
