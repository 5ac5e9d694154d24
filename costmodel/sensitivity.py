"""Sensitivity: how much faster the run gets if one resource alone doubles.

The largest speed-up names the narrowest pipe. Each what-if re-times the same program on a scaled
copy of the target through the same execution model, so the answer includes re-tiling, bound changes
and layout changes, not just the share of time a resource is bound.
"""

from __future__ import annotations

from ..backends import Target
from ..backends.scaling import RESOURCE_FIELDS, sram_is_main_memory
from .execution import DeviceGroup, Program
from .timing import time_program

__all__ = ["RESOURCE_DOUBLINGS", "speedups_if_doubled"]

#: What "this pipe doubles" means, as factors for Target.scaled().
RESOURCE_DOUBLINGS: dict[str, dict[str, float]] = {
    "compute": {"compute": 2.0},
    "memory": {"memory_bandwidth": 2.0, "onchip_bandwidth": 2.0},
    # a dataflow chip's external tier (MemoryX, DDR): a weight-streaming layout's kernels are
    # memory-bound on it, and doubling the on-chip memory alone leaves them where they are
    "external memory": {"external_memory_bandwidth": 2.0},
    # the pipe's time is its links' latency plus bytes over their bandwidth: doubling the pipe halves
    # both (a chip whose catalog gives its links a latency but no bandwidth is still interconnect-bound)
    "interconnect": {"interconnect_bandwidth": 2.0, "link_latency": 0.5},
    "overhead": {"launch_overhead": 0.5},
}


def speedups_if_doubled(program: Program, devices: DeviceGroup, base_s: float) -> dict[str, float]:
    """Resource -> base time / time with that resource doubled (resources the target lacks are left out)."""
    out: dict[str, float] = {}
    for resource, factors in RESOURCE_DOUBLINGS.items():
        usable = {k: v for k, v in factors.items() if _has_resource(devices.target, k)}
        if not usable:
            continue
        t = time_program(program, DeviceGroup(devices.target.scaled(**usable), devices.count)).total_s
        out[resource] = base_s / t if t > 0 else 1.0
    return out


def _has_resource(target: Target, name: str) -> bool:
    if name == "onchip_bandwidth":       # where the SRAM is the main memory, memory_bandwidth is it
        return any(getattr(target, f, None) for f in RESOURCE_FIELDS[name]) and not sram_is_main_memory(target)
    if name in ("interconnect_bandwidth", "link_latency"):   # any of the links' fields the target sets
        return any(getattr(target, f, None) for f in RESOURCE_FIELDS[name])
    if name == "external_memory_bandwidth":
        return bool(getattr(target, "external_memory_bandwidth", 0.0))
    if name == "vector_flops":
        return bool(target.vector_flops)
    return True
