"""What every execution model shares: kernel times, rate lookups with dtype fallbacks, efficiency
curves, and the roofline combination of compute, memory, communication and launch overhead.

Rates come from the target (datasheet peak x achievable efficiency); nothing here hard-codes a chip.
Where a target lacks a rate, the fallback is explicit and named in the kernel's ``note``.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from math import ceil
from typing import Any

from ...backends import Target
from ...backends.defaults import (
    DEQUANT_OPS_PER_WEIGHT,
    FP32_DEFAULT_PASSES,
    FP32_EMULATION_PASSES,
    FP32_MATMUL_PRECISIONS,
    FP32_REDUCED_EMULATION_PASSES,
    MIN_MATMUL_EFFICIENCY,
    MIN_MEMORY_EFFICIENCY,
    TRANSCENDENTAL_FRACTION,
    VECTOR_FRACTION,
)
from ...errors import NarrowpipeError
from ...ir import DType
from ..kernels import FUSION_MODES

__all__ = ["KernelTime", "Rate", "matrix_rate", "vector_rate", "transcendental_rate", "memory_time",
           "matmul_efficiency", "roofline", "interpolate", "COMPUTE", "MEMORY", "INTERCONNECT", "OVERHEAD",
           "BOUNDS", "TimingOptions", "ZERO_TIME", "bound_of", "with_hop", "causal_fraction",
           "attention_block_fraction", "dequant_time", "conv_options"]

COMPUTE, MEMORY, INTERCONNECT, OVERHEAD = "compute", "memory", "interconnect", "overhead"
BOUNDS = (COMPUTE, MEMORY, INTERCONNECT, OVERHEAD)

_WIDER = {"fp4": ("fp8_e4m3", "int8", "fp16", "bf16"), "int4": ("int8", "fp8_e4m3", "fp16", "bf16"),
          "fp8_e4m3": ("fp8_e5m2", "fp16", "bf16"), "fp8_e5m2": ("fp8_e4m3", "fp16", "bf16"),
          "int8": ("fp8_e4m3", "fp16", "bf16"), "bf16": ("fp16",), "fp16": ("bf16",),
          "tf32": ("fp32", "bf16", "fp16"), "fp32": ("tf32", "bf16", "fp16")}
#: Matrix units multiply 8- and 4-bit integers of either signedness at one rate (PTX ``mma`` takes
#: ``.u8``/``.s8`` operands, AMX ``TDPBUSD``/``TDPBSSD``, AVX-512 VNNI ``VPDPBUSD`` is u8 x s8), so an
#: unsigned operand (ONNX quantization's uint8 activations) runs at the signed type's listed rate.
_SIGNED = {"uint8": "int8", "uint4": "int4"}
_FLOAT_RATES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "fp4")


@dataclass(frozen=True)
class TimingOptions:
    """Choices that change predicted times (not counts): precision policy, sparsity, fusion."""

    allow_tf32: bool = False      # fp32 matmuls on TF32 tensor cores (torch's default is off)
    sparse: bool = False          # 2:4 structured-sparse weights where the chip supports it
    fusion: str | None = None     # None: the family's default ("full", CPU "none")
    #: A whole model run eagerly pays the host's per-op glue (a CPU's ``eager_op_overhead``) beside
    #: each op's dispatch; a bare op timed alone in a loop does not (``False``).
    eager_overhead: bool = True
    #: The network collectives run on (an ``execution.collectives.Topology``, e.g. a system's with its
    #: measured bus bandwidths); None: the chip's own scale-up and scale-out fields.
    topology: Any = None
    #: fp32 matmul precision (``--fp32-matmul``): "default" is the framework's (GPU: fp32 without
    #: TF32, as torch; TPU: one bf16 pass, as JAX and PyTorch/XLA), "high" TF32 or 3 bf16 passes
    #: (``allow_tf32`` asks for it too), "highest" full float32 (6 bf16 passes where no fp32 unit).
    fp32_matmul: str = "default"
    #: fp32 convolution precision (``--fp32-conv``), the same levels: "default" is the target's
    #: convolution library's own (``conv_fp32_as_tf32``: cuDNN on TF32 tensor cores, as PyTorch and
    #: TensorFlow leave it), else the matmul level, as JAX's one precision setting covers both.
    fp32_conv: str = "default"

    def __post_init__(self) -> None:
        """Refuse an unknown level or fusion mode, and ``allow_tf32`` beside a level that is not TF32's,
        up front (an unknown fusion mode was a raw ``ValueError`` from inside the fusion pass)."""
        if self.fusion is not None and self.fusion not in FUSION_MODES:
            raise NarrowpipeError(f"fusion {self.fusion!r} is not one of {', '.join(FUSION_MODES)} "
                                  "(or None: the family's default)")
        for what, level in (("matmul", self.fp32_matmul), ("convolution", self.fp32_conv)):
            if level not in FP32_MATMUL_PRECISIONS:
                raise NarrowpipeError(f"fp32 {what} precision {level!r} is not one of "
                                      + ", ".join(FP32_MATMUL_PRECISIONS))
        if self.allow_tf32 and self.fp32_matmul not in ("default", "high"):
            raise NarrowpipeError(f"--tf32 is fp32 matmul precision 'high'; it contradicts {self.fp32_matmul!r}")

    @property
    def fp32_level(self) -> str:
        """The fp32 matmul precision asked for, ``allow_tf32`` read as "high"."""
        return "high" if self.allow_tf32 else self.fp32_matmul


def conv_options(options: TimingOptions, target: Target) -> TimingOptions:
    """The options a convolution's rate is looked up under: its fp32 level as the matmul level.

    Frameworks set the two apart. PyTorch runs fp32 cuDNN convolutions on TF32 tensor cores by
    default (``torch.backends.cudnn.allow_tf32`` is True, ``torch.backends.cudnn.conv.fp32_precision``
    "tf32" in torch 2.13) while its fp32 matmuls stay full precision; timing an fp32 ResNet-50's
    convolutions on an A100's CUDA cores made it 3x slower than it runs. A target whose library does
    that says so (``conv_fp32_as_tf32``); ``--fp32-conv`` overrides it ("highest": cuDNN without TF32).
    """
    level = options.fp32_conv
    if level == "default":
        level = "high" if getattr(target, "conv_fp32_as_tf32", None) else options.fp32_level
    return replace(options, fp32_matmul=level, allow_tf32=False)


@dataclass(frozen=True)
class Rate:
    flops_per_s: float
    dtype: str
    note: str = ""
    runs_as: str = ""     # short form of a fallback for tables ("fp32 as 6x bf16"); "" when native


@dataclass(frozen=True)
class KernelTime:
    """Predicted time of one kernel, split into the terms the roofline combines."""

    time_s: float
    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float
    bound: str
    unit: str
    utilization: float
    executed_flops: float = 0.0   # work the hardware does, padding included
    note: str = ""
    traffic_bytes: float = 0.0    # memory traffic the memory term streams (a GEMM's L2 re-reads included)
    #: The factor :meth:`scaled` applied to the time and the work (a pipelined layout's share of its
    #: total): ``executed_flops / scale`` is the kernel's own work, what a count of the model's FLOPs
    #: compares with.
    scale: float = 1.0
    #: The share of the compute term's unit-time that does work: a GPU kernel's last wave that fills
    #: part of the SMs leaves the rest idle (items / (waves x SMs)); the power model draws compute
    #: power on the busy share only. ``executed_flops`` counts the work, never the idle SMs.
    busy_fraction: float = 1.0

    def scaled(self, k: float) -> KernelTime:
        return KernelTime(self.time_s * k, self.compute_s * k, self.memory_s * k, self.comm_s * k,
                          self.overhead_s * k, self.bound, self.unit, self.utilization,
                          self.executed_flops * k, self.note, self.traffic_bytes * k, self.scale * k,
                          self.busy_fraction)


#: The time of a kernel that does no work (views, unmodeled nodes): every term zero.
ZERO_TIME = KernelTime(0.0, 0.0, 0.0, 0.0, 0.0, MEMORY, "", 0.0)


def bound_of(compute_s: float, memory_s: float, comm_s: float, overhead_s: float) -> str:
    """The bound of a kernel: the largest of its terms (ties go to the earlier of :data:`BOUNDS`)."""
    terms = {COMPUTE: compute_s, MEMORY: memory_s, INTERCONNECT: comm_s, OVERHEAD: overhead_s}
    return max(terms, key=terms.get)  # type: ignore[arg-type]


def with_hop(kt: KernelTime, hop_s: float) -> KernelTime:
    """``kt`` followed by a transfer of ``hop_s`` to the next device, which cannot start before the
    kernel's output exists: the hop adds to the time and is the kernel's communication term."""
    return KernelTime(kt.time_s + hop_s, kt.compute_s, kt.memory_s, hop_s, kt.overhead_s,
                      bound_of(kt.compute_s, kt.memory_s, hop_s, kt.overhead_s), kt.unit, kt.utilization,
                      kt.executed_flops, kt.note, kt.traffic_bytes, kt.scale, kt.busy_fraction)


def causal_fraction(causal: bool, sq: int, sk: int, block: int) -> float:
    """Fraction of a causal attention's query x key blocks that run: with ``q`` query blocks of
    ``block`` rows on the diagonal, the blocks on and below it, (q + 1) / 2q (blocks above the
    diagonal are skipped, the diagonal ones run masked). 1 when not causal or not square."""
    q = ceil(sq / max(block, 1))
    return (q + 1) / (2 * q) if causal and sq == sk and q > 1 else 1.0


def attention_block_fraction(causal: bool, window: int | None, sq: int, sk: int, block_q: int,
                             block_k: int) -> float:
    """Fraction of an attention's ``block_q x block_k`` query x key blocks a FlashAttention-style
    kernel computes.

    Why: a kernel given a sliding window (FlashAttention's ``window_size``, what vLLM runs Mistral's and
    Gemma's local layers with) computes, for each query block, only the key blocks that meet some of
    its queries' windows; the blocks on the window's edges and the diagonal run masked, the rest are
    skipped. Query ``i`` of ``sq`` sits at key position ``p = i + sk - sq`` (the queries are the last
    ``sq`` positions: a prefill after a cache, a decode step) and sees keys ``p - window + 1 .. p``
    (``..sk - 1`` when not causal). The FLOP count is not discounted (the cost rules count the keys
    the node is handed, as torch's FlopCounterMode counts a masked SDPA in full); a kernel's executed
    FLOPs and time take this fraction. Without a window, or with one that reaches key 0 from every
    query (``window >= sk``), this is :func:`causal_fraction` on square blocks, unchanged (its
    convention: a causal attention whose queries are not all its keys runs every block).
    """
    if window is None or window >= sk:
        return causal_fraction(causal, sq, sk, block_q)
    return _window_blocks(causal, window, sq, sk, max(block_q, 1), max(block_k, 1))


@lru_cache(maxsize=1024)
def _window_blocks(causal: bool, window: int, sq: int, sk: int, bq: int, bk: int) -> float:
    """The exact count behind :func:`attention_block_fraction` for a window shorter than the keys:
    each query block runs the key blocks from the one holding its first query's first key to the
    one holding its last query's last key."""
    off, nq, nk = sk - sq, ceil(sq / bq), ceil(sk / bk)
    run = 0
    for qb in range(nq):
        first, last = qb * bq + off, min((qb + 1) * bq, sq) - 1 + off
        lo, hi = max(first - window + 1, 0), (min(last, sk - 1) if causal else sk - 1)
        run += hi // bk - lo // bk + 1 if hi >= lo else 0
    return run / (nq * nk) if nq and nk else 1.0


def matrix_rate(target: Target, dtype: DType, options: TimingOptions = TimingOptions()) -> Rate:
    """Dense (or 2:4 sparse) matrix-unit peak for ``dtype``, falling back to the nearest listed type.

    fp32 matmuls follow ``options.fp32_level`` (see :class:`TimingOptions`): on TF32 tensor cores for
    "high" where the chip has them; on the vector units where the chip lists an FP32 vector rate and no
    FP32 matrix rate (NVIDIA, torch's default without TF32); elsewhere (TPU, dataflow chips) as bf16
    (or fp16) passes, one on a TPU by its frameworks' default, three for "high", six for "highest" and
    for the dataflow chips' default (:data:`~narrowpipe.backends.defaults.FP32_DEFAULT_PASSES`). The
    fallback is named in the note, so a report says which ran.
    """
    name = _SIGNED.get(dtype.value, dtype.value)
    table = target.sparse_matrix_flops if options.sparse and target.sparse_matrix_flops else target.matrix_flops
    level = options.fp32_level
    if name == "fp32" and level == "high" and table.get("tf32", 0.0) > table.get("fp32", 0.0):
        return Rate(table["tf32"], "tf32", "fp32 matmul on TF32 tensor cores", "fp32 as tf32")
    if name == "fp32" and "fp32" not in table:
        if "fp32" in target.vector_flops:
            return Rate(target.vector_flops["fp32"], "fp32", "fp32 matmul on the vector units (no TF32)",
                        "fp32 on vector units")
        half = next((h for h in ("bf16", "fp16") if h in table), None)
        if half is not None:
            passes = {"high": FP32_REDUCED_EMULATION_PASSES, "highest": FP32_EMULATION_PASSES}.get(level) \
                or FP32_DEFAULT_PASSES.get(target.family, FP32_EMULATION_PASSES)
            how = (f"1 {half} pass, the framework default on {target.family.upper()} (JAX, PyTorch/XLA; "
                   "--fp32-matmul high runs 3, highest 6)" if passes == 1 else
                   f"{passes} {half} passes (--fp32-matmul high)" if passes == FP32_REDUCED_EMULATION_PASSES else
                   f"{passes} {half} passes, full float32 (--fp32-matmul highest)")
            return Rate(table[half] / passes, "fp32", f"no fp32 matrix rate: fp32 as {how}",
                        f"fp32 as {passes}x {half}")
    if name in table:
        return Rate(table[name], name)
    if name == "fp64":
        return _fp64_rate(target, options)
    if not dtype.is_float and not dtype.is_int:
        name = "fp32"
    for wider in _WIDER.get(name, ("bf16", "fp16", "fp32")):
        if wider in table:
            return Rate(table[wider], wider, f"no {name} rate: runs as {wider}", f"{name} as {wider}")
    if options.sparse and table is target.sparse_matrix_flops:
        return matrix_rate(target, dtype, replace(options, sparse=False))
    floats = [k for k in _FLOAT_RATES if k in table]
    pick = floats[0] if floats else max(table, key=table.get)  # type: ignore[arg-type]
    return Rate(table[pick], pick, f"no {name} rate: runs as {pick}", f"{name} as {pick}")


def _fp64_rate(target: Target, options: TimingOptions) -> Rate:
    """fp64 on a chip without an fp64 matrix rate: its fp64 vector rate where listed; else, with no
    fp64 unit in the catalog, full fp32's rate as a stated lower bound on the time (never a narrower
    type's: MI355X's missing fp64 fell back to its 2,500 TFLOP/s bf16)."""
    if "fp64" in target.vector_flops:
        return Rate(target.vector_flops["fp64"], "fp64", "no fp64 matrix rate: fp64 matmul on the vector units",
                    "fp64 on vector units")
    r = matrix_rate(target, DType.FP32, replace(options, fp32_matmul="highest", allow_tf32=False))
    return Rate(r.flops_per_s, r.dtype, f"no fp64 rate listed: timed at full fp32's rate ({r.note or r.dtype}), "
                "a lower bound on the time", "fp64 as fp32")


def vector_rate(target: Target, dtype: DType) -> Rate:
    """Non-matrix FLOP/s for ``dtype`` (fp32 rate for narrower types where none is listed)."""
    vf = target.vector_flops
    if dtype.value in vf:
        return Rate(vf[dtype.value], dtype.value)
    if "fp32" in vf:
        return Rate(vf["fp32"], "fp32")
    if vf:
        return Rate(max(vf.values()), "best")
    bf16 = target.matrix_flops.get("bf16") or target.matrix_flops.get("fp16") or max(target.matrix_flops.values())
    return Rate(bf16 * VECTOR_FRACTION, "assumed", f"no vector rate: assumed {VECTOR_FRACTION:.3g} of the matrix rate")


def transcendental_rate(target: Target, op: str | None = None) -> float:
    """Evaluations/s of a transcendental function: the target's measured rate for ``op`` (or its
    "default"), else :data:`TRANSCENDENTAL_FRACTION` of the FP32 vector rate."""
    table = target.transcendental_flops
    if table:
        rate = table.get(op or "default") or table.get("default")
        if rate:
            return rate
    return vector_rate(target, DType.FP32).flops_per_s * TRANSCENDENTAL_FRACTION


def interpolate(curve: tuple[tuple[float, float], ...], x: float, default: float) -> float:
    """Piecewise-linear in log(x) through measured (x, efficiency) points; flat beyond the ends."""
    if not curve:
        return default
    xs = [p[0] for p in curve]
    if x <= xs[0]:
        return curve[0][1]
    if x >= xs[-1]:
        return curve[-1][1]
    i = bisect.bisect_right(xs, x)
    (x0, y0), (x1, y1) = curve[i - 1], curve[i]
    t = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return y0 + t * (y1 - y0)


def matmul_efficiency(target: Target, flops: float, min_mn: int | None = None, dtype: str | None = None) -> float:
    """Achieved fraction of peak for a GEMM of ``flops``; ``min_mn`` (the smaller of M and N)
    applies the target's skinny-GEMM factor where it has one; ``dtype`` (the rate's: ``fp32`` or
    ``tf32``) selects a GPU's plateau for that unit where it lists one."""
    eff = interpolate(target.matmul_curve, flops, target.matmul_efficiency)
    plateau = getattr(target, f"matmul_efficiency_{dtype}", None) if dtype in ("fp32", "tf32") else None
    if plateau is not None:
        eff *= plateau / target.matmul_efficiency
    if min_mn is not None and target.matmul_skinny_curve:
        eff *= interpolate(target.matmul_skinny_curve, float(max(min_mn, 1)), 1.0)
    return max(eff, MIN_MATMUL_EFFICIENCY)


def memory_time(target: Target, nbytes: float, bandwidth: float | None = None) -> float:
    """Seconds to move ``nbytes`` at the achievable fraction of ``bandwidth`` (default: main memory)."""
    if nbytes <= 0:
        return 0.0
    bw = target.memory_bandwidth if bandwidth is None else bandwidth
    eff = max(interpolate(target.bandwidth_curve, nbytes, target.memory_efficiency), MIN_MEMORY_EFFICIENCY)
    return nbytes / (bw * eff)


def roofline(compute_s: float, memory_s: float, comm_s: float, overhead_s: float, unit: str,
             *, peak_flops: float = 0.0, flops: float = 0.0, nbytes: float = 0.0, bandwidth: float = 0.0,
             comm_bytes: float = 0.0, link_bandwidth: float = 0.0, executed_flops: float = 0.0,
             note: str = "", busy_fraction: float = 1.0) -> KernelTime:
    """Time = max(compute, memory, communication) + launch overhead; the largest term is the bound.

    ``utilization`` is the used fraction of the peak of the resource that binds (FLOP/s for compute,
    bytes/s for memory and interconnect; 0 when overhead binds). Compute counts the useful work: the
    FLOPs the kernel executes where that is less than the model's count (``executed_flops``: a causal
    attention's skipped blocks out; the model's full causal count over the executed time read 121%
    of the peak, clamped to 100%), and the model's count where the kernel executes more (tile and
    MXU padding is busy hardware doing no work the model needs: a 129-wide GEMM on 128-wide MXU
    folds reads its waste). It is not clamped: above 1 is a model bug to see.
    """
    time_s = max(compute_s, memory_s, comm_s) + overhead_s
    bound = bound_of(compute_s, memory_s, comm_s, overhead_s)
    if time_s <= 0:
        return replace(ZERO_TIME, bound=OVERHEAD, unit=unit, executed_flops=executed_flops, note=note,
                       busy_fraction=busy_fraction)
    executed = executed_flops or flops
    if bound == COMPUTE:
        useful = min(executed, flops) if flops > 0 else executed
        util = useful / (time_s * peak_flops) if peak_flops else 0.0
    elif bound == MEMORY:
        util = nbytes / (time_s * bandwidth) if bandwidth else 0.0
    elif bound == INTERCONNECT:
        util = comm_bytes / (time_s * link_bandwidth) if link_bandwidth else 0.0
    else:
        util = 0.0
    return KernelTime(time_s, compute_s, memory_s, comm_s, overhead_s, bound, unit, util, executed, note, nbytes,
                      1.0, busy_fraction)


def dequant_time(target: Target, dtype: DType, weights: float, passes: int) -> float:
    """Seconds to dequantize ``weights`` weight elements ``passes`` times (once per tile of output
    rows that loads them) on the vector units, :data:`DEQUANT_OPS_PER_WEIGHT` operations each: the
    cost a weight-only quantized matmul (int4/fp4/int8/fp8 weights, 16-bit activations) pays to
    feed its matrix units. Kernels overlap it with the matrix work, so callers take the larger."""
    if weights <= 0 or passes <= 0:
        return 0.0
    return DEQUANT_OPS_PER_WEIGHT * weights * passes / vector_rate(target, dtype).flops_per_s
