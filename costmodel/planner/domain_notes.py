"""What a plan says about its groups' placement on scale-up domains: several TPU slices joined over
DCN (multislice), a device count that is not a whole number of domains, and the mesh axes whose
groups straddle a domain boundary.

Why a note: such a group's collectives cross the scale-out network (:mod:`..execution.placement`;
the step is timed with the slowest group of each axis), which a reader would otherwise take for a
fast-link group from its size alone: ep=64 at stride 1 looks like "inside a 72-GPU NVL72 rack", yet
7 of the 8 such groups in 512 ranks have members in two racks.
"""

from __future__ import annotations

from ..execution.collectives import Topology
from ..execution.placement import aligned_spread, spread_counts
from .strategy import Parallel

__all__ = ["domain_notes"]

#: The axes whose groups run collectives, with what they carry.
_AXES = (("tp", "tensor-parallel"), ("cp", "context-parallel"), ("ep", "expert-parallel"),
         ("dp_cp", "data-parallel gradient"), ("edp", "expert data-parallel gradient"))


def domain_notes(topology: Topology, parallel: Parallel, system: str) -> list[str]:
    """Notes on the placement of ``parallel``'s groups in ``topology``'s world (none when the world is
    not known or fits one domain)."""
    world, domain = topology.world, topology.scale_up_domain
    if world is None or domain <= 1 or world <= domain:
        return []
    notes = []
    if topology.scale_up.torus_dims and not world % domain:
        dims = "x".join(map(str, topology.scale_up.torus_dims))
        notes.append(f"{world} devices are {world // domain} slices of {domain} ({system}, {dims}) joined by the "
                     "scale-out network (multislice): a group that spans slices runs its collectives on it")
    if world % domain:
        notes.append(f"{world} devices are not a whole number of {domain}-device scale-up domains ({system}): "
                     f"{world // domain} full and one with {world % domain}; ranks fill the domains in order, so "
                     "a group whose ranks run past a domain's end crosses the scale-out network")
    for axis, what in _AXES:
        size, stride = parallel.axis(axis)
        if size <= 1 or (axis == "edp" and parallel.ep == 1):
            continue              # without expert parallelism the expert replicas are the dp_cp groups
        counts = spread_counts(domain, size, stride, world)
        aligned = aligned_spread(domain, size, stride)
        straddling = [(s, n) for s, n in counts if s.domains > aligned.domains or s.local < aligned.local]
        if not straddling:
            continue
        total = sum(n for _, n in counts)
        worst = min(s for s, _ in straddling)
        groups = sum(n for _, n in straddling)
        notes.append(f"{what} groups ({axis}={size}, ranks {stride} apart): {groups} of {total} straddle a "
                     f"{domain}-device domain boundary (as few as {worst.local} of a group's members in one of "
                     f"its {worst.domains} domains); their collectives are timed on the scale-out network, each "
                     "axis at its slowest group's time")
    return notes
