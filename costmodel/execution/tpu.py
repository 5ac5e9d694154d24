"""Systolic-array execution model (Google TPU MXU; by the same model Trainium and Gaudi).

A contraction is cut into ``mxu_dim x mxu_dim`` weight tiles (K and N padded up to the array size,
M to the 8-row sublane, ``TPU_SUBLANE_ROWS``); each tile is a fold that streams one M block (at
most ``mxu_block_rows`` rows) through an array before the next weight tile loads. Weight loads are
double-buffered, so a fold takes ``max(rows, dim)`` cycles (a short M cannot hide the ``dim``
cycles of loading the next tile: the decode regime) plus ``mxu_fold_overhead x dim`` cycles of
fill and drain the overlap does not hide (SCALE-Sim's per-fold count ``2R + C + T - 2`` with the
load overlapped), and the array fills and drains fully once. Large matmuls thus reach
block / (block + overhead x dim) of peak: tile folding, not a flat efficiency, is why a TPU v5e
matmul reaches ~92% and a v6e one (256-wide arrays) ~80%. Folds are spread over all MXUs of all
TensorCores (rows are split over arrays left idle); time = rounds x cycles per fold / clock, over
the achievable efficiency. The cycle rate follows from the dtype's peak
(peak = MXUs x dim^2 x 2 x clock), so int8's doubled rate and what-if changes of the peak carry
through. Attention runs as its two contractions plus exp on the VPU; causal query blocks of one MXU
tile above the diagonal, and the key tiles outside a sliding window, are skipped
(:func:`.common.attention_block_fraction`, as the Pallas splash-attention kernel's block-sparse
causal and local masks skip them). With few query rows per K/V head (decode), the arrays pass one
key per cycle per contraction; on a chip that lists its vector cores' rate (Gaudi 3's TPCs) the dot
products run there where that is faster.
Vector work runs on the VPU, depthwise convolutions too (a per-channel window, not a GEMM); XLA-style
fusion keeps elementwise chains in one kernel.
"""

from __future__ import annotations

from dataclasses import replace
from math import ceil
from typing import NamedTuple

from ...backends import TpuTarget
from ...backends.defaults import MXUS_PER_TENSORCORE, TPU_SUBLANE_ROWS, default_value
from ...ir import DType
from ..kernels import Kernel
from .common import (
    KernelTime,
    attention_block_fraction,
    conv_options,
    dequant_time,
    matmul_efficiency,
    matrix_rate,
    memory_time,
    roofline,
    transcendental_rate,
    vector_rate,
)
from .gemm import Gemm, attention_shape, is_depthwise
from .program import Program
from .sequential import SequentialModel

__all__ = ["Folds", "TpuModel", "systolic_folds", "systolic_time"]


def _mxus(target: TpuTarget) -> int:
    return target.mxu_count or target.tensorcores * MXUS_PER_TENSORCORE


class Folds(NamedTuple):
    """A GEMM's tile folding on the systolic arrays: ``rounds`` of folds over all MXUs, each
    streaming ``rows`` rows through a ``dim x dim`` tile, at ``clock`` (Hz); ``mp`` is M padded
    to the sublane."""

    rounds: int
    rows: int
    dim: int
    clock: float
    mp: int


def systolic_folds(batch: int, m: int, n: int, k: int, peak: float, target: TpuTarget,
                   overhead: float = 0.0) -> Folds:
    """How a ``batch x (m x k) @ (k x n)`` GEMM folds onto the target's arrays at ``peak`` FLOP/s.

    M is cut into blocks of at most ``mxu_block_rows``; with fewer weight tiles than arrays the
    compiler may cut it finer so that every array streams rows (1,177 rows in 3 blocks would leave
    one of v5e's 4 arrays idle; 4 blocks of 296 rows do not), so the blocking with the fewest
    cycles (each fold ``max(rows, dim) + overhead``) is taken, the coarsest among equals."""
    dim = target.mxu_dim
    mxus = _mxus(target)
    clock = peak / (2 * mxus * dim * dim)
    sub = TPU_SUBLANE_ROWS
    mp = max(ceil(m / sub) * sub, sub)
    block_rows = int(default_value("tpu", "mxu_block_rows", target.mxu_block_rows))
    base = ceil(mp / max(block_rows, sub))
    best: tuple[float, Folds] | None = None
    for blocks in range(base, min(base + mxus, mp // sub) + 1):
        block = ceil(mp / blocks / sub) * sub                 # M blocks, balanced
        folds = batch * blocks * ceil(k / dim) * ceil(n / dim)
        # With fewer weight tiles than arrays, the rows are split over the idle arrays (same weights).
        split = max(1, min(mxus // folds, block // sub)) if folds < mxus else 1
        rows = ceil(block / split / sub) * sub
        f = Folds(ceil(folds * split / mxus), rows, dim, clock, mp)
        cost = f.rounds * (max(rows, dim) + overhead)
        if best is None or cost < best[0]:
            best = (cost, f)
    assert best is not None
    return best[1]


def systolic_time(batch: int, m: int, n: int, k: int, peak: float, eff: float,
                  target: TpuTarget) -> tuple[float, float]:
    """(seconds, executed FLOPs incl. padding) of a GEMM on the target's systolic arrays."""
    overhead = float(default_value("tpu", "mxu_fold_overhead", target.mxu_fold_overhead)) * target.mxu_dim
    f = systolic_folds(batch, m, n, k, peak, target, overhead)
    dim = f.dim
    # Weights for the next fold load while the current one streams (double buffering), so a fold
    # costs max(rows, dim) cycles plus the fill and drain that the overlap does not hide; the
    # array fills and drains fully once (2 x dim).
    cycles = f.rounds * (max(f.rows, dim) + overhead) + 2 * dim
    executed = 2 * batch * ceil(k / dim) * ceil(n / dim) * f.mp * dim * dim
    return cycles / f.clock / eff, executed


def _vector_attention(kernel: Kernel, dtype: DType, exp_s: float, target: TpuTarget) -> float | None:
    """Seconds of an attention's dot products on the vector cores (its FLOPs at the listed vector
    rate, then its exps on the same units), or None where the target lists no vector rate: an
    assumed fraction of the matrix rate must not decide which unit runs it."""
    if not target.vector_flops:
        return None
    return kernel.cost.flops / vector_rate(target, dtype).flops_per_s + exp_s


class TpuModel(SequentialModel):
    family = "tpu"
    default_fusion = "full"
    vector_unit = "VPU"

    def gemm(self, kernel: Kernel, g: Gemm, program: Program, target: TpuTarget) -> KernelTime:
        if kernel.kind == "conv" and is_depthwise(program.table, kernel.anchor):
            # a per-channel window (one input channel per group) on the VPU, memory-bound as on GPUs:
            # as a grouped GEMM each channel's N = 1 and K = kh x kw padded to the array's width
            # executed ~1,340x its work (ConvNeXt's 7x7 depthwise layers on v6e: 98 of 117 ms)
            return self.vector(kernel, program, target)
        options = conv_options(program.options, target) if kernel.kind == "conv" else program.options
        rate = matrix_rate(target, g.dtype, options)
        eff = matmul_efficiency(target, g.flops)
        if g.group_rows:
            # a grouped GEMM (XLA's ragged dot, Megablox) walks the experts in turn, each its own folds
            parts = [systolic_time(1, r, g.n, g.k, rate.flops_per_s, eff, target) for r in g.group_rows]
            compute, executed = sum(p[0] for p in parts), sum(p[1] for p in parts)
        else:
            compute, executed = systolic_time(g.batch, g.m, g.n, g.k, rate.flops_per_s, eff, target)
        if g.narrow_rhs is not None:   # weight-only quantization: the VPU converts each weight tile once
            compute = max(compute, dequant_time(target, g.dtype, g.batch * g.k * g.n, 1))
        mem = memory_time(target, kernel.cost.bytes)
        return roofline(compute, mem, 0.0, target.launch_overhead, "MXU", peak_flops=rate.flops_per_s,
                        flops=kernel.cost.flops, nbytes=kernel.cost.bytes, bandwidth=target.memory_bandwidth,
                        executed_flops=executed, note=rate.note)

    def attention(self, kernel: Kernel, program: Program, target: TpuTarget) -> KernelTime:
        s = attention_shape(program.table, kernel)
        rate = matrix_rate(target, s.dtype, replace(program.options, sparse=False))
        eff = matmul_efficiency(target, kernel.cost.flops)
        # query and key blocks of one MXU tile: above the diagonal and outside a sliding window skipped
        frac = attention_block_fraction(s.causal, s.window, s.sq, s.sk, target.mxu_dim, target.mxu_dim)
        # the query heads of a KV group are rows against the same K/V tiles (see AttentionShape.group)
        g = s.group if s.batch_heads % s.group == 0 else 1
        b, rows = s.batch_heads // g, s.sq * g
        # either operand may sit in the arrays: with few query rows (decode) the compiler holds q (or
        # P) stationary and streams the keys (or V^T) through, instead of loading every K/V tile
        qk, e1 = min(systolic_time(b, rows, s.sk, s.d, rate.flops_per_s, eff, target),
                     systolic_time(b, s.sk, rows, s.d, rate.flops_per_s, eff, target))
        pv, e2 = min(systolic_time(b, rows, s.dv, s.sk, rate.flops_per_s, eff, target),
                     systolic_time(b, s.dv, rows, s.sk, rate.flops_per_s, eff, target))
        exp = s.batch_heads * s.sq * s.sk * frac / transcendental_rate(target)
        if s.backward:      # scores recomputed, dQ and dK (QK^T-sized); dP and dV (PV-sized)
            qk, pv, e1, e2 = 3 * qk, 2 * pv, 3 * e1, 2 * e2
        compute = max((qk + pv) * frac, exp)
        mem = memory_time(target, kernel.cost.bytes)
        vector = _vector_attention(kernel, s.dtype, exp, target)
        if vector is not None and vector < compute:
            # few query rows per K/V head (decode): the arrays pass one key per cycle per contraction,
            # slower than the vector cores' dot products (Gaudi's TPCs); the compiler picks the faster
            vrate = vector_rate(target, s.dtype)
            return roofline(vector, mem, 0.0, target.launch_overhead, "VPU", peak_flops=vrate.flops_per_s,
                            flops=kernel.cost.flops, nbytes=kernel.cost.bytes, bandwidth=target.memory_bandwidth,
                            executed_flops=kernel.cost.flops * frac, note=vrate.note)
        return roofline(compute, mem, 0.0, target.launch_overhead, "MXU + VPU", peak_flops=rate.flops_per_s,
                        flops=kernel.cost.flops, nbytes=kernel.cost.bytes, bandwidth=target.memory_bandwidth,
                        executed_flops=(e1 + e2) * frac, note=rate.note)
