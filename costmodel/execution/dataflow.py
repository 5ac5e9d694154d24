"""Dataflow-ASIC execution model (Groq LPU, Cerebras WSE, SambaNova RDU): the graph laid out in space.

* Capacity decides the chips: without weight streaming (Groq), weights and activations must fit in
  the chips' fast memory (SRAM), so a model larger than one chip spans ceil(bytes / capacity) chips;
  with weight streaming (Cerebras MemoryX, SambaNova DDR) one chip streams the weights that do not
  fit from the external tier, at its bandwidth.
* Placement is the plan: kernels are laid out in program order over the chips, contiguously, each
  chip taking an equal share of the footprint (its weights plus the activations it produces) and
  never more than its fast memory; a kernel that does not fit what is left of a chip is split over
  consecutive chips (:mod:`.dataflow_layout`). The fit is per chip: the fullest chip's bytes.
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

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from math import ceil

from ...backends import DataflowTarget
from ...ir import DimRole, DType, Op, is_causal
from ..interpreter import CostTable
from ..kernels import Kernel
from ..sizes import values_bytes, weight_bytes
from .common import (
    KernelTime,
    bound_of,
    conv_options,
    matmul_efficiency,
    matrix_rate,
    memory_time,
    roofline,
    transcendental_rate,
    vector_rate,
    with_hop,
)
from .dataflow_layout import (
    Layout,
    at_peak,
    boundary_bytes,
    crossing_by_position,
    cuts,
    footprint_parts,
    footprints,
    place,
    produced_for_later,
)
from .dataflow_stream import STREAM_SOURCE, in_stream
from .dataflow_tp import is_tiered, tensor_parallel_schedule
from .dataflow_train import is_training, training_layouts
from .gemm import Gemm, attention_shape, grouped_gemm
from .pipeline import Pipelining, StageParts, pipelined_seconds, shares_of_run
from .program import DeviceGroup, Program, Schedule
from .residual import residual_adds
from .routing import kernel_time

__all__ = ["DataflowModel", "Layout"]

# the names tests and scripts knew these by before the layout had a module of its own
_footprints = footprints
_crossing_by_position = crossing_by_position
_boundary_bytes = boundary_bytes


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


@dataclass(frozen=True)
class _Units:
    """A dataflow chip's units under one layout: a chip's compiler balances its kernels over all its
    processing elements, so a kernel costs its work at the chip's full rates; a streaming layout
    also pays each kernel's weights at the external tier's bandwidth, and ``extra`` bytes by kernel
    name besides (a streamed training step's gradients, sent to the tier that holds the optimizer)."""

    streaming: bool
    extra: Mapping[str, float] = field(default_factory=dict)

    def gemm(self, kernel: Kernel, g: Gemm, program: Program, target: DataflowTarget) -> KernelTime:
        return self._matrix(kernel, g.dtype, program, target)

    def attention(self, kernel: Kernel, program: Program, target: DataflowTarget) -> KernelTime:
        return self._matrix(kernel, attention_shape(program.table, kernel).dtype, program, target)

    def _matrix(self, kernel: Kernel, dtype: DType, program: Program, target: DataflowTarget) -> KernelTime:
        c = kernel.cost
        rate = matrix_rate(target, dtype, conv_options(program.options, target) if kernel.kind == "conv"
                           else program.options)
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
            stream = (_weight_bytes(kernel, program.table) + self.extra.get(kernel.name, 0.0)) \
                / target.external_memory_bandwidth
        # a layout change, an elementwise chain or a cache write rides its producer's stream (:mod:`.dataflow_stream`)
        latency = 0.0 if in_stream(kernel) else target.launch_overhead
        return roofline(compute, max(mem, stream), 0.0, latency, unit, peak_flops=peak,
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


def where_limit(chips: int, limit: int | None) -> str:
    """Why a layout over ``chips`` does not fit: more chips than the group's ``limit`` (or its memory)."""
    return f"({chips:,} chips, {limit:,} available)" if limit and chips > limit else "(memory)"


def hop_seconds(nbytes: float, target: DataflowTarget) -> float:
    """One chip-to-chip transfer of ``nbytes``: latency plus bytes over the link."""
    latency = target.chip_to_chip_latency if target.chip_to_chip_latency is not None else (target.link_latency or 0.0)
    bw = target.chip_to_chip_bandwidth or target.scale_up_bandwidth or 0.0
    return latency + (nbytes / bw if bw else 0.0)


class DataflowModel:
    family = "dataflow"
    default_fusion = "full"

    def layouts(self, program: Program, target: DataflowTarget, limit: int | None,
                where: str = "") -> list[Layout]:
        """The layouts worth timing. Without weight streaming the chips are ceil(footprint / SRAM),
        the footprint being the weights and the peak activations. With it, a model that does not fit one chip can
        either stream its weights into one chip from
        the external tier (the training layout) or span enough chips to keep everything on-chip (how
        wafer-scale inference serves a 70B model); both are candidates and the faster one wins. Only
        weights stream: the activations and a KV cache stay in the chip's fast memory, so streaming
        is a layout only while they fit there (and the weights fit the external tier). ``where``
        names the chips ``limit`` counts (a system, or the largest one) for a layout that needs more."""
        if is_training(program):
            return training_layouts(program, target, limit, where or f"the {limit} chips available")
        table = program.table
        weights = weight_bytes(table)
        rest = max(program.memory_required - weights, 0)
        cap = target.memory_capacity
        need = max(1, ceil(max(program.memory_required, sum(self._sizes(program, False))) / cap))
        where = where or f"the {limit} chips available"
        if not target.weight_streaming or need == 1:
            return [self._layout(program, target, need, False, limit, [], where)]
        what = (f"weights ({weights / 1e9:.3g} GB)" if rest <= cap * 0.5 else
                f"weights ({weights / 1e9:.3g} GB) with activations and KV cache ({rest / 1e9:.3g} GB)")
        out = []
        external = target.external_memory_capacity
        if rest <= cap and (not external or weights <= external):
            out.append(self._layout(program, target, 1, True, limit,
                                    [f"{what} exceed one chip's fast memory ({cap / 1e9:.3g} GB): weights streamed "
                                     f"from external memory"], where))
        if not out or not limit or need <= limit:
            why = "" if out else (f"; streaming the weights would leave {rest / 1e9:.3g} GB of activations and KV "
                                  f"cache for one chip" if rest > cap else
                                  f"; the weights exceed the external tier ({external / 1e9:.3g} GB)")
            out.append(self._layout(program, target, need, False, limit,
                                    [f"{what} exceed one chip's fast memory ({cap / 1e9:.3g} GB): spread over "
                                     f"{need} chips{why}"], where))
        return out

    def _layout(self, program: Program, target: DataflowTarget, chips: int, streaming: bool, limit: int | None,
                notes: list[str], where: str) -> Layout:
        """Kernels in program order over the chips, contiguously, each chip taking an equal share of
        the footprint and at most its fast memory, a kernel split over chips where a share ends inside
        it; cuts move to where fewer bytes cross while no chip is left empty or overfull
        (:mod:`.dataflow_layout`). Streamed weights take no fast memory."""
        fits = not (limit and chips > limit)
        if not fits:
            notes.append(f"needs {chips:,} chips, more than {where}: it does not fit")
        kernels, table = program.kernels, program.table
        sizes = [(0.0 if streaming else w, a) for w, a in self._sizes_parts(program)]
        cut_list = cuts([w + a for w, a in sizes], crossing_by_position(kernels, table),
                        produced_for_later(kernels, table), target.memory_capacity, chips) if chips > 1 else []
        chip_of, shares, chip_bytes, chip_weights = place(kernels, sizes, cut_list, chips)
        if shares:
            widest = max(shares, key=lambda name: len(shares[name]))     # the first of the widest
            notes.append(f"{len(shares)} kernel(s) split over consecutive chips where a chip's share of the "
                         f"footprint ends inside them ({widest} over {len(shares[widest])} chips): each chip holds "
                         f"and computes its part; the hop carries the kernel's inputs and the output made so far")
        return Layout(chips, streaming, chip_of, _microbatches(table), fits, notes, cut_list, shares, chip_bytes,
                      chip_weights)

    @staticmethod
    def _sizes_parts(program: Program) -> list[tuple[float, float]]:
        """Each kernel's (weights, activations) on its chip, the activations at the program's peak."""
        parts = footprint_parts(program.kernels, program.table)
        return at_peak(parts, max(program.memory_required - sum(w for w, _ in parts), 0))

    def _sizes(self, program: Program, streaming: bool) -> list[float]:
        return [(0.0 if streaming else w) + a for w, a in self._sizes_parts(program)]

    def run(self, program: Program, devices: DeviceGroup) -> Schedule:
        target = devices.target
        assert isinstance(target, DataflowTarget)
        limit = devices.count or target.max_chips
        where = (f"the {devices.count:,} chip{'s' if devices.count > 1 else ''} given" if devices.count else
                 f"the largest {target.name} system ({target.max_chips:,} chips)" if target.max_chips else "")
        runs: list[tuple[str, Schedule]] = [
            ("streaming weights into 1 chip" if layout.streaming else
             f"spreading over {layout.chips} chips" if layout.chips > 1 else "holding everything on 1 chip",
             self._run(layout, program, target)) for layout in self.layouts(program, target, limit, where)]
        if is_tiered(target) and limit and limit > 1 and residual_adds(program.table.graph):
            # only where the blocks (and so the all-reduces) are found: a convnet's split is not modelled
            runs.append((f"tensor parallel over {limit} chips",
                         tensor_parallel_schedule(program, target, limit, _Units(False), True, [])))
        # a layout that needs more chips than the group has is no alternative to one that fits (SambaNova
        # offered 'spreading over 95 chips' beside a 16-socket rack's tensor-parallel layout)
        best = min((run for _, run in runs if run.fits), default=None, key=lambda r: r.total_s) \
            or min((run for _, run in runs), key=lambda r: r.total_s)
        for where, run in runs:
            if run is not best:
                why = "" if run.fits else f", but does not fit {where_limit(run.devices, limit)}"
                best.notes.append(f"{where} would take {run.total_s * 1e3:.4g} ms{why}")
        streamed = sum(1 for k in program.kernels if not k.is_free and in_stream(k))
        if streamed and target.launch_overhead:
            best.notes.append(f"{streamed} kernel(s) of layout changes, elementwise ops or in-place cache writes ride "
                              f"their producer's stream and pay no per-kernel latency ({STREAM_SOURCE})")
        if program.unmodeled_nodes:
            best.notes.append(f"{program.unmodeled_nodes} unmodeled node(s) are not timed")
        return best

    def _run(self, layout: Layout, program: Program, target: DataflowTarget) -> Schedule:
        """Each chip is a pipeline stage; a hop (latency + bytes over the link) follows each chip's
        last kernel (or part of a split kernel), carrying what later chips read
        (:func:`.dataflow_layout.boundary_bytes`). A split kernel's part does its share of the work and
        weight reads; the kernel's fixed latency is paid once (:func:`_share`). The run streams its
        independent inputs through the stages in ``m`` microbatches (see :func:`pipelined_seconds`);
        the compiler picks the ``m`` that finishes first."""
        training = layout.training       # a training step's footprint terms (None for inference)
        kernels = program.kernels
        units = _Units(layout.streaming, training.streamed_gradients(kernels)
                       if layout.streaming and training is not None else {})
        times: list[KernelTime] = []
        stage = [0.0] * layout.chips
        parts = [StageParts() for _ in range(layout.chips)]
        pieces_of: list[tuple[tuple[int, float, float, float, float], ...]] = []
        # one hop per chip boundary, after the chip's last kernel: it carries every value read on a
        # later chip (the residual stream, a layer's outputs), not what stays (a KV cache in place)
        carried = boundary_bytes(kernels, layout.cuts, layout.chips, program.table)
        last_on_chip = {chip: i for i, k in enumerate(kernels) if not k.is_free for chip, _ in layout.parts(k.name)}
        if layout.inbound is not None:      # a training step: hops where a kernel reads another chip's values
            last_on_chip = {}
        for i, k in enumerate(kernels):
            kt = kernel_time(k, program, target, units)
            weight_bytes_k = 0 if layout.streaming else _weight_bytes(k, program.table)
            pieces = []
            placed: list[tuple[int, float, float, float, float]] = []
            for n, (chip, share) in enumerate(layout.parts(k.name)):
                piece = _share(kt, share, n == 0)
                hop_latency = 0.0
                if n == 0 and layout.inbound and layout.inbound.get(k.name):
                    piece = with_hop(piece, hop_seconds(layout.inbound[k.name], target))
                    hop_latency = hop_seconds(0, target)
                if chip < layout.chips - 1 and last_on_chip.get(chip) == i:
                    piece = with_hop(piece, hop_seconds(carried[chip], target))
                    hop_latency = hop_seconds(0, target)
                # a kernel's fixed latency (and a hop's) is paid once, as the pipeline fills; reading its
                # weights from fast memory is paid by every microbatch that passes; the rest of its work
                # grows with the inputs it processes
                fixed = piece.overhead_s + hop_latency
                weights = min(memory_time(target, weight_bytes_k * share), piece.time_s - fixed) \
                    if weight_bytes_k else 0.0
                work = max(piece.time_s - fixed - weights, 0.0)
                parts[chip].add(fixed, weights, work)
                stage[chip] += piece.time_s
                pieces.append(piece)
                placed.append((chip, share, fixed, weights, work))
            pieces_of.append(tuple(placed))
            times.append(_joined(pieces))
        latency = sum(stage)
        m, total = min(((m, pipelined_seconds(parts, m)) for m in _microbatch_counts(layout.microbatches)),
                       key=lambda x: (x[1], x[0]))
        own = tuple(times)
        if latency > 0 and total != latency:
            times = shares_of_run(times, [sum(p[2] for p in placed) for placed in pieces_of], latency, total)
        # a training step holds gradients and optimizer states besides the weights and activations
        required = training.footprint.total if training is not None else program.memory_required
        capacity = target.memory_capacity + (target.external_memory_capacity if layout.streaming else 0.0)
        # the fit is per chip: the fullest chip against its fast memory (streamed weights sit outside it)
        held = (required <= capacity * layout.chips if layout.streaming else
                max(layout.chip_bytes, default=0.0) <= target.memory_capacity * (1 + 1e-9))
        plan = {"chips": layout.chips, "weight_streaming": layout.streaming, "stage_seconds": stage,
                "latency_s": latency, "microbatches": m, "inputs": layout.microbatches, "fits": layout.fits,
                "chip_of_kernel": layout.chip_of, "chip_bytes": layout.chip_bytes,
                "chip_weight_bytes": layout.chip_weights,
                "split_kernels": {name: [[c, f] for c, f in ps] for name, ps in layout.shares.items()}}
        return Schedule(times, total, layout.chips, layout.chip_of, float(required), float(capacity),
                        held and layout.fits, layout.chips, layout.notes, plan,
                        pipelining=Pipelining(m, tuple(pieces_of), own))


def _share(kt: KernelTime, share: float, first: bool) -> KernelTime:
    """One chip's part of a kernel split over chips: ``share`` of its work. The parts start as the
    kernel's input reaches their chip, side by side with the first part's fill, so the kernel's fixed
    latency is paid once, by the first part; the hops between the chips are paid as every hop is."""
    if share >= 1.0:
        return kt
    busy = max(kt.time_s - kt.overhead_s, 0.0) * share
    overhead = kt.overhead_s if first else 0.0
    # the constructor, not dataclasses.replace: a large wafer or LPU layout splits 150,000 parts per step
    return KernelTime(busy + overhead, kt.compute_s * share, kt.memory_s * share, kt.comm_s * share, overhead,
                      kt.bound, kt.unit, kt.utilization, kt.executed_flops * share, kt.note, kt.traffic_bytes,
                      kt.scale, kt.busy_fraction)


def _joined(pieces: list[KernelTime]) -> KernelTime:
    """A split kernel's parts, run one after another, as one kernel's time."""
    if len(pieces) == 1:
        return pieces[0]
    compute, memory = sum(p.compute_s for p in pieces), sum(p.memory_s for p in pieces)
    comm, overhead = sum(p.comm_s for p in pieces), sum(p.overhead_s for p in pieces)
    return replace(pieces[0], time_s=sum(p.time_s for p in pieces), compute_s=compute, memory_s=memory,
                   comm_s=comm, overhead_s=overhead, bound=bound_of(compute, memory, comm, overhead),
                   executed_flops=sum(p.executed_flops for p in pieces))
