"""Dataflow-ASIC execution model (Groq LPU, Cerebras WSE, SambaNova RDU): the graph laid out in space.

* Capacity decides the chips: without weight streaming (Groq), weights and activations must fit in
  the chips' fast memory (SRAM), so a model larger than one chip spans ceil(bytes / capacity) chips;
  with weight streaming (Cerebras MemoryX, SambaNova DDR) one chip streams the weights that do not
  fit from the external tier, at its bandwidth.
* Placement is the plan: kernels are laid out in program order over the chips, contiguously, each
  chip taking an equal share of the footprint (its weights plus the activations it produces).
  A chip's compiler balances its kernels over its processing elements, so a kernel costs its work
  at the chip's full rates (matrix or vector FLOP/s, fast-memory bandwidth, streaming bandwidth).
* A chip is a pipeline stage. Latency is the sum of the stages plus a hop (latency + activation
  bytes over the chip-to-chip bandwidth) at every chip boundary; with ``m`` independent inputs (the
  sequences of the batch, or the tokens of a causal LM) streaming through, the run takes
  latency / m + (m - 1) / m x the slowest stage.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from math import ceil, prod

from ...backends import DataflowTarget
from ...ir import DType, Value
from ..interpreter import CostTable
from ..kernels import Kernel
from .collectives import collective_time
from .common import (KernelTime, TimingOptions, matmul_efficiency, matrix_rate, memory_time, roofline,
                     transcendental_rate, vector_rate)
from .gemm import attention_shape, kernel_gemms

__all__ = ["DataflowModel", "DataflowPlan"]


@dataclass
class DataflowPlan:
    chips: int
    streaming: bool
    chip_of: dict[str, int] = field(default_factory=dict)        # kernel name -> chip
    stage_s: list[float] = field(default_factory=list)           # per chip, hops included
    latency_s: float = 0.0
    microbatches: int = 1
    fits: bool = True
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"chips": self.chips, "weight_streaming": self.streaming, "stage_seconds": self.stage_s,
                "latency_s": self.latency_s, "microbatches": self.microbatches, "fits": self.fits,
                "chip_of_kernel": self.chip_of}


def _microbatches(table: CostTable) -> int:
    """Independent inputs that stream through the chip pipeline: the sequences of the batch, or
    every token when all attention is causal (token t needs only the K/V of earlier tokens, which
    went through first), as in token-pipelined causal-LM prefill."""
    from ...ir import Op, is_causal
    b = table.bindings
    batch = max(int(b.get("batch", 1)), 1)
    attn = [n for n in table.graph.nodes if n.op is Op.ATTENTION]
    if "seq" in b and attn and all(is_causal(n) for n in attn):
        return batch * max(int(b["seq"]), 1)
    return batch


def _bytes(values: Iterable[Value], table: CostTable) -> int:
    return sum(v.type.dtype.nbytes(prod(table.shapes[v])) for v in values)


def _weight_bytes(kernel: Kernel, table: CostTable) -> int:
    return _bytes((v for v in kernel.inputs if v.kind.is_weight), table)


def _footprint(kernel: Kernel, table: CostTable) -> int:
    """What a kernel places on its chip: its weights and the activations it produces."""
    return _weight_bytes(kernel, table) + _bytes(kernel.outputs, table)



class DataflowModel:
    family = "dataflow"
    default_fusion = "full"

    def plans(self, kernels: list[Kernel], table: CostTable, target: DataflowTarget) -> list[DataflowPlan]:
        """The layouts worth timing. Without weight streaming the chips are ceil(footprint / SRAM).
        With it, a model that does not fit one chip can either stream its weights into one chip from
        the external tier (the training layout) or span enough chips to keep them on-chip (how
        wafer-scale inference serves a 70B model); both are candidates and the faster one wins."""
        graph = table.graph
        weights = _bytes(graph.weights, table)
        acts = table.peak_activation_bytes
        cap = target.memory_capacity
        need = max(1, ceil((weights + acts) / cap))
        if not target.weight_streaming or need == 1:
            return [self._layout(kernels, table, target, need, False, [])]
        out = [self._layout(kernels, table, target, 1, True,
                            [f"weights ({weights / 1e9:.3g} GB) exceed one chip's fast memory ({cap / 1e9:.3g} GB): "
                             f"streamed from external memory"])]
        if not target.max_chips or need <= target.max_chips:
            out.append(self._layout(kernels, table, target, need, False,
                                    [f"weights ({weights / 1e9:.3g} GB) exceed one chip's fast memory "
                                     f"({cap / 1e9:.3g} GB): spread over {need} chips"]))
        return out

    def _layout(self, kernels: list[Kernel], table: CostTable, target: DataflowTarget, chips: int,
                streaming: bool, notes: list[str]) -> DataflowPlan:
        fits = not (target.max_chips and chips > target.max_chips)
        if not fits:
            notes.append(f"needs {chips} chips, more than the largest system ({target.max_chips})")
        chip_of: dict[str, int] = {}
        footprints = [_footprint(k, table) for k in kernels]
        per_chip = (sum(footprints) or 1) / chips
        cum = 0.0
        for k, size in zip(kernels, footprints):
            chip_of[k.name] = min(chips - 1, int(cum // per_chip)) if chips > 1 else 0
            cum += size
        return DataflowPlan(chips, streaming, chip_of, [0.0] * chips, 0.0, _microbatches(table), fits, notes)

    def time_kernel(self, kernel: Kernel, table: CostTable, target: DataflowTarget, options: TimingOptions,
                    streaming: bool = False) -> KernelTime:
        if kernel.kind == "collective":
            return collective_time(kernel.anchor, kernel.cost, target)
        c = kernel.cost
        gemms = kernel_gemms(table, kernel)
        if gemms or kernel.kind == "attention":
            dtype = gemms[0].dtype if gemms else attention_shape(table, kernel).dtype
            rate = matrix_rate(target, dtype, options)
            peak = rate.flops_per_s
            compute = c.flops / (peak * matmul_efficiency(target, c.flops))
            unit = "matrix units"
        else:
            out = kernel.anchor.outputs[0] if kernel.anchor.outputs else None
            dtype = out.type.dtype if out is not None and out.type.dtype.is_float else DType.FP32
            rate = vector_rate(target, dtype)
            peak = rate.flops_per_s
            compute = c.flops / peak if c.flops else 0.0
            unit = "vector units"
        if c.transcendentals:
            compute += c.transcendentals / transcendental_rate(target)
        mem = memory_time(target, c.bytes)
        stream = 0.0
        if streaming and target.external_memory_bandwidth:
            stream = _weight_bytes(kernel, table) / target.external_memory_bandwidth
        return roofline(compute, max(mem, stream), 0.0, target.launch_overhead, unit, peak_flops=peak,
                        flops=c.flops, nbytes=c.bytes, bandwidth=target.memory_bandwidth, note=rate.note)

    def hop(self, nbytes: float, target: DataflowTarget) -> float:
        latency = target.chip_to_chip_latency if target.chip_to_chip_latency is not None else (target.link_latency or 0.0)
        bw = target.chip_to_chip_bandwidth or target.scale_up_bandwidth or 0.0
        return latency + (nbytes / bw if bw else 0.0)

    def run(self, kernels: list[Kernel], table: CostTable, target: DataflowTarget,
            options: TimingOptions) -> tuple[list[KernelTime], float, DataflowPlan]:
        runs = [self._run(plan, kernels, table, target, options) for plan in self.plans(kernels, table, target)]
        best = min(runs, key=lambda r: r[1])
        for _, total, plan in runs:
            if plan is not best[2]:
                layout = "streaming weights into 1 chip" if plan.streaming else f"spreading over {plan.chips} chips"
                best[2].notes.append(f"{layout} would take {total * 1e3:.4g} ms")
        return best

    def _run(self, plan: DataflowPlan, kernels: list[Kernel], table: CostTable, target: DataflowTarget,
             options: TimingOptions) -> tuple[list[KernelTime], float, DataflowPlan]:
        times: list[KernelTime] = []
        stage = [0.0] * plan.chips
        for i, k in enumerate(kernels):
            kt = KernelTime(0.0, 0.0, 0.0, 0.0, 0.0, "memory", "", 0.0) if k.is_free else \
                self.time_kernel(k, table, target, options, plan.streaming)
            chip = plan.chip_of[k.name]
            nxt = next((kernels[j] for j in range(i + 1, len(kernels)) if not kernels[j].is_free), None)
            if nxt is not None and plan.chip_of[nxt.name] != chip:
                out_bytes = _bytes(k.outputs, table)
                h = self.hop(out_bytes, target)
                terms = {"compute": kt.compute_s, "memory": kt.memory_s, "interconnect": h, "overhead": kt.overhead_s}
                kt = KernelTime(kt.time_s + h, kt.compute_s, kt.memory_s, h, kt.overhead_s,
                                max(terms, key=terms.get), kt.unit, kt.utilization,  # type: ignore[arg-type]
                                kt.executed_flops, kt.note)
            stage[chip] += kt.time_s
            times.append(kt)
        latency = sum(stage)
        m = plan.microbatches
        total = latency / m + (m - 1) / m * max(stage, default=0.0)
        plan.stage_s, plan.latency_s = stage, latency
        if latency > 0 and total != latency:
            times = [t.scaled(total / latency) for t in times]
        return times, total, plan
