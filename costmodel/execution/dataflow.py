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
  bytes over the chip-to-chip bandwidth) at every chip boundary. Independent inputs (the sequences
  of the batch, or the tokens of a causal LM) stream through in ``m`` microbatches: the pipeline
  fills once (kernel and hop latencies, the first pass), then the slowest stage's pass repeats
  ``m - 1`` times, where a pass reads the stage's weights from fast memory again and does its share
  of the inputs' work; ``m`` is the count (a power of two, or all the inputs) that finishes first.
  The schedule keeps each kernel's split (:class:`.pipeline.Pipelining`) so that a timeline draws
  every pass of the run it charges (:func:`.pipeline.pass_schedule`).
* A tiered chip (weights in HBM behind the SRAM: SambaNova) can also split every block over the
  node's chips, tensor parallel (:mod:`.dataflow_tp`); the fastest layout wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import ceil

from ...backends import DataflowTarget
from ...ir import DimRole, DType, Op, Value, is_causal
from ..interpreter import CostTable
from ..kernels import Kernel
from ..sizes import values_bytes, weight_bytes
from .common import (
    KernelTime,
    matmul_efficiency,
    matrix_rate,
    memory_time,
    roofline,
    transcendental_rate,
    vector_rate,
    with_hop,
)
from .dataflow_tp import is_tiered, tensor_parallel_schedule
from .gemm import Gemm, attention_shape, grouped_gemm
from .pipeline import Pipelining, StageParts, pipelined_seconds
from .program import DeviceGroup, Program, Schedule
from .residual import residual_adds
from .routing import kernel_time

__all__ = ["DataflowModel", "Layout"]


@dataclass
class Layout:
    """One way to lay the program out: over ``chips`` chips (kernel name -> chip in ``chip_of``),
    streaming weights from the external tier or not; ``fits`` is False when it needs more chips
    than the device group has."""

    chips: int
    streaming: bool
    chip_of: dict[str, int] = field(default_factory=dict)
    microbatches: int = 1
    fits: bool = True
    notes: list[str] = field(default_factory=list)


def _microbatches(table: CostTable) -> int:
    """Independent inputs that stream through the chip pipeline: the sequences of the batch, or
    every token when all attention is causal (token t needs only the K/V of earlier tokens, which
    went through first), as in token-pipelined causal-LM prefill."""
    graph, b = table.graph, table.bindings
    batch = max(graph.role_size(DimRole.BATCH, b), 1)
    attn = [n for n in graph.nodes if n.op is Op.ATTENTION]
    if graph.dims_with_role(DimRole.SEQUENCE) and attn and all(is_causal(n) for n in attn):
        return batch * max(graph.role_size(DimRole.SEQUENCE, b), 1)
    return batch


def _weight_bytes(kernel: Kernel, table: CostTable) -> int:
    """The weights a streaming kernel pulls from the external tier: a grouped GEMM pulls only the
    experts some row reaches (under the analysis' expert balance), as its cost rule reads them."""
    weights = {v: None for v in kernel.inputs if v.kind.is_weight}
    anchor = kernel.anchor
    experts = anchor.inputs[1] if anchor.op is Op.GROUPED_DOT and len(anchor.inputs) > 1 else None
    if experts is not None and experts in weights:
        del weights[experts]
        return values_bytes(table, weights) + grouped_gemm(table, anchor).b_bytes
    return values_bytes(table, weights)


def _footprints(kernels: list[Kernel], table: CostTable) -> list[int]:
    """What each kernel places on its chip: the activations it produces and the weights it is the
    first to use. A weight shared by several kernels (a tied embedding and LM head) lives in one
    place, so it is counted once, where the layout first needs it."""
    placed: set[object] = set()
    out = []
    for k in kernels:
        new = [v for v in dict.fromkeys(k.inputs) if v.kind.is_weight and v not in placed]
        placed.update(new)
        out.append(values_bytes(table, new) + values_bytes(table, k.outputs))
    return out


@dataclass(frozen=True)
class _Units:
    """A dataflow chip's units under one layout: a chip's compiler balances its kernels over all its
    processing elements, so a kernel costs its work at the chip's full rates; a streaming layout
    also pays each kernel's weights at the external tier's bandwidth."""

    streaming: bool

    def gemm(self, kernel: Kernel, g: Gemm, program: Program, target: DataflowTarget) -> KernelTime:
        return self._matrix(kernel, g.dtype, program, target)

    def attention(self, kernel: Kernel, program: Program, target: DataflowTarget) -> KernelTime:
        return self._matrix(kernel, attention_shape(program.table, kernel).dtype, program, target)

    def _matrix(self, kernel: Kernel, dtype: DType, program: Program, target: DataflowTarget) -> KernelTime:
        c = kernel.cost
        rate = matrix_rate(target, dtype, program.options)
        compute = c.flops / (rate.flops_per_s * matmul_efficiency(target, c.flops))
        return self._finish(kernel, program, target, compute, rate.flops_per_s, "matrix units", rate.note)

    def vector(self, kernel: Kernel, program: Program, target: DataflowTarget) -> KernelTime:
        c = kernel.cost
        out = kernel.anchor.outputs[0] if kernel.anchor.outputs else None
        dtype = out.type.dtype if out is not None and out.type.dtype.is_float else DType.FP32
        rate = vector_rate(target, dtype)
        compute = c.flops / rate.flops_per_s if c.flops else 0.0
        return self._finish(kernel, program, target, compute, rate.flops_per_s, "vector units", rate.note)

    def _finish(self, kernel: Kernel, program: Program, target: DataflowTarget, compute: float, peak: float,
                unit: str, note: str) -> KernelTime:
        c = kernel.cost
        if c.transcendentals:
            compute += c.transcendentals / transcendental_rate(target)
        mem = memory_time(target, c.bytes)
        stream = 0.0
        if self.streaming and target.external_memory_bandwidth:
            stream = _weight_bytes(kernel, program.table) / target.external_memory_bandwidth
        return roofline(compute, max(mem, stream), 0.0, target.launch_overhead, unit, peak_flops=peak,
                        flops=c.flops, nbytes=c.bytes, bandwidth=target.memory_bandwidth, note=note)


def _microbatch_counts(inputs: int) -> list[int]:
    """Microbatch counts the compiler may pick for ``inputs`` independent inputs: powers of two up
    to it, and the count itself."""
    out = {inputs}
    m = 1
    while m < inputs:
        out.add(m)
        m *= 2
    return sorted(out)


#: How far (in kernels) a chip boundary may move from its equal-footprint place to cross fewer bytes.
_CUT_WINDOW = 8


def _crossing_by_position(kernels: list[Kernel], table: CostTable) -> list[float]:
    """Bytes that cross a cut before each kernel position: values written before it and read at or
    after it (a value from the graph's inputs has no writer and crosses nothing)."""
    written: dict[Value, int] = {}
    for i, k in enumerate(kernels):
        for v in k.outputs:
            written.setdefault(v, i)
    last_read: dict[Value, int] = {}
    for i, k in enumerate(kernels):
        if not k.is_free:
            for v in k.inputs:
                if written.get(v, i) < i:
                    last_read[v] = i
    diff = [0.0] * (len(kernels) + 2)
    for v, j in last_read.items():
        b = float(values_bytes(table, [v]))
        diff[written[v] + 1] += b
        diff[j + 1] -= b
    out, run = [], 0.0
    for p in range(len(kernels) + 1):
        run += diff[p]
        out.append(run)
    return out


def _boundary_bytes(kernels: list[Kernel], chip_of: dict[str, int], chips: int, table: CostTable) -> list[float]:
    """Bytes each chip boundary carries (index c: from chip c to c + 1): with the chips contiguous in
    program order, what crosses the cut before chip c + 1's first kernel (every value written on a
    chip at or before c and read on a later one, forwarded through the chips between)."""
    crossing = _crossing_by_position(kernels, table)
    first: dict[int, int] = {}
    for i, k in enumerate(kernels):
        first.setdefault(chip_of[k.name], i)
    return [crossing[first[c + 1]] if c + 1 in first else 0.0 for c in range(chips)]


def hop_seconds(nbytes: float, target: DataflowTarget) -> float:
    """One chip-to-chip transfer of ``nbytes``: latency plus bytes over the link."""
    latency = target.chip_to_chip_latency if target.chip_to_chip_latency is not None else (target.link_latency or 0.0)
    bw = target.chip_to_chip_bandwidth or target.scale_up_bandwidth or 0.0
    return latency + (nbytes / bw if bw else 0.0)


class DataflowModel:
    family = "dataflow"
    default_fusion = "full"

    def layouts(self, program: Program, target: DataflowTarget, limit: int | None) -> list[Layout]:
        """The layouts worth timing. Without weight streaming the chips are ceil(footprint / SRAM).
        With it, a model that does not fit one chip can either stream its weights into one chip from
        the external tier (the training layout) or span enough chips to keep everything on-chip (how
        wafer-scale inference serves a 70B model); both are candidates and the faster one wins. Only
        weights stream: the activations and a KV cache stay in the chip's fast memory, so streaming
        is a layout only while they fit there (and the weights fit the external tier)."""
        table = program.table
        weights = weight_bytes(table)
        rest = max(program.memory_required - weights, 0)
        cap = target.memory_capacity
        need = max(1, ceil(program.memory_required / cap))
        if not target.weight_streaming or need == 1:
            return [self._layout(program, need, False, limit, [])]
        what = (f"weights ({weights / 1e9:.3g} GB)" if rest <= cap * 0.5 else
                f"weights ({weights / 1e9:.3g} GB) with activations and KV cache ({rest / 1e9:.3g} GB)")
        out = []
        external = target.external_memory_capacity
        if rest <= cap and (not external or weights <= external):
            out.append(self._layout(program, 1, True, limit,
                                    [f"{what} exceed one chip's fast memory ({cap / 1e9:.3g} GB): weights streamed "
                                     f"from external memory"]))
        if not out or not limit or need <= limit:
            why = "" if out else (f"; streaming the weights would leave {rest / 1e9:.3g} GB of activations and KV "
                                  f"cache for one chip" if rest > cap else
                                  f"; the weights exceed the external tier ({external / 1e9:.3g} GB)")
            out.append(self._layout(program, need, False, limit,
                                    [f"{what} exceed one chip's fast memory ({cap / 1e9:.3g} GB): spread over "
                                     f"{need} chips{why}"]))
        return out

    def _layout(self, program: Program, chips: int, streaming: bool, limit: int | None,
                notes: list[str]) -> Layout:
        """Kernels in program order over the chips, contiguously, each chip taking about an equal
        share of the footprint. Each cut is moved, within a few kernels, to where the fewest bytes
        cross it, as a placer keeping a tensor with its readers would (a KV cache stays on the chip
        of the attention that reads it); a chip may then hold a little more than its share (the fit
        is the chips' total capacity against the total footprint)."""
        fits = not (limit and chips > limit)
        if not fits:
            notes.append(f"needs {chips} chips, more than the largest system ({limit})")
        kernels = program.kernels
        footprints = _footprints(kernels, program.table)
        per_chip = (sum(footprints) or 1) / chips
        cuts: list[int] = []
        if chips > 1:
            crossing = _crossing_by_position(kernels, program.table)
            start, n = 0, len(kernels)
            prefix = [0.0]
            for size in footprints:
                prefix.append(prefix[-1] + size)
            for b in range(1, chips):
                ideal = next((i for i in range(start + 1, n) if prefix[i] >= b * per_chip), n - 1)
                window = list(range(max(start + 1, ideal - _CUT_WINDOW), min(n - 1, ideal + _CUT_WINDOW) + 1)) \
                    or [min(max(ideal, start + 1), n)]
                cut = min(window, key=lambda p: (crossing[p], abs(p - ideal)))
                cuts.append(cut)
                start = cut
        chip_of: dict[str, int] = {}
        chip = 0
        for i, k in enumerate(kernels):
            while chip < len(cuts) and i >= cuts[chip]:
                chip += 1
            chip_of[k.name] = min(chip, chips - 1)
        return Layout(chips, streaming, chip_of, _microbatches(program.table), fits, notes)

    def run(self, program: Program, devices: DeviceGroup) -> Schedule:
        target = devices.target
        assert isinstance(target, DataflowTarget)
        limit = devices.count or target.max_chips
        runs: list[tuple[str, Schedule]] = [
            ("streaming weights into 1 chip" if layout.streaming else f"spreading over {layout.chips} chips",
             self._run(layout, program, target)) for layout in self.layouts(program, target, limit)]
        if is_tiered(target) and limit and limit > 1 and residual_adds(program.table.graph):
            # only where the blocks (and so the all-reduces) are found: a convnet's split is not modelled
            runs.append((f"tensor parallel over {limit} chips",
                         tensor_parallel_schedule(program, target, limit, _Units(False), True, [])))
        best = min((run for _, run in runs), key=lambda r: r.total_s)
        for where, run in runs:
            if run is not best:
                best.notes.append(f"{where} would take {run.total_s * 1e3:.4g} ms")
        if program.unmodeled_nodes:
            best.notes.append(f"{program.unmodeled_nodes} unmodeled node(s) are not timed")
        return best

    def _run(self, layout: Layout, program: Program, target: DataflowTarget) -> Schedule:
        """Each chip is a pipeline stage; a hop (latency + bytes over the link) follows each chip's
        last kernel, carrying what later chips read (:func:`_boundary_bytes`). The run streams its
        independent inputs through the stages in ``m`` microbatches (see :func:`pipelined_seconds`);
        the compiler picks the ``m`` that finishes first."""
        kernels, units = program.kernels, _Units(layout.streaming)
        times: list[KernelTime] = []
        stage = [0.0] * layout.chips
        parts = [StageParts() for _ in range(layout.chips)]
        fixed_s: list[float] = []
        reads_s: list[float] = []
        work_s: list[float] = []
        # one hop per chip boundary, after the chip's last kernel: it carries every value read on a
        # later chip (the residual stream, a layer's outputs), not what stays (a KV cache in place)
        carried = _boundary_bytes(kernels, layout.chip_of, layout.chips, program.table)
        last_on_chip = {layout.chip_of[k.name]: i for i, k in enumerate(kernels) if not k.is_free}
        for i, k in enumerate(kernels):
            kt = kernel_time(k, program, target, units)
            chip = layout.chip_of[k.name]
            hop_latency = 0.0
            if chip < layout.chips - 1 and last_on_chip.get(chip) == i:
                kt = with_hop(kt, hop_seconds(carried[chip], target))
                hop_latency = hop_seconds(0, target)
            # a kernel's fixed latency (and a hop's) is paid once, as the pipeline fills; reading its
            # weights from fast memory is paid by every microbatch that passes; the rest of its work
            # grows with the inputs it processes
            fixed = kt.overhead_s + hop_latency
            weights = 0.0 if layout.streaming else min(memory_time(target, _weight_bytes(k, program.table)),
                                                       kt.time_s - fixed)
            work = max(kt.time_s - fixed - weights, 0.0)
            parts[chip].add(fixed, weights, work)
            fixed_s.append(fixed)
            reads_s.append(weights)
            work_s.append(work)
            stage[chip] += kt.time_s
            times.append(kt)
        latency = sum(stage)
        m, total = min(((m, pipelined_seconds(parts, m)) for m in _microbatch_counts(layout.microbatches)),
                       key=lambda x: (x[1], x[0]))
        if latency > 0 and total != latency:
            times = [t.scaled(total / latency) for t in times]
        required = program.memory_required
        capacity = target.memory_capacity + (target.external_memory_capacity if layout.streaming else 0.0)
        plan = {"chips": layout.chips, "weight_streaming": layout.streaming, "stage_seconds": stage,
                "latency_s": latency, "microbatches": m, "inputs": layout.microbatches, "fits": layout.fits,
                "chip_of_kernel": layout.chip_of}
        return Schedule(times, total, layout.chips, layout.chip_of, float(required), float(capacity),
                        required <= capacity * layout.chips and layout.fits, layout.chips, layout.notes, plan,
                        pipelining=Pipelining(m, tuple(fixed_s), tuple(reads_s), tuple(work_s)))
