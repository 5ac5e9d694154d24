"""SIMT GPU execution model (NVIDIA, AMD): tensor cores with CTA tiles and waves, L2-aware traffic.

* Matmuls and convolutions (implicit GEMM) run on tensor cores at the dtype's dense (or 2:4 sparse)
  rate times the achievable efficiency. The tile giving the least time (compute against traffic,
  as a heuristic-driven library would pick) is chosen among the target's CTA tiles: padded tiles,
  wave quantization over the SMs (waves = ceil(tiles / SMs)) and split-K when there are fewer tiles
  than SMs, as XLA's GPU GEMM model and cuBLAS heuristics do.
* Memory traffic is the kernel's compulsory bytes plus operand re-reads the L2 cannot hold: a wave
  covers a roughly square block of output tiles, so A is re-read once per block column and B once
  per block row unless both fit in L2 (or the smaller one alone does).
* Fused attention (FlashAttention style): QK^T and PV on tensor cores over 128-row query blocks,
  causal blocks above the diagonal skipped (:func:`.common.causal_fraction`), exp on the
  special-function units (the two overlap); traffic is Q, K, V and the output only.
* Everything else on the CUDA cores: see :mod:`.vector`. Each kernel pays the launch overhead.
"""

from __future__ import annotations

from dataclasses import replace
from math import ceil, isqrt, log2

from ...backends import GpuTarget
from ...backends.defaults import ATTENTION_BLOCK, ATTENTION_MIN_BLOCK_ROWS, CACHE_RESIDENT_FRACTION
from ..kernels import Kernel
from .common import (
    KernelTime,
    causal_fraction,
    dequant_time,
    matmul_efficiency,
    matrix_rate,
    memory_time,
    roofline,
    transcendental_rate,
)
from .gemm import Gemm, attention_shape
from .program import Program
from .sequential import SequentialModel

__all__ = ["GpuModel"]


class GpuModel(SequentialModel):
    family = "gpu"
    default_fusion = "full"
    vector_unit = "CUDA cores"

    def gemm(self, kernel: Kernel, g: Gemm, program: Program, target: GpuTarget) -> KernelTime:
        rate = matrix_rate(target, g.dtype, program.options)
        eff = matmul_efficiency(target, g.flops)
        per_sm = rate.flops_per_s * eff / target.sm_count
        best: tuple[float, float, float, float] | None = None   # (time, compute, executed, bytes)
        for tile in target.tile_shapes:
            compute, executed = _tile_time(g, tile, target.sm_count, per_sm)
            if g.narrow_rhs is not None:    # weight-only quantization: every row tile dequantizes its weights
                compute = max(compute, dequant_time(target, g.dtype, g.batch * g.k * g.n, ceil(g.m / tile[0])))
            nbytes = kernel.cost.bytes + _l2_rereads(g, tile, target)
            t = max(compute, memory_time(target, nbytes))
            if best is None or t < best[0] * (1 - 1e-9):
                best = (t, compute, executed, nbytes)
        assert best is not None
        _, compute, executed, nbytes = best
        mem = memory_time(target, nbytes)
        unit = "tensor cores" if "vector" not in rate.note else "CUDA cores"
        return roofline(compute, mem, 0.0, target.launch_overhead, unit, peak_flops=rate.flops_per_s,
                        flops=kernel.cost.flops, nbytes=nbytes, bandwidth=target.memory_bandwidth,
                        executed_flops=executed, note=rate.note)

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
        frac = causal_fraction(s.causal, s.sq, s.sk, br) if g == 1 else 1.0
        items = s.batch_heads // g * qblocks
        split = max(1, min(target.sm_count // max(items, 1), kblocks))  # split-KV for short queries
        waves = ceil(items * split / target.sm_count)
        per_item = ceil(kblocks / split) * frac * 2 * br * bc * s.matmul_depth
        mma = waves * per_item / (rate.flops_per_s * eff / target.sm_count)
        exp = s.batch_heads * s.sq * s.sk * frac / transcendental_rate(target)
        compute = max(mma, exp)
        mem = memory_time(target, kernel.cost.bytes)
        return roofline(compute, mem, 0.0, target.launch_overhead, "tensor cores + SFU",
                        peak_flops=rate.flops_per_s, flops=kernel.cost.flops, nbytes=kernel.cost.bytes,
                        bandwidth=target.memory_bandwidth, executed_flops=waves * target.sm_count * per_item,
                        note=rate.note)


def _tile_time(g: Gemm, tile: tuple[int, int, int], sms: int, per_sm: float) -> tuple[float, float]:
    """A grouped GEMM runs every reached expert's tiles in one grid (a persistent grouped kernel, as
    CUTLASS's and Triton's MoE kernels do): the tiles add up over experts, each expert's rows padded
    to whole tiles, then wave-quantize together; a hot expert costs its extra tiles."""
    tm, tn, tk = tile
    row_tiles = sum(ceil(r / tm) for r in g.group_rows) if g.group_rows else g.batch * ceil(g.m / tm)
    tiles = row_tiles * ceil(g.n / tn)
    kiters = ceil(g.k / tk)
    split = max(1, min(sms // tiles, kiters)) if tiles < sms else 1
    items = tiles * split
    waves = ceil(items / sms)
    per_item = 2 * tm * tn * tk * ceil(kiters / split)
    return waves * per_item / per_sm, items * per_item


def _l2_rereads(g: Gemm, tile: tuple[int, int, int], target: GpuTarget) -> float:
    """Operand bytes read again from DRAM because the L2 cannot hold them across the tile grid (a
    grouped GEMM: per expert, over its rows and its own weights)."""
    if g.group_rows:
        per_b = g.b_bytes / len(g.group_rows)
        return sum(_rereads(g.a_bytes * r / max(g.m, 1), per_b, r, g.n, tile, target) for r in g.group_rows)
    return _rereads(g.a_bytes, g.b_bytes, g.m, g.n, tile, target)


def _rereads(a: float, b: float, m: int, n: int, tile: tuple[int, int, int], target: GpuTarget) -> float:
    l2 = target.l2_bytes
    if a + b <= l2:
        return 0.0
    tm, tn, _ = tile
    mt, nt = ceil(m / tm), ceil(n / tn)
    r = min(mt, max(1, isqrt(target.sm_count)))
    c = min(nt, max(1, target.sm_count // r))
    resident = l2 * CACHE_RESIDENT_FRACTION
    a_reads = a if a <= resident else a * ceil(nt / c)
    b_reads = b if b <= resident else b * ceil(mt / r)
    return float(max(a_reads + b_reads - a - b, 0))
