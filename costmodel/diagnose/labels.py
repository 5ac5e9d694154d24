"""How measured time is judged: the thresholds, an op's bound, the run's label, and the advice
that names what would move each.

The rules are those in :mod:`.diagnose`'s docstring; they live apart from the costing and the trace
walk so the numbers that decide a verdict (and the words that explain it) can be read in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..execution.common import COMPUTE, INTERCONNECT, MEMORY, OVERHEAD, bound_of

if TYPE_CHECKING:
    from .report import OpStat

__all__ = ["OVERHEAD_UTILIZATION", "LONG_CALL_LAUNCHES", "LOW_COMPUTE_UTILIZATION", "RUN_LABELS", "HOST_COPY",
           "LATENCY", "Timeline", "op_bound", "run_label", "op_advice", "run_advice", "pct"]

#: Below this fraction of both peak FLOP/s and peak bandwidth, an op is bound by overhead.
OVERHEAD_UTILIZATION = 0.05
#: An overhead-bound op whose calls last longer than this many launch overheads is latency-bound, not launch-bound.
LONG_CALL_LAUNCHES = 20
#: A compute-bound matmul below this fraction of peak gets shape and precision advice.
LOW_COMPUTE_UTILIZATION = 0.5
RUN_LABELS = {"launch": "input/CPU-launch bound", "latency": "latency-bound (long calls far below both peaks)",
              "memory": "memory-bound", "compute": "compute-bound", "interconnect": "interconnect-bound"}
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


def op_bound(compute_s: float, memory_s: float, time_s: float, long_calls: bool = False,
             free: bool = False) -> tuple[str, float, float]:
    """(bound, compute utilization, memory utilization): below both thresholds, latency for an op
    doing work in long calls and overhead otherwise; else the roof the op would hit first at peak."""
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
    label = max(buckets, key=buckets.get)  # type: ignore[arg-type]
    comm = f"; communication {ms(tl.comm_s)} < compute {ms(tl.compute_s)}" if tl.comm_s else ""
    reasons.insert(0, f"largest bucket: {label} {ms(buckets[label])} of "
                      + ", ".join(f"{k} {ms(v)}" for k, v in buckets.items()) + comm)
    return label, reasons


def launch_parts(tl: Timeline, by_bound: dict[str, float]) -> dict[str, float]:
    """What fills the launch bucket, part by part (and their ``total``): the advice names the largest."""
    parts = {"idle": tl.idle_s, OVERHEAD: by_bound[OVERHEAD], HOST_COPY: by_bound[HOST_COPY],
             "dispatch": by_bound["dispatch"]}
    return {**parts, "total": sum(parts.values())}


def pct(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def op_advice(bound: str, group: str, dtype: str, uc: float, free: bool = False, gpu: bool = True) -> tuple[str, ...]:
    """What would move an op, in the words engineers use."""
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
        if not gpu:
            return ("per-op dispatch dominates: give each op more work (bigger batch/tensors)",
                    "fewer small ops: fuse them (torch.compile)")
        return ("tiny kernels: CUDA graphs or torch.compile(mode='reduce-overhead')", "fuse small ops "
                "(torch.compile) and give each launch more work (bigger batch)")
    if bound == MEMORY:
        if group == "contraction":
            return ("memory-bound matmul (few rows per weight read): batch more rows (larger batch, batched "
                    "decode)", "quantize the weights (int8/fp8/int4) to cut bytes")
        if group == "attention":
            return ("use a fused attention kernel (SDPA flash/efficient backends)", "keep the KV cache in bf16/fp8")
        return (f"memory-bound {group}: fuse it with its neighbours (torch.compile)",
                "lower precision (bf16) halves its bytes" if dtype in ("fp32", "fp64") else
                "avoid materializing intermediates (views instead of copies)")
    if heavy and uc < LOW_COMPUTE_UTILIZATION:
        tips = [f"compute-bound at {uc:.0%} of peak: pad/align M, N, K to multiples of 8 (16-bit) or 16 (fp8), "
                "ideally 64/128", "larger matmuls fill the chip better (batch more)"]
        if dtype == "fp32":
            tips.insert(1, "fp32 matmul: use bf16 autocast or TF32 (torch.backends.cuda.matmul.allow_tf32)")
        return tuple(tips)
    if heavy:
        return ("near the compute roof: fp8 or 2:4 sparsity, fewer FLOPs, or a faster chip",)
    return (f"compute-bound {group} (vector/transcendental units): fuse it into the matmul epilogue or use a "
            "cheaper approximation",)


def run_advice(label: str, gpu: bool, tl: Timeline, by_bound: dict[str, float], mfu: float,
               ops: list[OpStat]) -> list[str]:
    """What would move the run, from what filled its bucket (then the top three ops' own advice)."""
    out: list[str] = []
    if label == "interconnect":
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
        out.append(f"MFU {mfu:.0%}: bf16/TF32/fp8 matmuls with dims aligned to 64/128; beyond the roof only fewer "
                   "FLOPs or a faster chip help")
    for o in ops[:3]:
        out.append(f"{o.name} ({o.bound}, {o.share:.0%} of op time): {o.advice[0]}")
    return out


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
