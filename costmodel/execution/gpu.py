"""SIMT GPU execution model (NVIDIA, AMD): tensor cores with CTA tiles and waves, L2-aware traffic.

* Matmuls and convolutions (implicit GEMM) run on tensor cores at the dtype's dense (or 2:4 sparse)
  rate times the achievable efficiency. The tile giving the least time (compute against traffic,
  as a heuristic-driven library would pick) is chosen among the target's CTA tiles: padded tiles,
  wave quantization over the SMs (waves = ceil(tiles / SMs)) and split-K (up to the target's
  ``gemm_max_split_k``) when there are fewer tiles than SMs, as XLA's GPU GEMM model and cuBLAS
  heuristics do. Beyond its tiles' work a GEMM kernel pays a latency floor (``gemm_latency``: first
  loads, pipeline fill, last epilogue), a fill and drain per wave (``gemm_wave_overhead``) and the
  exposed part of its output write (``gemm_epilogue_exposed``; split-K adds its partial sums):
  small GEMMs take microseconds and short-K GEMMs are dominated by writing C. What the library
  has bounds the choice: its narrowest tile (``gemm_min_tile``, ``_fp32`` for SGEMM kernels) pads a
  skinny side; K splits only while the tiles fill less than ``gemm_split_k_fill`` of the SMs
  (counted in the library's smallest tile where ``gemm_split_k_smallest_tile``: it narrows the
  tile before it splits K); a
  tile runs no faster than its operand tiles arrive (``gemm_tile_feed_bandwidth`` per SM: small
  tiles load more bytes per FLOP; ``_tf32`` for the TF32/XF32 kernels; a wait for operands binds as
  memory, the hierarchy's limit, and scales with the on-chip bandwidth); where the graph states how
  the operands are stored (a DOT's ``operand_major``), a K-major operand's DRAM stream in an SGEMM
  kernel runs at ``gemm_k_major_read_efficiency_fp32`` of the kernel's rate (short runs per tile
  row). Convolution kernels are
  the convolution library's own: they pay ``conv_latency`` and pad to ``conv_min_tile`` where the
  target sets them, and split K up to ``conv_max_split_k``; weight
  gradients reach ``conv_wgrad_efficiency`` of the plateau, strided data gradients on the CUDA cores
  ``conv_dgrad_strided_efficiency`` (both may run as Winograd or, where the
  target has ``conv_direct_efficiency``, as a direct convolution on the vector units,
  :mod:`.conv_algos`). A grouped GEMM (MoE experts) is one launch: one latency floor, waves over
  all its experts' tiles, one epilogue over its whole output. A weight-only quantized GEMM
  dequantizes its weights once per row tile on the CUDA cores, overlapped with the MMA work
  (:func:`.common.dequant_time`); its narrow weight bytes are what the memory term reads.
* Memory traffic is the kernel's compulsory bytes plus operand re-reads the L2 cannot hold: a wave
  covers a roughly square block of output tiles, so A is re-read once per block column and B once
  per block row unless both fit in L2 (or the smaller one alone does).
* Fused attention (FlashAttention style): QK^T and PV on tensor cores over 128-row query blocks,
  causal blocks above the diagonal and a sliding window's key blocks outside it skipped
  (:func:`.common.attention_block_fraction`, FlashAttention's ``window_size``), exp on the
  special-function units (the two overlap); each query block (or split-KV share) also pays a fixed
  prologue and epilogue of ``ATTENTION_QBLOCK_PROLOGUE`` key-block iterations (load Q and the first
  K/V block, write O), which short sequences feel; traffic is Q, K, V and the output only.
* Depthwise convolutions (one channel per group) are per-channel windows, not GEMMs: they run on the
  CUDA cores as memory-bound kernels. Everything else on the CUDA cores: see :mod:`.vector`. Each
  kernel pays the launch overhead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from math import ceil, isqrt, log2
from typing import Any, NamedTuple

from ...backends import GpuTarget
from ...backends.defaults import (
    ATTENTION_BLOCK,
    ATTENTION_MIN_BLOCK_ROWS,
    ATTENTION_QBLOCK_PROLOGUE,
    CACHE_RESIDENT_FRACTION,
    SKINNY_TILE_STEP,
    SPLIT_K_PARTIAL_BYTES,
    default_value,
)
from ..kernels import Kernel
from .common import (
    KernelTime,
    Rate,
    attention_block_fraction,
    conv_options,
    dequant_time,
    matmul_efficiency,
    matrix_rate,
    memory_time,
    roofline,
    transcendental_rate,
)
from .conv_algos import ConvPlan, conv_plans, is_strided_data_gradient
from .gemm import Gemm, attention_shape, is_depthwise
from .program import Program
from .sequential import SequentialModel

__all__ = ["GpuModel", "GemmTerms", "gemm_terms"]


class GpuModel(SequentialModel):
    family = "gpu"
    default_fusion = "full"
    vector_unit = "CUDA cores"

    def gemm(self, kernel: Kernel, g: Gemm, program: Program, target: GpuTarget) -> KernelTime:
        if kernel.kind == "conv" and is_depthwise(program.table, kernel.anchor):
            return self.vector(kernel, program, target)     # a per-channel window: memory-bound
        if kernel.kind != "conv":
            return self._gemm_at(kernel, g, program, target, matrix_rate(target, g.dtype, program.options))
        rate = matrix_rate(target, g.dtype, conv_options(program.options, target))
        kt = self._gemm_at(kernel, g, program, target, rate)
        if rate.dtype != "tf32":
            return kt
        # TF32 is allowed, not forced: cuDNN's heuristics rank its fp32 CUDA-core kernels beside the
        # TF32 ones, and a small layer whose TF32 tiles cannot be fed runs the fp32 kernel
        full = matrix_rate(target, g.dtype, replace(program.options, fp32_matmul="highest", allow_tf32=False))
        alt = self._gemm_at(kernel, g, program, target, full)
        return alt if alt.time_s < kt.time_s * (1 - 1e-9) else kt

    def _gemm_at(self, kernel: Kernel, g: Gemm, program: Program, target: GpuTarget, rate: Rate) -> KernelTime:
        """One GEMM-class kernel at ``rate``: the best of its plans (a convolution's algorithms)."""
        on_vector_units = "vector" in rate.note
        p = gemm_terms(target, on_vector_units, conv=kernel.kind == "conv", tf32=rate.dtype == "tf32")
        plans = [ConvPlan("", g)]
        if kernel.kind == "conv":
            k_step = 1 if on_vector_units or target.tensor_core_min_tile is None else target.tensor_core_min_tile[2]
            plans = conv_plans(program.table, kernel.anchor, k_step=k_step, winograd=on_vector_units,
                               winograd_wgrad=bool(target.conv_winograd_wgrad),
                               direct=target.conv_direct_efficiency is not None,
                               winograd_rxs=target.conv_winograd_rxs_efficiency,
                               gemm_1x1_stride2=bool(target.conv_gemm_1x1_stride2))
        best: tuple[float, GemmTime, ConvPlan] | None = None
        for plan in plans:
            # the implicit GEMM reads and writes what the kernel does; other plans their own operands
            reads = max(kernel.cost.bytes_read - plan.unread_bytes, 0) if plan.extra_kernels == 0 and \
                plan is plans[0] else plan.gemm.a_bytes + plan.gemm.b_bytes
            writes = kernel.cost.bytes_written if plan is plans[0] else plan.gemm.c_bytes
            # a weight-gradient kernel parallelizes its long reduction (batch x positions) over the
            # SMs by design; the library's split-K limit is for ordinary GEMMs
            wgrad = kernel.kind == "conv" and kernel.anchor.attrs.get("role") == "grad_weight"
            split = target.sm_count if wgrad else p.max_split_k if kernel.kind != "conv" else \
                int(target.conv_max_split_k or p.max_split_k)
            r = rate if not wgrad or target.conv_wgrad_efficiency is None or plan is not plans[0] else \
                replace(rate, flops_per_s=rate.flops_per_s * target.conv_wgrad_efficiency)
            # the library's strided data-gradient kernels on the CUDA cores reach their own plateau
            if kernel.kind == "conv" and on_vector_units and plan is plans[0] \
                    and target.conv_dgrad_strided_efficiency is not None and is_strided_data_gradient(kernel.anchor):
                r = replace(rate, flops_per_s=rate.flops_per_s * target.conv_dgrad_strided_efficiency)
            gt = _direct_time(plan.gemm, reads, writes, rate, target, plan.efficiency) if plan.direct else \
                _gemm_time(plan.gemm, reads, writes, r, target,
                           replace(p, max_split_k=split, split_fill=1.0 if wgrad else p.split_fill,
                                   split_smallest=p.split_smallest and not wgrad))
            serial = memory_time(target, plan.extra_bytes) + plan.extra_kernels * target.launch_overhead
            total = gt.time + serial
            if best is None or total < best[0] * (1 - 1e-9):
                best = (total, gt, plan)
        assert best is not None
        _, gt, plan = best
        serial = memory_time(target, plan.extra_bytes)
        unit = "tensor cores" if "vector" not in rate.note else "CUDA cores"
        note = "; ".join(x for x in (rate.note, plan.name if plan.name != "implicit GEMM" else "") if x)
        # the exposed epilogue and non-fused transforms stall both pipes; the latency floor is paid
        # once per kernel, like the launch
        return roofline(gt.compute + serial, gt.memory + serial, 0.0,
                        target.launch_overhead * (1 + plan.extra_kernels) + p.latency, unit,
                        peak_flops=rate.flops_per_s, flops=kernel.cost.flops, nbytes=gt.bytes + plan.extra_bytes,
                        bandwidth=target.memory_bandwidth, executed_flops=gt.executed, note=note,
                        busy_fraction=gt.busy)

    def attention(self, kernel: Kernel, program: Program, target: GpuTarget) -> KernelTime:
        s = attention_shape(program.table, kernel)
        rate = matrix_rate(target, s.dtype, replace(program.options, sparse=False))
        eff = matmul_efficiency(target, kernel.cost.flops)
        if target.attention_efficiency is not None:
            eff = min(eff, target.attention_efficiency)
        block_rows, bc = ATTENTION_BLOCK
        # short queries (decode) pack the query heads of a KV group into one block's rows
        g = s.group if s.sq < block_rows and s.batch_heads % s.group == 0 else 1
        rows = s.sq * g
        br = block_rows if rows >= block_rows else max(ATTENTION_MIN_BLOCK_ROWS, 2 ** ceil(log2(max(rows, 1))))
        qblocks, kblocks = ceil(rows / br), ceil(s.sk / bc)
        # packed query heads (g > 1) leave every query position in one block (br >= sq), so only a
        # window shorter than the keys skips any of them
        frac = attention_block_fraction(s.causal, s.window, s.sq, s.sk, br, bc)
        items = s.batch_heads // g * qblocks
        split = max(1, min(target.sm_count // max(items, 1), kblocks))  # split-KV for short queries
        waves = ceil(items * split / target.sm_count)
        per_item = ceil(kblocks / split) * frac * 2 * br * bc * s.matmul_depth
        # each work item (a query block, or its share of the keys) also pays a fixed prologue and
        # epilogue (load Q and the first K/V block, rescale and write O): a short row pays it on few
        # key blocks
        busy = per_item + ATTENTION_QBLOCK_PROLOGUE * 2 * br * bc * s.matmul_depth
        mma = waves * busy / (rate.flops_per_s * eff / target.sm_count)
        exp = s.batch_heads * s.sq * s.sk * frac / transcendental_rate(target)
        compute = max(mma, exp)
        mem = memory_time(target, kernel.cost.bytes)
        return roofline(compute, mem, 0.0, target.launch_overhead, "tensor cores + SFU",
                        peak_flops=rate.flops_per_s, flops=kernel.cost.flops, nbytes=kernel.cost.bytes,
                        bandwidth=target.memory_bandwidth, executed_flops=items * split * per_item,
                        note=rate.note, busy_fraction=items * split / (waves * target.sm_count))


@dataclass(frozen=True)
class GemmTerms:
    """A GPU's GEMM-kernel terms beyond the tiles' work (see :class:`~narrowpipe.backends.GpuTarget`)."""

    latency: float
    wave_overhead: float
    epilogue_exposed: float
    max_split_k: int
    min_tile: int = SKINNY_TILE_STEP
    split_fill: float = 1.0        # split K only while tiles < split_fill x SMs
    feed: float = 0.0              # per-SM operand bandwidth (bytes/s); 0: no bound
    split_smallest: bool = False   # the split-K fill test counts tiles of the smallest tile shape
    k_major_read: float = 1.0      # DRAM efficiency of a K-major operand's stream (SGEMM; where stated)


def gemm_terms(target: GpuTarget, vector_units: bool = False, conv: bool = False, tf32: bool = False) -> GemmTerms:
    """The target's GEMM terms, the documented GPU defaults where a target built in code has none;
    ``vector_units``: for a GEMM on the CUDA cores (the library's SGEMM kernels' narrowest tile);
    ``conv``: for the convolution library's kernels (``conv_latency``, ``conv_min_tile`` where set);
    ``tf32``: for an fp32 GEMM on the TF32/XF32 kernels (``gemm_tile_feed_bandwidth_tf32`` where set)."""
    def get(name: str) -> Any:
        if conv and name == "gemm_latency" and target.conv_latency is not None:
            return target.conv_latency
        return default_value("gpu", name, getattr(target, name))
    narrowest = (target.gemm_min_tile_fp32 if vector_units else None) or \
        (target.conv_min_tile if conv else None) or target.gemm_min_tile
    # the split-K threshold and the tile feed bound describe the tensor-core kernels they were
    # measured on; SGEMM kernels on the CUDA cores keep the defaults
    fill = 1.0 if vector_units else float(target.gemm_split_k_fill or 1.0)
    feed = 0.0 if vector_units else \
        float((target.gemm_tile_feed_bandwidth_tf32 if tf32 else None) or target.gemm_tile_feed_bandwidth or 0.0)
    return GemmTerms(float(get("gemm_latency")), float(get("gemm_wave_overhead")),
                     float(get("gemm_epilogue_exposed")), int(get("gemm_max_split_k")),
                     max(int(narrowest or SKINNY_TILE_STEP), 1), fill, feed,
                     bool(target.gemm_split_k_smallest_tile) and not vector_units,
                     float((target.gemm_k_major_read_efficiency_fp32 if vector_units else None) or 1.0))


@dataclass(frozen=True)
class GemmTime:
    """One GEMM's best tiling: its compute and memory terms (the exposed epilogue in both)."""

    time: float
    compute: float
    memory: float
    executed: float
    bytes: float
    busy: float = 1.0   # the SMs' busy share of the MMA waves (KernelTime.busy_fraction)


def _direct_time(g: Gemm, reads: float, writes: float, rate: Rate, target: GpuTarget,
                 efficiency: float | None = None) -> GemmTime:
    """A direct convolution: the problem's own FLOPs (no padded channels or tiles) at
    ``conv_direct_efficiency`` (or the kernel's own ``efficiency``) of the unit's peak, against its
    compulsory traffic."""
    compute = g.flops / (rate.flops_per_s * float(efficiency or target.conv_direct_efficiency or 1.0))
    mem = memory_time(target, reads + writes)
    return GemmTime(max(compute, mem), compute, mem, float(g.flops), reads + writes)


def _gemm_time(g: Gemm, reads: float, writes: float, rate: Rate, target: GpuTarget, p: GemmTerms) -> GemmTime:
    """The fastest of the target's tiles for ``g`` (as a heuristic-driven library would pick)."""
    per_sm = rate.flops_per_s * matmul_efficiency(target, g.flops, dtype=rate.dtype) / target.sm_count
    best: GemmTime | None = None
    # where the library narrows its tile before it splits K, the fill test counts the smallest tile's
    # grid (of equal-area smallest tiles, 64x64 and 128x32, the one with more tiles: either fills)
    fill_tiles = _smallest_tile_count(g, target.tile_shapes, p) if p.split_smallest else None
    for tile in target.tile_shapes:
        grid = _grid(g, tile, p)
        rereads = _l2_rereads(g, tile, target)
        tile_reads = reads + sum(rereads)
        k_major = _k_major_bytes(g, rereads) if p.k_major_read < 1 else 0.0
        # weight-only quantization: every row tile dequantizes its weights (whatever the split)
        dequant = dequant_time(target, g.dtype, g.batch * g.k * g.n, ceil(g.m / tile[0])) \
            if g.narrow_rhs is not None else 0.0
        # every split up to the largest the library allows: a split pays its partial sums, so the
        # largest is not always the fastest, and taking the best keeps the time non-decreasing in
        # each dim (the allowed splits only shrink as the tiles grow)
        for split in range(1, _max_split(grid, target.sm_count, p, fill_tiles) + 1):
            compute, feed, executed, waves, busy = _tile_time(g, grid, target.sm_count, per_sm, p, split)
            compute = max(compute, dequant) + waves * p.wave_overhead
            partials = 2 * split * g.batch * g.m * g.n * SPLIT_K_PARTIAL_BYTES if split > 1 else 0
            # each wave's output write overlaps the next wave's main loop; the last wave's is exposed
            exposed = writes * p.epilogue_exposed / waves
            traffic = tile_reads + partials + writes - exposed
            # a K-major operand's share of the traffic streams at k_major_read of the kernel's rate
            mem = memory_time(target, traffic) * (1 + (1 / p.k_major_read - 1) * min(k_major / traffic, 1.0)) \
                if k_major > 0 else memory_time(target, traffic)
            # operands arriving slower than the MMAs consume them: the memory hierarchy's limit (a
            # GEMV's tiles wait on their loads), so it binds as memory, not as the matrix units
            mem = max(mem, feed + waves * p.wave_overhead) if feed > 0 else mem
            epilogue = memory_time(target, exposed)
            t = max(compute, mem) + epilogue
            if best is None or t < best.time * (1 - 1e-9):
                best = GemmTime(t, compute + epilogue, mem + epilogue, executed, tile_reads + partials + writes,
                                busy)
    assert best is not None
    return best


class TileGrid(NamedTuple):
    """A GEMM's grid in one tile shape: the tile shrunk to a skinny side, and how many it takes."""

    tm: int
    tn: int
    tk: int
    tiles: int
    kiters: int


def _grid(g: Gemm, tile: tuple[int, int, int], p: GemmTerms) -> TileGrid:
    """``g`` in ``tile`` CTAs (see :func:`_tile_time` for the shrinking and the grouped case)."""
    tm, tn, tk = tile
    rows = max(g.group_rows) if g.group_rows else g.m
    tm = min(tm, max(p.min_tile, ceil(rows / SKINNY_TILE_STEP) * SKINNY_TILE_STEP))
    tn = min(tn, max(p.min_tile, ceil(g.n / SKINNY_TILE_STEP) * SKINNY_TILE_STEP))
    row_tiles = sum(ceil(r / tm) for r in g.group_rows) if g.group_rows else g.batch * ceil(g.m / tm)
    return TileGrid(tm, tn, tk, row_tiles * ceil(g.n / tn), ceil(g.k / tk))


def _smallest_tile_count(g: Gemm, tiles: Sequence[tuple[int, int, int]], p: GemmTerms) -> int:
    """The most tiles ``g`` takes in any of the library's smallest-area tile shapes (the count the
    split-K fill test reads under ``gemm_split_k_smallest_tile``; independent of the shapes' order)."""
    area = min(t[0] * t[1] for t in tiles)
    return max(_grid(g, t, p).tiles for t in tiles if t[0] * t[1] == area)


def _max_split(grid: TileGrid, sms: int, p: GemmTerms, fill_tiles: int | None = None) -> int:
    """The largest split-K factor the library allows: K splits only while the tiles fill less than
    ``gemm_split_k_fill`` of the SMs, into at most the SMs' share per tile, the K iterations and
    ``gemm_max_split_k``. ``fill_tiles``: the tile count the fill test reads where it is not
    ``grid``'s own (the smallest tile's, ``gemm_split_k_smallest_tile``)."""
    if (grid.tiles if fill_tiles is None else fill_tiles) >= sms * p.split_fill:
        return 1
    return max(1, min(sms // grid.tiles, grid.kiters, p.max_split_k))


def _tile_time(g: Gemm, grid: TileGrid, sms: int, per_sm: float,
               p: GemmTerms, split: int = 1) -> tuple[float, float, float, int, float]:
    """(seconds of MMA work, seconds the tiles' operands take to arrive (0 without a feed bound),
    executed FLOPs, waves, the SMs' busy share of the waves) of ``g`` on ``grid`` with K split
    ``split`` ways.

    A side of the problem narrower than the tile shrinks the tile to it (in steps of
    :data:`SKINNY_TILE_STEP`), as libraries pick narrow-tile or GEMV-like kernels for skinny GEMMs,
    but not below the library's narrowest tile (``gemm_min_tile``); :func:`_max_split` bounds the
    split. A tile runs no faster than its operands arrive (``gemm_tile_feed_bandwidth``).
    A grouped GEMM is one launch that runs every reached expert's tiles in one grid (a persistent
    grouped kernel, as CUTLASS's and Triton's MoE kernels do): one tile shape, shrunk to the largest
    expert's rows; the tiles add up over experts, each expert's rows padded to whole tiles, then
    wave-quantize (and split K) together; a hot expert costs its extra tiles."""
    items = grid.tiles * split
    waves = ceil(items / sms)
    per_item = 2 * grid.tm * grid.tn * grid.tk * ceil(grid.kiters / split)
    feed = 0.0
    if p.feed > 0:
        fed = p.feed * 2 * grid.tm * grid.tn / ((grid.tm + grid.tn) * g.dtype.bits / 8)
        feed = waves * per_item / fed if fed < per_sm else 0.0
    return waves * per_item / per_sm, feed, items * per_item, waves, items / (waves * sms)


def _k_major_bytes(g: Gemm, rereads: tuple[float, float]) -> float:
    """DRAM bytes of the operands the graph says are stored K-major (with their L2 re-reads)."""
    if g.k_major is None:
        return 0.0
    return (g.a_bytes + rereads[0]) * g.k_major[0] + (g.b_bytes + rereads[1]) * g.k_major[1]


def _l2_rereads(g: Gemm, tile: tuple[int, int, int], target: GpuTarget) -> tuple[float, float]:
    """Bytes of A and of B read again from DRAM because the L2 cannot hold them across the tile grid
    (a grouped GEMM: per expert, over its rows and its own weights)."""
    if g.group_rows:
        per_b = g.b_bytes / len(g.group_rows)
        parts = [_rereads(g.a_bytes * r / max(g.m, 1), per_b, r, g.n, tile, target) for r in g.group_rows]
        return sum(a for a, _ in parts), sum(b for _, b in parts)
    return _rereads(g.a_bytes, g.b_bytes, g.m, g.n, tile, target)


def _rereads(a: float, b: float, m: int, n: int, tile: tuple[int, int, int], target: GpuTarget) -> tuple[float, float]:
    l2 = target.l2_bytes
    if a + b <= l2:
        return 0.0, 0.0
    tm, tn, _ = tile
    mt, nt = ceil(m / tm), ceil(n / tn)
    r = min(mt, max(1, isqrt(target.sm_count)))
    c = min(nt, max(1, target.sm_count // r))
    resident = l2 * CACHE_RESIDENT_FRACTION
    a_reads = a if a <= resident else a * ceil(nt / c)
    b_reads = b if b <= resident else b * ceil(mt / r)
    return float(max(a_reads - a, 0)), float(max(b_reads - b, 0))
