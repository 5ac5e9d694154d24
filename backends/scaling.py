"""What-if resource scaling: "what if this chip had 2x the HBM bandwidth?".

Each resource name maps to the fields it multiplies, family fields included, so that a study of,
say, on-chip memory moves the L2 of a GPU and the SRAM of a dataflow chip alike. Scaled fields keep
their source with the factor appended, so provenance survives the experiment.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import TargetSpecError
from .frozen import FrozenMap
from .vocab import DTYPES

if TYPE_CHECKING:
    from .target import Target

__all__ = ["RESOURCES", "RESOURCE_FIELDS", "scale_target", "sram_is_main_memory"]

#: resource -> fields it multiplies (a field a family lacks, or that is unset, is skipped).
RESOURCE_FIELDS: Mapping[str, tuple[str, ...]] = {
    # every FLOP/s of the chip: its matrix units and its vector units (an fp32 matmul on a GPU
    # without an fp32 matrix rate runs on the latter); what "if doubled: compute" doubles
    "compute": ("matrix_flops", "sparse_matrix_flops", "vector_flops", "transcendental_flops", "vector_op_flops"),
    "peak_flops": ("matrix_flops", "sparse_matrix_flops"),
    **{f"peak_{d}": ("matrix_flops", "sparse_matrix_flops") for d in DTYPES},
    "vector_flops": ("vector_flops", "transcendental_flops", "vector_op_flops"),
    "memory_bandwidth": ("memory_bandwidth",),
    "hbm_bandwidth": ("memory_bandwidth",),
    "memory_capacity": ("memory_capacity",),
    "onchip_capacity": ("onchip_capacity", "l2_bytes"),
    # a GPU's per-SM operand feed (L2 and shared memory to the matrix units) is its on-chip bandwidth
    "onchip_bandwidth": ("onchip_bandwidth", "gemm_tile_feed_bandwidth", "gemm_tile_feed_bandwidth_tf32"),
    # a dataflow chip's external tier (Cerebras MemoryX over the system I/O, SambaNova DDR): what a
    # weight-streaming layout reads its weights from, a pipe of its own that no other name moves
    "external_memory_bandwidth": ("external_memory_bandwidth",),
    "interconnect_bandwidth": ("scale_up_bandwidth", "scale_out_bandwidth",
                               "ici_link_bandwidth", "chip_to_chip_bandwidth"),
    "scale_up_bandwidth": ("scale_up_bandwidth", "ici_link_bandwidth", "chip_to_chip_bandwidth"),
    "scale_out_bandwidth": ("scale_out_bandwidth",),
    "launch_overhead": ("launch_overhead", "gemm_latency", "conv_latency", "gemm_wave_overhead", "eager_op_overhead"),
    "link_latency": ("link_latency", "chip_to_chip_latency", "peer_all_reduce_latency"),
}

#: On a chip whose main memory is its SRAM (Groq, Cerebras: ``memory_* = onchip_*``) the two names
#: are one memory: scaling either moves both (``onchip_capacity=2`` on Groq did nothing, the layout
#: reads ``memory_capacity``), and there is no HBM to scale.
_SRAM_MAIN: Mapping[str, tuple[str, ...]] = {
    "memory_capacity": ("memory_capacity", "onchip_capacity"),
    "onchip_capacity": ("onchip_capacity", "memory_capacity"),
    "memory_bandwidth": ("memory_bandwidth", "onchip_bandwidth"),
    "onchip_bandwidth": ("onchip_bandwidth", "memory_bandwidth"),
}


def sram_is_main_memory(target: Target) -> bool:
    """A dataflow chip whose ``memory_*`` is its on-chip SRAM (the family doc: Groq and Cerebras)."""
    return target.family == "dataflow" and target.onchip_capacity is not None \
        and target.memory_capacity == target.onchip_capacity


def _fields(target: Target, resource: str) -> tuple[str, ...]:
    if not sram_is_main_memory(target):
        return RESOURCE_FIELDS[resource]
    if resource == "hbm_bandwidth":
        raise TargetSpecError(f"scaled(): {target.name!r} has no HBM: its memory is its on-chip SRAM "
                              "(scale memory_bandwidth or onchip_bandwidth)")
    return _SRAM_MAIN.get(resource, RESOURCE_FIELDS[resource])


#: The resource names :meth:`Target.scaled` accepts.
RESOURCES: tuple[str, ...] = tuple(RESOURCE_FIELDS)


def _factor(resource: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise TargetSpecError(f"scaling {resource!r}: the factor must be a positive number, "
                              f"got {value!r}")
    return float(value)


def _scale_table(table: Mapping[str, float], dtype: str | None,
                 factor: float) -> Mapping[str, float]:
    return FrozenMap({d: (r * factor if dtype in (None, d) else r) for d, r in table.items()})


def scale_target(target: Target, factors: Mapping[str, object]) -> Target:
    """``target`` with each named resource multiplied by its factor; see :data:`RESOURCES`."""
    if not factors:
        return target
    unknown = [r for r in factors if r not in RESOURCE_FIELDS]
    if unknown:
        raise TargetSpecError(f"cannot scale {', '.join(map(repr, unknown))}: not a resource "
                              f"(--scale RESOURCE=FACTOR); valid resources: {', '.join(RESOURCES)}")
    changes: dict[str, Any] = {}
    sources = dict(target.sources)
    scaled_by: dict[str, str] = {}      # spec key -> the resource that scaled it
    for resource, raw in factors.items():
        factor = _factor(resource, raw)
        dtype = resource[len("peak_"):] if resource.startswith("peak_") and \
            resource != "peak_flops" else None
        if dtype is not None and dtype not in target.matrix_flops:
            raise TargetSpecError(f"cannot scale {resource!r}: {target.name!r} has no {dtype} matrix rate "
                                  f"to scale (it has {', '.join(target.matrix_flops)})")
        touched = False
        for field in _fields(target, resource):
            value: Any = changes.get(field, getattr(target, field, None))
            if value is None or (isinstance(value, Mapping) and not value):
                continue
            touched = True
            if isinstance(value, Mapping):
                changes[field] = _scale_table(value, dtype, factor)
                keys = [f"{field}.{d}" for d in value if dtype in (None, d)]
            else:
                changes[field] = value * factor
                keys = [field]
            for key in keys:
                if key in scaled_by:    # aliases (hbm_bandwidth, memory_bandwidth) would compound
                    raise TargetSpecError(f"scaled(): {resource} and {scaled_by[key]} both scale {key}; "
                                          "name one of them")
                scaled_by[key] = resource
                sources[key] = f"{sources[key]}; scaled x{factor:g} ({resource} what-if)"
        if not touched:
            raise TargetSpecError(f"scaled(): {target.name!r} has no value for {resource!r}")
    label = ",".join(f"{r}={_factor(r, f):g}" for r, f in factors.items())
    pretty = ", ".join(f"{r} x{_factor(r, f):g}" for r, f in factors.items())
    return dataclasses.replace(
        target, **changes, name=f"{target.name}@{label}", aliases=(),
        display_name=f"{target.display_name} ({pretty})", sources=FrozenMap(sources),
        notes=(target.notes + "\n" if target.notes else "") + f"What-if: {pretty}.")
