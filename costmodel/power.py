"""Energy from a power model by utilization: idle power plus a compute and a memory term.

Energy at TDP x time charges a memory-bound decode step as much as a saturating GEMM, which is
wrong by 2x or more: measured LLM decode at batch 1 draws well under half an H100's TDP. Each
kernel here draws ``idle + compute_w x u_compute + memory_w x u_memory`` (capped at TDP), where
``u`` is the fraction of the kernel's time that resource is busy at its achievable rate (the
schedule's ``compute_s / time_s``, counting only the kernel's useful FLOPs, not the padding a tile
adds, and ``(memory_s + comm_s) / time_s``). A kernel that saturates both
draws TDP; an idle gap (launch overhead) draws idle power. On a multi-device schedule every device
idles through the whole run and each kernel adds its dynamic power on the device it runs on, for as
long as that device is busy with it (:func:`busy_device_seconds`).

The two fractions and their sources are in :mod:`narrowpipe.backends.defaults`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..backends import Target
from ..backends.defaults import IDLE_POWER_FRACTION, MEMORY_POWER_FRACTION
from .execution import Program, Schedule
from .execution.common import KernelTime

__all__ = ["PowerModel", "power_model", "kernel_power", "schedule_energy", "busy_device_seconds", "idle_note"]


@dataclass(frozen=True)
class PowerModel:
    """Watts of one device: at idle, and above idle at full compute / full memory utilization."""

    idle_w: float
    compute_w: float
    memory_w: float
    tdp_w: float


def power_model(target: Target) -> PowerModel | None:
    """The target's power model, or None when it has no TDP (nothing to scale)."""
    if not target.tdp:
        return None
    idle = min(target.idle_power, target.tdp) if target.idle_power is not None else IDLE_POWER_FRACTION * target.tdp
    memory = MEMORY_POWER_FRACTION * target.tdp
    return PowerModel(idle, target.tdp - idle - memory, memory, target.tdp)


def idle_note(target: Target) -> str:
    """What a dataflow chip's energy rests on when its file gives no idle power: the idle share
    measured on an H200, an assumption there (a 23 kW CS-3 system or a Groq card has its own,
    unpublished, idle draw, and the 'most per joule' verdicts lean on it). Empty where the chip
    gives one, has no TDP, or is not a dataflow chip (GPUs, TPUs and CPUs borrow the share as
    ``backends.defaults.IDLE_POWER_FRACTION`` documents)."""
    if not target.tdp or target.idle_power is not None or target.family != "dataflow":
        return ""
    watts = IDLE_POWER_FRACTION * target.tdp
    return (f"energy: assumption: idle power {IDLE_POWER_FRACTION:.1%} of TDP ({watts:,.0f} W), "
            f"an H200's measured share; {target.name} gives no idle power of its own (idle_power_w)")


def kernel_power(kt: KernelTime, pm: PowerModel, useful_flops: float | None = None) -> float:
    """Average watts of one device while ``kt`` runs. With ``useful_flops``, the compute term counts
    only that share of the executed work: a decode GEMV padded to a 128-row tile does 1/128 of the
    multiply-adds the schedule's compute time assumes, and the padding is not a power draw a real
    GEMV kernel has (it runs on far fewer lanes). Compute power is drawn over the busy share of the
    compute term only (``busy_fraction``: a last wave that fills 4 of 132 SMs runs on 4)."""
    if kt.time_s <= 0:
        return pm.idle_w
    compute_s = kt.compute_s * kt.busy_fraction   # SMs a last wave leaves idle draw no compute power
    executed = kt.executed_flops / kt.scale if kt.scale > 0 else kt.executed_flops   # the kernel's own work
    if useful_flops is not None and executed > useful_flops:
        compute_s *= useful_flops / executed
    u_compute = min(1.0, compute_s / kt.time_s)
    u_memory = min(1.0, (kt.memory_s + kt.comm_s) / kt.time_s)
    return min(pm.tdp_w, pm.idle_w + pm.compute_w * u_compute + pm.memory_w * u_memory)


def busy_device_seconds(schedule: Schedule) -> list[float]:
    """Device-seconds each kernel keeps devices busy, in program order. A pipelined layout's
    ``times`` are shares of the pipelined total, not busy times (:class:`.execution.Schedule`):
    each chip a kernel occupies is busy ``fixed + m x reads + work``
    (:class:`.execution.pipeline.Pipelining`), more than its share when the microbatches re-read
    the weights (gpt2 on 4 Groq chips in 64 microbatches: 14.3 ms busy against 6.6 ms of shares).
    A sharded layout's ``times`` are one device's, and ``shards`` devices run each kernel at once."""
    pipe = schedule.pipelining
    if pipe is not None:
        m = pipe.microbatches
        return [sum(f + m * r + w for (_chip, _share, f, r, w) in pieces) * schedule.shards
                for pieces in pipe.pieces]
    return [kt.time_s * schedule.shards for kt in schedule.times]


def schedule_energy(program: Program, schedule: Schedule, target: Target) -> float | None:
    """Joules of the whole run over every device of the schedule, or None without a TDP: every
    device idles through the run, and each kernel adds its power above idle over the device-seconds
    it keeps busy (its power from its own utilizations, which a pipelined layout's uniform scaling
    of the times leaves unchanged)."""
    pm = power_model(target)
    if pm is None:
        return None
    busy = busy_device_seconds(schedule)
    # a pipelined kernel's power from its own terms (its share of the run keeps the fill apart)
    own = schedule.pipelining.own if schedule.pipelining is not None and schedule.pipelining.own else schedule.times
    dynamic = sum(seconds * (kernel_power(kt, pm, k.cost.flops) - pm.idle_w)
                  for k, kt, seconds in zip(program.kernels, own, busy, strict=True))
    return schedule.devices * schedule.total_s * pm.idle_w + dynamic
