"""How measured time is judged: the thresholds, an op's bound, the run's label, and the advice
that names what would move each.

The rules are those in :mod:`.diagnose`'s docstring; they live apart from the costing and the trace
walk so the numbers that decide a verdict (and the words that explain it) can be read in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import NarrowpipeError
from ...ir import DType
from ..execution.common import COMPUTE, INTERCONNECT, MEMORY, OVERHEAD, bound_of

if TYPE_CHECKING:
    from .report import OpStat, UnmodeledStat

__all__ = ["OVERHEAD_UTILIZATION", "LONG_CALL_LAUNCHES", "LOW_COMPUTE_UTILIZATION", "RUN_LABELS", "HOST_COPY",
           "LATENCY", "UNMODELED_LABEL", "Timeline", "Machine", "op_bound", "run_label", "op_advice", "run_advice",
           "unmodeled_names", "gemm_alignment", "pct", "TOO_FAST", "share_of_peak", "SLOW_DTYPE_RATIO", "slow_dtypes"]

#: Below this fraction of both peak FLOP/s and peak bandwidth, an op is bound by overhead.
OVERHEAD_UTILIZATION = 0.05
#: An overhead-bound op whose calls last longer than this many launch overheads is latency-bound, not launch-bound.
LONG_CALL_LAUNCHES = 20
#: A compute-bound matmul below this fraction of peak gets shape and precision advice.
LOW_COMPUTE_UTILIZATION = 0.5
#: Utilization above which an op is called faster than the target allows. Above 1, not at it: a
#: calibrated target's rates (a CPU's transcendental functions, its GEMM plateau) are medians of
#: measured runs, and a later run beats a median by a few percent without anything being wrong.
TOO_FAST = 1.1
#: The run label when ops without a cost rule take more time than any bucket: what bounds them is unknown.
UNMODELED_LABEL = "unmodeled"
RUN_LABELS = {"launch": "input/CPU-launch bound", "latency": "latency-bound (long calls far below both peaks)",
              "memory": "memory-bound", "compute": "compute-bound", "interconnect": "interconnect-bound",
              UNMODELED_LABEL: "mostly unmodeled ops"}
#: The bound of host<->device copies (an input-pipeline cost, counted with launch time).
HOST_COPY = "host-copy"
#: The bound of an op doing work that stays below both thresholds in calls longer than
#: :data:`LONG_CALL_LAUNCHES` launch overheads: its time is the kernel's own (serial loops, scattered
#: access, too little parallel work), which no launch, dispatch or input-pipeline fix moves.
LATENCY = "latency"


@dataclass(frozen=True)
class Timeline:
    """Wall-clock facts of the trace window (seconds): what ran when, overlaps and gaps."""

    window_s: float
    busy_s: float
    idle_s: float
    compute_s: float
    comm_s: float
    overlap_s: float


@dataclass(frozen=True)
class Machine:
    """What advice may assume about where the trace ran and the target it is judged on: CUDA and
    TF32 words only for a GPU trace on a GPU target, bf16 only where the target runs it faster."""

    gpu_trace: bool        # the trace recorded device kernels
    family: str            # the target's family: gpu, tpu, cpu, dataflow
    tf32: bool             # the target has a TF32 matrix rate
    faster_bf16: bool      # the target's bf16 matrix rate beats its fp32 one
    fp8: bool = False      # the target has an fp8 matrix rate
    #: A CPU's vector width (its ``simd_width_bits``, 512 for AMX tile rows); None where unknown or not a CPU.
    simd_bits: int | None = None
    #: The target is a calibration of the host (``calibrate`` wrote it): "calibrate it" is no advice.
    calibrated_host: bool = False
    #: (dtype, its matrix rate over fp32's) for the narrow types the target runs at under
    #: :data:`SLOW_DTYPE_RATIO` of its fp32 rate (a CPU without native bf16/fp16 GEMMs: QA's AVX2 host
    #: ran bf16 at 2.2 GFLOP/s against 55 in fp32): there the advice is fp32, not a narrower type.
    slow_dtypes: tuple[tuple[str, float], ...] = ()

    @property
    def cuda(self) -> bool:
        return self.gpu_trace and self.family == "gpu"


def op_bound(compute_s: float, memory_s: float, time_s: float, long_calls: bool = False,
             free: bool = False) -> tuple[str, float, float]:
    """(bound, compute utilization, memory utilization): below both thresholds, latency for an op
    doing work in long calls and overhead otherwise; else the roof the op would hit first.

    ``memory_s`` is the op's bytes at the bandwidth the target reaches for its transfer sizes (the
    execution model's, :attr:`.cost.Costed.reach_memory_s`), not at the raw peak: a CPU's DRAM
    stream reaches a few percent of its cache-resident best, and against that best a streaming
    add at full DRAM speed read as latency-bound."""
    uc = compute_s / time_s if time_s > 0 else 0.0
    um = memory_s / time_s if time_s > 0 else 0.0
    if max(uc, um) < OVERHEAD_UTILIZATION:
        return (LATENCY if long_calls and not free else OVERHEAD), uc, um
    return bound_of(compute_s, memory_s, 0.0, 0.0), uc, um


def run_label(tl: Timeline, by_bound: dict[str, float], gpu: bool) -> tuple[str, list[str]]:
    """The run's label by the rules in :mod:`.diagnose`'s docstring, with the numbers that decided it."""
    ms = lambda x: f"{x * 1e3:.3g} ms"  # noqa: E731
    buckets = {"launch": launch_parts(tl, by_bound)["total"], "latency": by_bound[LATENCY],
               "memory": by_bound[MEMORY], "compute": by_bound[COMPUTE]}
    where = "device" if gpu else "host (no op running)"
    reasons = [f"window {ms(tl.window_s)}; {where} idle {ms(tl.idle_s)} ({pct(tl.idle_s, tl.window_s)})",
               "time by bound: " + ", ".join(f"{k} {ms(v)}" for k, v in by_bound.items() if v > 0)]
    if tl.comm_s > 0 and tl.comm_s >= tl.compute_s:
        reasons.insert(0, f"communication busy {ms(tl.comm_s)} >= compute busy {ms(tl.compute_s)} "
                          f"({pct(tl.overlap_s, tl.comm_s)} of it overlapped)")
        return "interconnect", reasons
    comm = f"; communication {ms(tl.comm_s)} < compute {ms(tl.compute_s)}" if tl.comm_s else ""
    listed = ", ".join(f"{k} {ms(v)}" for k, v in buckets.items())
    unmodeled = by_bound.get("unmodeled", 0.0)
    if unmodeled > max(buckets.values()):    # what bounds most of the time is unknown: say so
        reasons.insert(0, f"largest part: unmodeled ops {ms(unmodeled)} (no cost rule: work unknown), more than "
                          f"any bucket: {listed}{comm}")
        return UNMODELED_LABEL, reasons
    if max(buckets.values()) <= 0:
        raise NarrowpipeError("the trace has no time to judge: every bucket and unmodeled op is 0 ms")
    label = max(buckets, key=buckets.get)  # type: ignore[arg-type]
    # "latency 696 ms of launch 48.1 ms, latency 696 ms, ..." read as one garbled phrase (QA)
    reasons.insert(0, f"largest bucket: {label} {ms(buckets[label])} (every bucket: {listed}){comm}")
    return label, reasons


def launch_parts(tl: Timeline, by_bound: dict[str, float]) -> dict[str, float]:
    """What fills the launch bucket, part by part (and their ``total``): the advice names the largest."""
    parts = {"idle": tl.idle_s, OVERHEAD: by_bound[OVERHEAD], HOST_COPY: by_bound[HOST_COPY],
             "dispatch": by_bound["dispatch"]}
    return {**parts, "total": sum(parts.values())}


def share_of_peak(x: float) -> str:
    """A share of a peak as people read it: never above 100% (faster than the peak is a wrong
    target or a wrong count, which the notes say)."""
    return f"{x:.1%}" if x <= TOO_FAST else ">100% (faster than the peak)"


def pct(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def op_advice(bound: str, group: str, dtype: str, uc: float, free: bool = False,
              machine: Machine | None = None, gemm: tuple[int, int, int] | None = None,
              memory_note: str = "") -> tuple[str, ...]:
    """What would move an op, in the words engineers use, for the shapes, dtype and machine the trace
    records: padding advice only for dims that are not aligned, TF32 only for a CUDA trace on a GPU
    target with a TF32 rate, bf16 only where the target runs it faster. ``memory_note`` says how
    the op's bandwidth compares with what the target reaches (a memory bound's first words)."""
    m = machine or Machine(True, "gpu", True, True)
    heavy = group in ("contraction", "convolution", "attention")
    if bound == INTERCONNECT:
        return ("overlap it with compute (DDP bucketing, FSDP prefetch)", "bucket small collectives into fewer, "
                "larger ones", "send bf16 instead of fp32; keep the group inside the NVLink domain or use a "
                "faster link")
    if bound == HOST_COPY:
        return ("pin host memory and copy with non_blocking=True", "prefetch the next batch on a side stream "
                "(DataLoader pin_memory, more workers)", "device-to-host copies are syncs: avoid .item()/.cpu() "
                "in the loop")
    if bound == LATENCY:
        return ("long calls far below both peaks: latency-bound (too little parallel work, serial loops, "
                "scattered access)", "give it more parallel work (bigger batch) or a better kernel or algorithm "
                "(torch.compile)")
    if bound == OVERHEAD:
        if free:
            return ("views and allocations cost only dispatch: drop needless reshapes/copies",)
        if not m.gpu_trace:
            return ("per-op dispatch dominates: give each op more work (bigger batch/tensors)",
                    "fewer small ops: fuse them (torch.compile)")
        return ("tiny kernels: CUDA graphs or torch.compile(mode='reduce-overhead')", "fuse small ops "
                "(torch.compile) and give each launch more work (bigger batch)")
    lead = f"{memory_note}; " if memory_note else ""
    if bound == MEMORY:
        if group == "contraction":
            return (lead + "memory-bound matmul (few rows per weight read): batch more rows (larger batch, "
                    "batched decode)", "quantize the weights (int8/fp8/int4) to cut bytes")
        if group == "attention":
            return (lead + "use a fused attention kernel (SDPA flash/efficient backends)",
                    "keep the KV cache in bf16/fp8")
        return (lead + f"memory-bound {group}: fuse it with its neighbours (torch.compile)",
                "lower precision (bf16) halves its bytes" if dtype in ("fp32", "fp64") else
                "avoid materializing intermediates (views instead of copies)")
    if heavy and uc < LOW_COMPUTE_UTILIZATION:
        return _low_compute_advice(uc, dtype, m, gemm)
    if heavy:
        slow = _slow_dtype_tip(dtype, m)
        if slow:
            return (f"near the {dtype} roof, which is low here: {slow}",)
        # a narrower dtype only where the target runs one faster (a CPU without bf16 units runs it slower)
        faster = "fp8 or 2:4 sparsity, " if m.fp8 else "" if m.slow_dtypes else "a narrower dtype, "
        return (f"near the compute roof: {faster}fewer FLOPs, or a faster chip",)
    return (f"compute-bound {group} (vector/transcendental units): fuse it with the elementwise chain it is in "
            "(torch.compile; an optimizer step: its fused=True or foreach implementation) or use a cheaper "
            "approximation",)


def gemm_alignment(dtype: str, family: str, simd_bits: int | None = None) -> tuple[int, str]:
    """(multiple, why) each GEMM dim should be for ``dtype``'s matrix units on ``family``: NVIDIA's
    tensor cores want dims in multiples of 16 bytes (8 fp16/bf16, 16 int8/fp8, 4 TF32 values: NVIDIA
    Matrix Multiplication Background User's Guide, "Tensor Core Requirements"); a TPU's MXU is 128
    wide (design.md); a CPU's GEMM micro-kernels work in its vectors (``simd_bits``: 256 on AVX2,
    512 on AVX-512 or an AMX tile row; 512 when the target does not say) and mask a ragged tail."""
    try:
        size = max(DType.parse(dtype).bits // 8, 1)
    except (ValueError, KeyError):
        size = 4
    if family == "gpu":
        return 16 // size, "tensor-core tiles"
    if family == "tpu":
        return 128, "the MXU's width"
    bits = simd_bits or 512
    return max(bits // 8 // size, 1), f"a {bits}-bit vector's lanes"


def _low_compute_advice(uc: float, dtype: str, m: Machine, gemm: tuple[int, int, int] | None) -> tuple[str, ...]:
    """A heavy op well below the compute roof: padding only where a recorded dim is misaligned, a small
    problem only where one is small, precision only where the machine has a faster one."""
    tips: list[str] = []
    head = f"compute-bound at {uc:.0%} of peak"
    slow = _slow_dtype_tip(dtype, m)
    if slow:       # the first thing to move: the dtype, not the kernel
        tips.append(f"{head}: {slow}")
    if gemm is not None and m.family != "dataflow":
        multiple, why = gemm_alignment(dtype, m.family, m.simd_bits)
        ragged = [f"{n}={v}" for n, v in zip("MNK", gemm) if v % multiple]
        if ragged:
            tips.append(f"{head}: {', '.join(ragged)} not a multiple of {multiple} ({dtype}, {why}): pad/align it")
        elif m.family in _TILED_FAMILIES and min(gemm) < _SMALL_GEMM_DIM:
            tips.append(f"{head}: a small GEMM ({'x'.join(map(str, gemm))}, M x N x K): too little work to fill "
                        "the chip: batch more rows or fuse it with its neighbours")
    if not tips:
        shape = f" ({'x'.join(map(str, gemm))}, dims aligned)" if gemm is not None else ""
        where = ("check which kernel ran (cuBLAS/cuDNN heuristics, torch.backends.cudnn.benchmark)" if m.cuda else
                 "check the BLAS and thread count in use (torch.get_num_threads(), against the threads the target "
                 "was calibrated at)" if m.calibrated_host else
                 "check the BLAS and thread count in use (torch.get_num_threads()), or calibrate the target on "
                 "this machine")
        tips.append(f"{head}{shape}: the kernel falls short of the target's rate: {where}")
    if dtype == "fp32":
        if m.cuda and m.tf32:
            tips.append("fp32 matmul: use bf16 autocast or TF32 (torch.backends.cuda.matmul.allow_tf32)")
        elif m.faster_bf16:
            device = "cuda" if m.cuda else "cpu"
            tips.append(f"fp32 matmul: bf16 runs faster on this target (torch.autocast('{device}', "
                        "dtype=torch.bfloat16))")
    return tuple(tips)


#: A GEMM dim below this leaves matrix units idle however it is aligned (one 128-wide tile or MXU pass).
_SMALL_GEMM_DIM = 128
#: The families whose matrix units work in such tiles (GPU thread-block tiles, TPU MXU passes). A CPU
#: core's GEMM micro-kernel is a few vectors wide: QA's 8192x64x288 convolution GEMM ran at 63% of an
#: AVX2 core's peak, no "small GEMM" (its lanes are the alignment rule's).
_TILED_FAMILIES = frozenset({"gpu", "tpu"})
#: A narrow dtype whose matrix rate is under this share of fp32's is slow on the target: advise fp32.
SLOW_DTYPE_RATIO = 0.5


def slow_dtypes(rates: Mapping[str, float]) -> tuple[tuple[str, float], ...]:
    """(dtype, rate / fp32 rate) of the narrow float types in ``rates`` slower than
    :data:`SLOW_DTYPE_RATIO` of fp32's: the types to advise against (:attr:`Machine.slow_dtypes`)."""
    fp32 = rates.get("fp32", 0.0)
    if fp32 <= 0:
        return ()
    return tuple((k, rates[k] / fp32) for k in ("bf16", "fp16") if 0 < rates.get(k, 0.0) < SLOW_DTYPE_RATIO * fp32)


def _slow_dtype_tip(dtype: str, m: Machine) -> str:
    """Words for a matmul in a dtype the target runs far slower than fp32 ("" if it does not)."""
    ratio = dict(m.slow_dtypes).get(dtype)
    if ratio is None:
        return ""
    return (f"{dtype} matmuls run at {ratio:.0%} of this target's fp32 rate (no native {dtype} matrix units): "
            f"run them in fp32 (no {dtype} autocast here)")


def unmodeled_names(unmodeled: list[UnmodeledStat]) -> str:
    """The unmodeled ops that matter, with their shares of op time: the top three of at least 1%
    (the top one whatever its share)."""
    named = [u for u in unmodeled[:3] if u.share >= 0.01] or unmodeled[:1]
    return ", ".join(f"{u.name} {u.share:.0%}" for u in named)


def run_advice(label: str, machine: Machine, tl: Timeline, by_bound: dict[str, float], mfu: float,
               ops: list[OpStat], unmodeled: list[UnmodeledStat] | None = None) -> list[str]:
    """What would move the run, from what filled its bucket (then the top three ops' own advice)."""
    out: list[str] = []
    gpu = machine.gpu_trace
    if label == UNMODELED_LABEL:
        names = unmodeled_names(unmodeled or [])
        out.append(f"most of the time is in ops without a cost rule ({names}): the diagnosis cannot say what bounds "
                   "them; time them on their own (torch.profiler, torch.utils.benchmark) or call them less")
    elif label == "interconnect":
        out += ["overlap communication with compute (DDP bucket_cap_mb, FSDP prefetch, async tensor parallel)",
                "fewer, larger collectives; bf16 gradients; keep tensor parallel inside the NVLink domain"]
    elif label == "launch":
        out += _launch_advice(gpu, tl, by_bound)
    elif label == "latency":
        out += _latency_advice(ops)
    elif label == "memory":
        out.append("fuse elementwise chains (torch.compile), use bf16 activations and fp8/int8 weights, batch "
                   "weight-bound matmuls")
    else:
        out.append(_compute_advice(machine, mfu))
    top_names = [o.name for o in ops[:3]]
    for o in ops[:3]:   # one name at several shapes (five aten::linear) is told apart by its shapes
        shapes = f" [{o.shapes}]" if top_names.count(o.name) > 1 and o.shapes else ""
        out.append(f"{o.name}{shapes} ({o.bound}, {o.share:.0%} of op time): {o.advice[0]}")
    return out


def _compute_advice(machine: Machine, mfu: float) -> str:
    """A compute-bound run near the roof needs fewer FLOPs, a narrower dtype or a faster chip; far
    below it (MFU under :data:`LOW_COMPUTE_UTILIZATION`) the kernels fall short of the roof, which
    shapes, kernel choice and precision move first (a 16% MFU run told "beyond the roof" was wrong)."""
    faster = [name for name, has in (("bf16", machine.faster_bf16), ("TF32", machine.cuda and machine.tf32),
                                     ("fp8", machine.fp8)) if has]
    narrower = f"{'/'.join(faster)} matmuls" if faster else ""
    head = f"MFU {share_of_peak(mfu)}"
    if mfu >= LOW_COMPUTE_UTILIZATION:
        return f"{head}, near the roof: " + (f"{narrower}; " if narrower else "") + \
            "beyond it only fewer FLOPs or a faster chip help"
    where = ("cuBLAS/cuDNN's kernel choice (torch.backends.cudnn.benchmark)" if machine.cuda else
             "the BLAS and thread count in use (torch.get_num_threads())")
    return (f"{head}, far below the roof: the matmul kernels fall short of the peak: look at their shapes (the top "
            f"ops' advice) and {where}" + (f", and use {narrower}" if narrower else ""))


#: A part of the launch bucket at least this share of it gets its own advice (the largest always does).
_PART_SHARE = 0.25


def _launch_advice(gpu: bool, tl: Timeline, by_bound: dict[str, float]) -> list[str]:
    """Advice for each part that filled the launch bucket, largest first: idle gaps, tiny ops, host
    copies and dispatch are moved by different fixes (a run of one big host copy needs no CUDA graphs)."""
    parts = launch_parts(tl, by_bound)
    total = parts.pop("total")
    of = lambda x: f"{pct(x, tl.window_s)} of the window"  # noqa: E731
    words = {
        "idle": (f"the GPU is idle {of(tl.idle_s)}: CUDA graphs / torch.compile(mode='reduce-overhead'), a bigger "
                 "batch, DataLoader(num_workers>0, pin_memory=True), no host syncs (.item(), .cpu()) in the loop"
                 if gpu else f"no op runs {of(tl.idle_s)}: the time is Python or the input pipeline; move loading "
                 "to DataLoader workers, batch more work per op, torch.compile"),
        OVERHEAD: (f"tiny kernels take {of(parts[OVERHEAD])}: CUDA graphs / torch.compile(mode='reduce-overhead'), "
                   "fuse small ops, give each launch more work (bigger batch)" if gpu else
                   f"ops too small for their dispatch take {of(parts[OVERHEAD])}: give each op more work (bigger "
                   "batch/tensors), fewer ops (torch.compile)"),
        HOST_COPY: (f"host<->device copies take {of(parts[HOST_COPY])}: pin host memory and copy with "
                    "non_blocking=True, prefetch the next batch on a side stream, no .item()/.cpu() syncs"),
        "dispatch": (f"framework dispatch (wrapper ops, the autograd engine) takes {of(parts['dispatch'])}: "
                     "fewer, larger ops (torch.compile), no needless views and reshapes"),
    }
    ranked = sorted(parts, key=lambda k: -parts[k])
    return [words[k] for i, k in enumerate(ranked) if parts[k] > 0 and (i == 0 or parts[k] >= _PART_SHARE * total)]


def _latency_advice(ops: list[OpStat]) -> list[str]:
    """Advice for long calls far below both peaks: their own kernels are slow, which nothing about
    launches or the input pipeline moves; the model's prediction says whether it expected that."""
    slow = [o for o in ops if o.bound == LATENCY]
    t = sum(o.time_s for o in slow)
    predicted = sum(o.predicted_s or 0.0 for o in slow)
    names = ", ".join(dict.fromkeys(o.name for o in slow[:3]))
    ms = lambda x: f"{x * 1e3:.3g} ms"  # noqa: E731
    verdict = "it expects kernels this slow" if predicted >= t / 2 else "it does not explain their time"
    return [f"long calls far below both peaks take {ms(t)} ({names}): the kernels' own time (serial loops, "
            "scattered access, too little parallel work), not launches or input; give them more parallel work, a "
            "better kernel or algorithm (torch.compile), or call them less",
            f"the target's model predicts {ms(predicted)} for them against {ms(t)} measured: {verdict}"]
