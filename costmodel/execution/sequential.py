"""Families that run a program's kernels one after another on one device (GPU, TPU, CPU).

The schedule is the sum of the kernel times on device 0. Whether the program fits is its resident
bytes against one device's memory; when it does not, the schedule says how many devices would hold
it (the time stays that of one device until the placement planner shards the program over a group).
"""

from __future__ import annotations

from math import ceil
from typing import Any

from ..kernels import Kernel
from .common import MEMORY, KernelTime
from .gemm import Gemm
from .program import DeviceGroup, Program, Schedule
from .routing import kernel_times
from .vector import vector_kernel_time

__all__ = ["NO_FIT", "SequentialModel", "one_device_schedule"]

#: How a schedule's note that the run does not fit begins; the summary rewrites it with the reserve
#: it holds the fit to (costmodel/summary.py), so one output gives one device count.
NO_FIT = "does not fit: "


class SequentialModel:
    """Base of the single-device families: :meth:`run` routes each kernel to a hook
    (:meth:`gemm`, :meth:`attention`, :meth:`vector`) that the family implements."""

    family = ""
    default_fusion = "full"
    vector_unit = "vector units"

    def run(self, program: Program, devices: DeviceGroup) -> Schedule:
        target = devices.target
        return one_device_schedule(program, target, kernel_times(program, target, self))

    def gemm(self, kernel: Kernel, g: Gemm, program: Program, target: Any) -> KernelTime:
        raise NotImplementedError

    def attention(self, kernel: Kernel, program: Program, target: Any) -> KernelTime:
        raise NotImplementedError

    def kernel_overhead(self, target: Any, program: Program) -> float:
        """Host time each launched kernel pays on top of its work: the launch (dispatch) overhead."""
        return float(target.launch_overhead)

    def bandwidth(self, target: Any, nbytes: float) -> float:
        """Bytes/s a kernel moving ``nbytes`` streams at: main memory unless a family knows better."""
        return target.memory_bandwidth

    def vector(self, kernel: Kernel, program: Program, target: Any) -> KernelTime:
        return vector_kernel_time(kernel, target, self.vector_unit, self.kernel_overhead(target, program),
                                  bandwidth=self.bandwidth(target, kernel.cost.bytes), table=program.table)


def one_device_schedule(program: Program, target: Any, times: list[KernelTime]) -> Schedule:
    """Every kernel on device 0, in order; fit against one device's memory."""
    required = program.memory_required
    capacity = target.memory_capacity
    fits = required <= capacity
    needed = max(1, ceil(required / capacity))
    notes = []
    if program.unmodeled_nodes:
        notes.append(f"{program.unmodeled_nodes} unmodeled node(s) are not timed")
    if not fits:
        notes.append(f"{NO_FIT}{required / 1e9:.3g} GB needed, {capacity / 1e9:.3g} GB per device; "
                     f"needs >= {needed} devices (time shown is for one device)")
    notes.extend(reread_notes(program, times))
    return Schedule(times, sum(t.time_s for t in times), 1, {k.name: 0 for k in program.kernels},
                    float(required), float(capacity), fits, needed, notes)


#: A memory-bound kernel streaming this many times the bytes its op counts gets a note (assumption:
#: below it the difference is a partial sum or an epilogue, not re-reads worth explaining).
REREAD_RATIO = 1.5


def reread_notes(program: Program, times: list[KernelTime], top: int = 3) -> list[str]:
    """The memory-bound kernels whose memory term streams far more than their op's bytes (operand
    tiles re-read past the L2): the report's bytes and intensity count each operand once, so a
    GEMM listed at 5,460 FLOP/B and memory-bound contradicted itself without the traffic it ran."""
    rows = [(t.time_s, k.name, t.traffic_bytes, k.cost.bytes) for k, t in zip(program.kernels, times)
            if t.bound == MEMORY and k.cost.bytes > 0 and t.traffic_bytes > REREAD_RATIO * k.cost.bytes]
    rows.sort(reverse=True)
    return [f"{name}: memory-bound on {traffic / 1e9:.3g} GB of memory traffic, {traffic / nbytes:.1f}x the "
            f"{nbytes / 1e9:.3g} GB its operands and result take once (the bytes column): operand tiles re-read "
            "past the L2" for _, name, traffic, nbytes in rows[:top]]
