"""From measurements to a target: efficiency curves and measured ceilings beside theoretical peaks.

* ``launch_overhead``: the dispatch time of a one-element op.
* ``matmul_curve``: achieved / peak FLOP/s of square GEMMs, with the dispatch time taken out,
  as (FLOPs, efficiency) points, binned in log space; ``matmul_efficiency`` is its plateau.
* ``bandwidth_curve``: achieved / best bandwidth of eager elementwise adds (output allocation
  included, as every eager op pays it) by bytes moved; cache levels and page faults of large new
  outputs show as steps. ``memory_bandwidth`` is the best achieved and ``memory_efficiency`` the
  large-transfer plateau. Transfers so small that dispatch dominates (under 1.5x the dispatch
  overhead) carry no bandwidth information and are left out.
* ``matmul_skinny_curve``: for GEMMs with a small M, achieved efficiency over the square curve's
  at the same FLOPs, by min(M, N).
* ``matrix_flops.fp16`` (CPU): the fp16 GEMMs' rate over the fp32 curve at their FLOPs
  (:func:`fp16_peak`), so an fp16 model is timed at this CPU's fp16 rate, not its bf16 one.
* ``transcendental_flops``: evaluations/s of each function on cache-resident data.
* ``conv_curve``: achieved fraction of peak of direct convolutions, by kernel area, over the factors
  the CPU model multiplies it by (the GEMM curve's small-problem ramp, the skinny-GEMM factor at the
  output positions), so the model reproduces the measured convolutions.
* ``vector_op_flops``: input elements/s of norms, softmax, pooling and reductions.
* ``attention_curve``: achieved fraction of peak of the fused attention kernel, by key length.
* ``fresh_page_bandwidth``: bytes/s at which the OS faults in and zeroes a just-mapped buffer (a
  fresh fill minus a fill of mapped memory); the adds whose output is that large have this time
  taken out before they enter the bandwidth curve.

The same fit applies to a catalog chip (``base``): its peaks stay, its measured ceilings are
replaced, so users calibrate a chip with their own numbers.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
from collections.abc import Iterable

from ..backends import CpuTarget, Target
from ..backends.defaults import AMX_BF16_OPS_PER_CYCLE, default_for, default_value
from .depthwise_sweep import depthwise_times
from .host import HostCpu
from .pad_sweep import pad_plane_time, pad_row_time
from .robust import check_gemm_plateau, monotone, plausible_rates, robust_median
from .sweeps import Measurement
from .unaligned_sweep import fit_unaligned_curve, unaligned_source

__all__ = ["fit_curves", "host_target", "apply_measurements", "Curves", "fresh_page_bandwidth", "fp16_peak"]


@dataclasses.dataclass
class Curves:
    launch_overhead: float
    matmul_curve: tuple[tuple[float, float], ...]
    matmul_efficiency: float
    bandwidth_curve: tuple[tuple[float, float], ...]
    best_bandwidth: float
    memory_efficiency: float
    skinny_curve: tuple[tuple[float, float], ...] = ()
    transcendental: dict[str, float] = dataclasses.field(default_factory=dict)
    conv_curve: tuple[tuple[float, float], ...] = ()
    vector_ops: dict[str, float] = dataclasses.field(default_factory=dict)
    fresh_page_bandwidth: float | None = None
    attention_curve: tuple[tuple[float, float], ...] = ()
    gemm_grid: tuple[tuple[int, int, int, float], ...] = ()


def _binned(points: Iterable[tuple[float, float]], per_decade: int = 3) -> tuple[tuple[float, float], ...]:
    bins: dict[int, list[tuple[float, float]]] = {}
    for x, y in points:
        if x > 0 and y > 0:
            bins.setdefault(math.floor(math.log10(x) * per_decade), []).append((x, y))
    out = []
    for key in sorted(bins):
        xs, ys = zip(*bins[key])
        out.append((float(statistics.median(xs)), min(max(round(robust_median(ys), 4), 1e-4), 1.0)))
    return tuple(out)


def fit_curves(measurements: list[Measurement], peaks: dict[str, float], vector_peak: float | None = None) -> Curves:
    """Fit curves; ``peaks`` maps dtype -> the theoretical matrix FLOP/s the efficiencies refer to.
    Outliers are dropped, the GEMM curves made monotone and implausible values refused or left out
    (:mod:`.robust`); ``vector_peak`` (fp32 FLOP/s) is what function rates are judged against."""
    dispatch = [m.seconds for m in measurements if m.kind == "dispatch"]
    overhead = statistics.median(dispatch) if dispatch else 0.0
    curve_dtype = "fp32" if any(m.kind == "matmul" and m.dtype == "fp32" for m in measurements) else None
    mm = [m for m in measurements if m.kind == "matmul" and m.shape[0] == m.shape[1] == m.shape[2]
          and m.dtype in peaks and (curve_dtype is None or m.dtype == curve_dtype)]
    eff_points = [(float(m.flops), m.flops / (max(m.seconds - overhead, 1e-9) * peaks[m.dtype])) for m in mm]
    mcurve = monotone(_binned(eff_points))
    plateau = statistics.median([y for _, y in mcurve[-3:]]) if mcurve else 0.5
    if mcurve:
        check_gemm_plateau(plateau)
    fresh_bw = fresh_page_bandwidth(measurements)
    add_s = {id(m): _without_fresh_pages(m, fresh_bw) for m in measurements if m.kind == "add"}
    adds = [m for m in measurements if m.kind == "add" and add_s[id(m)] > 1.5 * overhead]
    bw_points = [(float(m.bytes), m.bytes / (add_s[id(m)] - overhead)) for m in adds]
    best = max((bw for _, bw in bw_points), default=1e10)
    bcurve = _binned(((x, bw / best) for x, bw in bw_points), per_decade=2)
    mem_eff = bcurve[-1][1] if bcurve else 1.0
    from ..costmodel.execution.common import interpolate
    skinny: dict[float, list[float]] = {}
    for m in measurements:
        if m.kind == "matmul" and m.dtype in peaks and not (m.shape[0] == m.shape[1] == m.shape[2]):
            side = float(min(m.shape[0], m.shape[1]))
            eff = m.flops / (max(m.seconds - overhead, 1e-9) * peaks[m.dtype])
            square = interpolate(mcurve, float(m.flops), plateau)
            skinny.setdefault(side, []).append(eff / square)
    scurve = monotone(tuple((side, min(max(round(robust_median(v), 4), 1e-4), 1.0))
                            for side, v in sorted(skinny.items())))
    trans = {m.kind.split(":", 1)[1]: m.flops / max(m.seconds - overhead, 1e-9)
             for m in measurements if m.kind.startswith("transcendental:")}
    vector_peak = vector_peak or peaks.get("fp32", 0.0)
    trans = plausible_rates(trans, vector_peak, "function") if vector_peak else trans
    if trans:
        trans["default"] = statistics.median(trans.values())
    conv: dict[float, list[float]] = {}
    for m in measurements:
        if m.kind == "conv" and m.dtype in peaks:
            area = float(m.shape[2] * m.shape[2])
            eff = m.flops / (max(m.seconds - overhead, 1e-9) * peaks[m.dtype])
            conv.setdefault(area, []).append(eff / _conv_factors(m, mcurve, plateau, scurve))
    ccurve = tuple((a, min(max(round(robust_median(v), 4), 1e-4), 1.0)) for a, v in sorted(conv.items()))
    vops = {m.kind.split(":", 1)[1]: m.flops / max(m.seconds - overhead, 1e-9)
            for m in measurements if m.kind.startswith("vector_op:")}
    return Curves(overhead, mcurve, round(min(max(plateau, 1e-3), 1.0), 4), bcurve, best,
                  round(min(max(mem_eff, 1e-3), 1.0), 4), scurve, trans, ccurve, vops, fresh_bw,
                  _attention_curve(measurements, peaks, overhead), _gemm_grid(measurements, peaks, overhead))


def _conv_factors(m: Measurement, mcurve: tuple[tuple[float, float], ...], plateau: float,
                  scurve: tuple[tuple[float, float], ...]) -> float:
    """:func:`narrowpipe.costmodel.execution.cpu.conv_factors` for a ``conv`` measurement (shape: in
    channels, out channels, kernel, stride, pixels; batch 1): the kernel-size curve is the measured
    efficiency over them, so the model gives the measured convolutions back."""
    from ..costmodel.execution.cpu import conv_factors
    _, _, k, stride, px = m.shape
    out = (px + 2 * (k // 2) - k) // stride + 1
    return max(conv_factors(mcurve, plateau, scurve, float(m.flops), out * out), 1e-6)


def _gemm_grid(measurements: list[Measurement], peaks: dict[str, float],
               overhead: float) -> tuple[tuple[int, int, int, float], ...]:
    """(M, N, K, achieved fraction of the matrix peak) of the GEMM grid measurements, dispatch
    taken out as for the square curve; empty unless they form a full grid (an interrupted run)."""
    points = {m.shape: min(max(round(m.flops / (max(m.seconds - overhead, 1e-9) * peaks[m.dtype]), 4), 1e-4), 1.0)
              for m in measurements if m.kind == "gemm_grid" and m.dtype in peaks}
    axes = [{s[j] for s in points} for j in range(3)]
    if not points or len(points) != len(axes[0]) * len(axes[1]) * len(axes[2]):
        return ()
    return tuple(sorted((s[0], s[1], s[2], e) for s, e in points.items()))


def _attention_curve(measurements: list[Measurement], peaks: dict[str, float],
                     overhead: float) -> tuple[tuple[float, float], ...]:
    """(keys, achieved fraction of the matrix peak) of the fused attention measurements."""
    points: dict[float, list[float]] = {}
    for m in measurements:
        if m.kind == "attention" and m.dtype in peaks:
            eff = m.flops / (max(m.seconds - overhead, 1e-9) * peaks[m.dtype])
            points.setdefault(float(m.shape[2]), []).append(eff)
    return tuple((k, min(max(round(robust_median(v), 4), 1e-4), 1.0)) for k, v in sorted(points.items()))


def fresh_page_bandwidth(measurements: list[Measurement]) -> float | None:
    """Bytes/s of fresh pages: a just-mapped buffer's fill minus an already-mapped one's, per byte
    (median over the measured sizes); None without such measurements."""
    fills = {m.shape: m.seconds for m in measurements if m.kind == "fill"}
    rates = [m.bytes / (m.seconds - fills[m.shape]) for m in measurements
             if m.kind == "fresh_fill" and m.shape in fills and m.seconds > fills[m.shape]]
    return float(statistics.median(rates)) if rates else None


def _without_fresh_pages(m: Measurement, fresh_bw: float | None) -> float:
    """An eager add's seconds less the fresh pages of its output (fp32, a new buffer each call)
    where the output is large enough to be mapped fresh: the bandwidth curve is streaming only."""
    out = 4 * m.shape[0]
    threshold = default_value("cpu", "fresh_page_threshold", None)
    return m.seconds - (out / fresh_bw if fresh_bw and out >= threshold else 0.0)


def _meminfo_bytes() -> float:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) if hasattr(os, "sysconf") else 16e9


def host_target(host: HostCpu, measurements: list[Measurement], name: str = "host") -> CpuTarget:
    """A CPU target for this machine: derived peaks, measured ceilings and curves, sources for all."""
    peaks = {"fp32": host.fp32_peak, "bf16": host.bf16_peak}
    # A derived peak below a measured rate is wrong (the clock the host reports is not the clock it
    # runs at): the fastest fp32 contraction, GEMM or direct convolution (oneDNN's can outrun the
    # BLAS GEMM), sets the peak, so no measured efficiency is clipped at 1.
    fastest = max((m.flops / m.seconds for m in measurements
                   if m.kind in ("matmul", "conv", "gemm_grid") and m.dtype == "fp32" and m.seconds > 0), default=0.0)
    raised = fastest > peaks["fp32"]
    peaks["fp32"] = max(peaks["fp32"], fastest)
    c = fit_curves(measurements, peaks, host.fp32_peak)
    bf16 = [m.flops / m.seconds for m in measurements if m.kind == "matmul" and m.dtype == "bf16"
            and m.shape[0] == m.shape[1] == m.shape[2]]
    bf16_source = None
    if bf16:
        # One GEMM curve serves both dtypes: the bf16 "peak" is its measured plateau over the fp32
        # curve's plateau efficiency, so curve x peak reproduces the bf16 rate actually reached.
        peaks["bf16"] = statistics.median(sorted(bf16)[-3:]) / c.matmul_efficiency
        bf16_source = "measured: bf16 GEMM plateau / fp32 plateau efficiency (calibrate)"
    fp16_source = None
    fp16 = fp16_peak(measurements, c)
    if fp16 is not None:
        peaks["fp16"] = fp16
        sides = ", ".join(sorted({str(m.shape[0]) for m in measurements if _square_fp16(m)}, key=int))
        fp16_source = (f"measured: fp16 GEMMs (square, {sides}; x @ W.T as nn.Linear runs them), the median of the "
                       "three largest over the fp32 curve's efficiency at their FLOPs (calibrate)")
    derived = (f"derived: {host.cores} cores x {host.simd_bits // 32} lanes x 2 (FMA) x {host.fma_units} FMA units"
               f" x {host.clock_hz / 1e9:.3g} GHz")
    bf16_derived = derived + (" x AMX" if host.amx else " x 2 (AVX512-BF16)" if host.bf16_simd else "")
    sources = {
        "matrix_flops.fp32": ("measured: the fastest fp32 GEMM or convolution calibrate ran, above the derived "
                              f"{host.fp32_peak / 1e9:.4g} GFLOP/s ({derived.removeprefix('derived: ')})"
                              if raised else derived),
        "vector_flops.fp32": derived,
        "matrix_flops.bf16": bf16_source or bf16_derived,
        **({"matrix_flops.fp16": fp16_source} if fp16_source else {}),
        "vector_flops.bf16": derived, "memory_capacity": "measured: /proc/meminfo MemTotal",
        "memory_bandwidth": "measured: best eager elementwise-add bandwidth (calibrate)",
        "memory_efficiency": "measured: largest-transfer add bandwidth / best (calibrate)",
        "matmul_efficiency": "measured: square-GEMM plateau / derived peak (calibrate)",
        "launch_overhead": "measured: median dispatch time of a one-element add (calibrate)",
        "matmul_curve": "measured: square GEMMs (calibrate)",
        "bandwidth_curve": "measured: eager elementwise adds, output allocation included (calibrate)",
        "matmul_skinny_curve": "measured: GEMMs with small M (calibrate)",
        "conv_curve": "measured: direct convolutions by kernel size (calibrate)",
        **{f"transcendental_flops.{k}": "measured: the function on cache-resident data (calibrate)"
           for k in c.transcendental},
        **{f"vector_op_flops.{k}": "measured: input elements/s of the eager op (calibrate)" for k in c.vector_ops},
        "scale_up_domain": "assumption: a single host", "memory_channels": "assumption: unknown in a VM; 1",
        "amx_ops_per_cycle": ("cpu flags (amx_bf16); 1,024 BF16 ops/cycle/core (INTEL-AMX)" if host.amx
                              else "cpu flags: no AMX"),
        "cores": host.sources.get("cores", "measured"), "clock_hz": host.sources.get("clock_hz", "assumption"),
        "simd_width_bits": host.sources.get("simd_width_bits", "cpu flags"),
        "fma_units": host.sources.get("fma_units", "assumption: 2"),
    }
    for key, value in (("matmul_skinny_curve", c.skinny_curve), ("matmul_curve", c.matmul_curve),
                       ("conv_curve", c.conv_curve), ("bandwidth_curve", c.bandwidth_curve)):
        if not value:
            sources.pop(key, None)
    extra: dict[str, object] = {}
    pad_row = pad_row_time(measurements)
    if pad_row is not None:
        extra["pad_row_time"] = pad_row
        sources["pad_row_time"] = ("measured: a one-column constant pad of 200,704 floats in rows of 7 minus in rows "
                                   "of 56, per row (calibrate)")
    pad_plane = pad_plane_time(measurements)
    if pad_plane is not None:
        extra["pad_plane_time"] = pad_plane
        sources["pad_plane_time"] = ("measured: 4096x7x7 floats padded by one in H and W minus the same rows of 7 "
                                     "padded in 2-D, per plane (calibrate)")
    depthwise = depthwise_times(measurements)
    if depthwise is not None:
        for term, seconds in zip(("depthwise_call_time", "depthwise_element_time", "depthwise_tap_time"), depthwise):
            extra[term] = seconds
            sources[term] = "measured: least-squares fit over single depthwise convolutions (calibrate)"
    if c.gemm_grid:
        extra["matmul_grid"] = c.gemm_grid
        sources["matmul_grid"] = "measured: fp32 GEMMs over a grid of M, N and K, weights cold (calibrate)"
    unaligned = fit_unaligned_curve(measurements)
    if unaligned:
        extra["matmul_unaligned_curve"] = unaligned
        sources["matmul_unaligned_curve"] = unaligned_source(measurements, unaligned)
    if c.attention_curve:
        extra["attention_curve"] = c.attention_curve
        sources["attention_curve"] = "measured: scaled_dot_product_attention by key length (calibrate)"
    if c.fresh_page_bandwidth:
        threshold = default_for("cpu", "fresh_page_threshold")
        assert threshold is not None
        extra["fresh_page_bandwidth"], extra["fresh_page_threshold"] = c.fresh_page_bandwidth, threshold[0]
        sources["fresh_page_bandwidth"] = ("measured: filling a just-mapped buffer minus an already-mapped one, "
                                           "per byte (calibrate)")
        sources["fresh_page_threshold"] = threshold[1]
    if host.l3_bytes:
        extra["onchip_capacity"] = host.l3_bytes
        sources["onchip_capacity"] = host.sources.get("onchip_capacity", "lscpu")
    return CpuTarget(
        name=name, family="cpu", vendor="host",
        display_name=f"{host.model} ({host.cores} thread{'s' if host.cores != 1 else ''}, calibrated)",
        notes="Calibrated on this machine by `narrowpipe calibrate`; "
              "raw measurements are in the .measurements.json beside it.",
        matrix_flops=peaks, vector_flops={"fp32": host.fp32_peak, "bf16": host.fp32_peak},
        memory_capacity=_meminfo_bytes(), memory_bandwidth=c.best_bandwidth, scale_up_domain=1,
        matmul_efficiency=c.matmul_efficiency, memory_efficiency=c.memory_efficiency,
        launch_overhead=c.launch_overhead, matmul_curve=c.matmul_curve, bandwidth_curve=c.bandwidth_curve,
        matmul_skinny_curve=c.skinny_curve, transcendental_flops=c.transcendental, conv_curve=c.conv_curve,
        vector_op_flops=c.vector_ops,
        cores=host.cores, clock_hz=host.clock_hz, simd_width_bits=host.simd_bits, fma_units=host.fma_units,
        amx_ops_per_cycle=AMX_BF16_OPS_PER_CYCLE if host.amx else 0, memory_channels=1, sources=sources, **extra)  # type: ignore[arg-type]


def _square_fp16(m: Measurement) -> bool:
    return m.kind == "matmul" and m.dtype == "fp16" and m.shape[0] == m.shape[1] == m.shape[2] and m.seconds > 0


def fp16_peak(measurements: list[Measurement], c: Curves) -> float | None:
    """The fp16 matrix "peak" that, times the fitted GEMM curve, gives back the largest fp16 GEMMs
    measured: the median over the three largest of each one's rate (dispatch taken out, as for the
    curve) over the curve's efficiency at its FLOPs and the skinny factor at its side (one curve
    serves every dtype; bf16's peak is the median of its top three rates too). The reference loop
    ramps up slower than BLAS (14 GFLOP/s at 256^3, 22 from 1024^3 here): its small GEMMs run
    slower than the curve says, as a fitted fp32 curve cannot tell. A CPU's fp16 rate is its
    own: native on AVX512-FP16 or AMX-FP16, and without them PyTorch's reference loop, one to two
    orders below bf16 (a 1024^3 ``F.linear`` at 22 GFLOP/s, ``torch.mm`` at 1.0, bf16 ~200 on one
    EPYC Zen 4 core; :func:`.sweeps.fp16_linear_cases`). None
    without fp16 measurements (an older file): the target then has no fp16 rate, and a report
    says which rate it used."""
    from ..costmodel.execution.common import interpolate
    def efficiency(m: Measurement) -> float:      # what the CPU model multiplies the peak by for this GEMM
        skinny = interpolate(c.skinny_curve, float(m.shape[0]), 1.0) if c.skinny_curve else 1.0
        return max(interpolate(c.matmul_curve, float(m.flops), c.matmul_efficiency) * skinny, 1e-4)
    top = sorted((m for m in measurements if _square_fp16(m)), key=lambda m: m.flops)[-3:]
    rates = [m.flops / (max(m.seconds - c.launch_overhead, 1e-9) * efficiency(m)) for m in top]
    return float(statistics.median(rates)) if rates else None


def apply_measurements(base: Target, measurements: list[Measurement], name: str | None = None) -> Target:
    """``base`` with its measured ceilings and curves replaced by a fit of ``measurements``."""
    peaks = dict(base.matrix_flops)
    if "fp32" not in peaks and "fp32" in base.vector_flops:
        peaks["fp32"] = base.vector_flops["fp32"]
    c = fit_curves(measurements, peaks)
    sources = dict(base.sources)
    fitted = {"matmul_efficiency": c.matmul_efficiency, "memory_efficiency": 1, "launch_overhead": 1,
              "matmul_curve": c.matmul_curve, "bandwidth_curve": c.bandwidth_curve,
              "matmul_skinny_curve": c.skinny_curve}
    for key, value in fitted.items():
        if value:
            sources[key] = "measured: user calibration (narrowpipe calibrate)"
        else:
            sources.pop(key, None)
    return dataclasses.replace(
        base, name=name or f"{base.name}-calibrated", aliases=(), display_name=f"{base.display_name} (calibrated)",
        matmul_efficiency=c.matmul_efficiency,
        memory_efficiency=min(1.0, c.best_bandwidth * c.memory_efficiency / base.memory_bandwidth),
        launch_overhead=c.launch_overhead, matmul_curve=c.matmul_curve, matmul_skinny_curve=c.skinny_curve,
        bandwidth_curve=tuple((x, min(1.0, y * c.best_bandwidth / base.memory_bandwidth))
                              for x, y in c.bandwidth_curve),
        sources=sources)
