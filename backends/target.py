"""The base ``Target``: what every chip has, whatever its execution model.

Numbers are SI base units (FLOP/s, bytes, bytes/s, s, W, USD per device-hour). Datasheet peaks and
*achievable* ceilings are separate fields because the cost model multiplies one by the other and
calibration only ever rewrites the latter. Bandwidths are per device and ONE direction; vendors'
"bidirectional" headlines are halved before they get here.

A target is frozen and hashable so that the cost model can cache on it; changes (calibration,
what-if studies) produce new targets through ``dataclasses.replace`` or :meth:`Target.scaled`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import TargetSpecError
from .checks import normalize_fields
from .fields import spec_field, specs
from .sourcing import check_sources
from .vocab import FAMILIES, PRICE_BASES, TOPOLOGIES, TRANSCENDENTALS, VECTOR_OPS

__all__ = ["Target", "NAME_PATTERN"]

#: Canonical target names: lower case, digits, ``-._``; scaled targets add ``@=,+``.
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._+@=,-]*")


@dataclass(frozen=True, kw_only=True)
class Target:
    """A device as the cost model sees it. Use a family subclass (``GpuTarget``, ...)."""

    FAMILY: ClassVar[str] = ""

    # identity
    name: str = spec_field("text", required=True)
    family: str = spec_field("text", required=True, choices=FAMILIES)
    vendor: str = spec_field("text", required=True)
    display_name: str = spec_field("text", required=True)
    aliases: tuple[str, ...] = spec_field("names")
    notes: str = spec_field("text")
    # compute: dense peaks per dtype; sparse = 2:4 structured sparsity, only where the chip has it
    matrix_flops: Mapping[str, float] = spec_field("rates", units="flops", unit="tflops",
                                                   required=True)
    sparse_matrix_flops: Mapping[str, float] = spec_field("rates", units="flops", unit="tflops")
    vector_flops: Mapping[str, float] = spec_field("rates", units="flops", unit="tflops")
    # memory: main memory (HBM/DRAM) and the largest on-chip level (L2 / SRAM / VMEM)
    memory_capacity: float = spec_field("quantity", units="bytes", unit="gb", required=True)
    memory_bandwidth: float = spec_field("quantity", units="bandwidth", unit="tbps",
                                         required=True)
    onchip_capacity: float | None = spec_field("quantity", units="bytes", unit="mb")
    onchip_bandwidth: float | None = spec_field("quantity", units="bandwidth", unit="tbps")
    host_bandwidth: float | None = spec_field("quantity", units="bandwidth", unit="gbps")
    # interconnect, per device and one direction
    scale_up_bandwidth: float | None = spec_field("quantity", units="bandwidth", unit="gbps")
    scale_up_links: int | None = spec_field("count")
    scale_up_domain: int = spec_field("count", required=True)
    #: How the scale-up links are wired (vocab.TOPOLOGIES); "full-mesh": each device has a direct link
    #: (or an equal share of its links) to each peer of the domain, so a pair gets 1/(domain-1) of
    #: the bandwidth (MI300X Infinity Fabric, Gaudi RoCE). Absent: a switch (or the torus_dims).
    scale_up_topology: str = spec_field("text", choices=TOPOLOGIES)
    scale_out_bandwidth: float | None = spec_field("quantity", units="bandwidth", unit="gbps")
    link_latency: float | None = spec_field("quantity", units="time", unit="us", allow_zero=True)
    # power and money
    tdp: float | None = spec_field("quantity", units="power", unit="w")
    #: Power drawn with nothing running (the whole system's where ``tdp`` is a system's); absent, the
    #: power model takes ``backends.defaults.IDLE_POWER_FRACTION`` of ``tdp`` (an H200's measured share)
    #: and says so for dataflow chips.
    idle_power: float | None = spec_field("quantity", units="power", unit="w")
    price_per_hour: float | None = spec_field("quantity", units="usd", unit="usd")
    #: What kind of price ``price_per_hour`` is (vocab.PRICE_BASES); comparisons say when bases differ.
    price_basis: str = spec_field("text", choices=PRICE_BASES)
    # achievable ceilings (what calibration updates)
    matmul_efficiency: float = spec_field("fraction", required=True)
    memory_efficiency: float = spec_field("fraction", required=True)
    launch_overhead: float = spec_field("quantity", units="time", unit="us", required=True,
                                        allow_zero=True)
    matmul_curve: tuple[tuple[float, float], ...] = spec_field("curve")
    bandwidth_curve: tuple[tuple[float, float], ...] = spec_field("curve")
    #: GEMMs with a small output side (min(M, N): decode, skinny layers) reach less than the
    #: square-GEMM curve at the same FLOPs; points are (min(M, N), factor on matmul_curve).
    matmul_skinny_curve: tuple[tuple[float, float], ...] = spec_field("curve")
    #: Direct convolutions (oneDNN, cuDNN) reach a different fraction of peak than GEMMs, by kernel
    #: size: points are (kernel area kh*kw, achieved fraction of peak). Absent: GEMM efficiency.
    conv_curve: tuple[tuple[float, float], ...] = spec_field("curve")
    #: Measured evaluations/s per transcendental function ("default" for the rest); absent, the
    #: cost model assumes 1/16 of the FP32 vector rate (NVIDIA's SFU ratio).
    transcendental_flops: Mapping[str, float] = spec_field("rates", units="flops", unit="gflops",
                                                           keys=TRANSCENDENTALS)
    #: Measured input elements/s of vector ops whose kernels are not a single streaming pass
    #: (norms, softmax, pooling, ...); ops listed here are timed by this rate, not FLOPs/vector peak.
    vector_op_flops: Mapping[str, float] = spec_field("rates", units="flops", unit="gflops", keys=VECTOR_OPS)
    # provenance
    sources: Mapping[str, str] = spec_field("sources")

    def __post_init__(self) -> None:
        if not self.FAMILY:
            raise TargetSpecError("Target is abstract; build a GpuTarget, TpuTarget, "
                                  "DataflowTarget or CpuTarget")
        normalize_fields(self)
        self._check_identity()
        if not self.matrix_flops:
            raise TargetSpecError("field 'matrix_flops': needs at least one dtype")
        extra = sorted(set(self.sparse_matrix_flops) - set(self.matrix_flops))
        if extra:
            raise TargetSpecError(f"field 'sparse_matrix_flops': {', '.join(extra)} "
                                  "has a sparse rate but no dense rate in matrix_flops")
        if self.price_basis and self.price_per_hour is None:
            raise TargetSpecError("field 'price_basis': a basis for a price that is not set")
        self._check_family()
        object.__setattr__(self, "sources", check_sources(self))

    def _check_identity(self) -> None:
        if self.family != self.FAMILY:
            raise TargetSpecError(f"field 'family': {type(self).__name__} is family "
                                  f"{self.FAMILY!r}, got {self.family!r}")
        for label, name in [("name", self.name)] + [(f"aliases[{i}]", a)
                                                    for i, a in enumerate(self.aliases)]:
            if not NAME_PATTERN.fullmatch(name):
                raise TargetSpecError(
                    f"field {label!r}: {name!r} is not a valid target name (lower-case "
                    "letters, digits and -._ , starting with a letter or digit)")
        if self.name in self.aliases or len(set(self.aliases)) != len(self.aliases):
            raise TargetSpecError("field 'aliases': repeats the name or an alias")

    def _check_family(self) -> None:
        """Family-specific cross-field checks; subclasses extend."""

    def scaled(self, **factors: float) -> Target:
        """A what-if copy with resources multiplied, e.g. ``t.scaled(hbm_bandwidth=2)``.

        Resource names are listed in :data:`narrowpipe.backends.RESOURCES`; the new target's name
        records the factors so reports never confuse it with the real chip.
        """
        from .scaling import scale_target  # scaling needs the schema classes defined first

        return scale_target(self, factors)

    def source(self, key: str) -> str:
        """Where a fact came from, e.g. ``t.source("matrix_flops.bf16")``."""
        try:
            return self.sources[key]
        except KeyError:
            raise TargetSpecError(f"target {self.name!r} has no value for {key!r}") from None

    def as_dict(self) -> dict[str, Any]:
        """Plain SI values keyed by field name (tables as dicts), for JSON reports."""
        out: dict[str, Any] = {}
        for name, _spec in specs(type(self)):
            value = getattr(self, name)
            out[name] = dict(value) if isinstance(value, Mapping) else value
        return out
