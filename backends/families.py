"""One schema per execution-model family: what each cost model needs beyond the common fields.

The split follows the design's four execution models. A GPU model needs SMs and tile shapes for
wave quantization; a systolic model needs the array size that contractions pad to; a dataflow model
needs the processing elements and SRAM it lays the graph out over; a CPU model needs cores, SIMD
width and AMX.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from ..errors import TargetSpecError
from .fields import spec_field
from .target import Target

__all__ = ["GpuTarget", "TpuTarget", "DataflowTarget", "CpuTarget", "TARGET_CLASSES"]


@dataclass(frozen=True, kw_only=True)
class GpuTarget(Target):
    """SIMT GPU with tensor cores (NVIDIA, AMD). ``sm_count`` is CUs on AMD.

    ``tile_shapes`` are the CTA tiles (M, N, K) the GEMM model chooses from: a modelling choice
    about what libraries emit, not a datasheet number, so their source is usually an assumption.
    ``smem_per_sm`` is recorded for reference; no model reads it, so a spec may leave it out.
    """

    FAMILY: ClassVar[str] = "gpu"

    sm_count: int = spec_field("count", required=True)
    clock_hz: float | None = spec_field("quantity", units="frequency", unit="mhz")
    l2_bytes: float = spec_field("quantity", units="bytes", unit="mb", required=True)
    smem_per_sm: float | None = spec_field("quantity", units="bytes", unit="kib")  # reference only
    tile_shapes: tuple[tuple[int, int, int], ...] = spec_field("tiles", required=True)
    tensor_core_min_tile: tuple[int, int, int] | None = spec_field("tile")
    #: A GEMM-class kernel (matmul, implicit-GEMM convolution) costs more than its tiles' work: a
    #: latency floor (the first operand tiles' load latency, the MMA pipeline's fill, the last
    #: tile's epilogue drain: why a tiny GEMM takes microseconds), a fill and drain per wave of
    #: CTAs, the share of the output write that is not overlapped with the main loop (non-persistent
    #: kernels write C after their K loop; Hopper's TMA-store kernels overlap it), and the largest
    #: split-K the library picks. Measured per chip (``calibrate --from-measurements``).
    gemm_latency: float | None = spec_field("quantity", units="time", unit="us", allow_zero=True)
    #: One step of a peer-load all-reduce inside the NVLink/Infinity Fabric domain (the one-shot and
    #: two-shot kernels of serving engines' custom all-reduce: one synchronization of the ranks plus the
    #: first loads from the peers' buffers), launch excluded. Absent: no such all-reduce is modelled and
    #: serving's collectives use NCCL's algorithms alone (costmodel/execution/collectives.py).
    peer_all_reduce_latency: float | None = spec_field("quantity", units="time", unit="us")
    #: NCCL's low-latency protocol (LL: 8-byte stores of 4 data bytes and a 4-byte flag, so the
    #: receiver polls its own memory instead of waiting on a fence) on the scale-up links: a fixed cost
    #: per collective (``ll_base_latency``), a cost per ring step (``ll_step_latency``) and a bus
    #: bandwidth cap (``ll_max_bus_bandwidth``; LL also halves the link's rate). NCCL runs small
    #: buffers on it; without it every step pays the Simple protocol's latency (``link_latency``).
    #: Absent: no LL option (costmodel/execution/algorithms.py ``ring_low_latency``).
    ll_base_latency: float | None = spec_field("quantity", units="time", unit="us")
    ll_step_latency: float | None = spec_field("quantity", units="time", unit="us")
    ll_max_bus_bandwidth: float | None = spec_field("quantity", units="bandwidth", unit="gbps")
    #: fp32 matmuls run other kernels than 16-bit ones and reach another fraction of their peak:
    #: on TF32/XF32 tensor cores (``_tf32``, where allowed) or on fp32 units (``_fp32``: CUDA cores,
    #: or fp32 matrix cores). Absent, ``matmul_efficiency`` applies to them too.
    matmul_efficiency_tf32: float | None = spec_field("fraction")
    matmul_efficiency_fp32: float | None = spec_field("fraction")
    gemm_wave_overhead: float | None = spec_field("quantity", units="time", unit="us", allow_zero=True)
    gemm_epilogue_exposed: float | None = spec_field("fraction", allow_zero=True)
    gemm_max_split_k: int | None = spec_field("count")
    #: The narrowest output-tile side among the library's GEMM kernels: a skinny GEMM's narrow side
    #: (M or N) pads up to it. Older libraries had no narrow tiles (DeepBench-era cuBLAS ran a
    #: 16-bit N=16 GEMM as slowly as N=64); absent, a tile shrinks to the problem in steps of 8.
    #: ``_fp32``: the same for fp32 GEMMs on the CUDA cores (SGEMM kernels); absent: ``gemm_min_tile``.
    gemm_min_tile: int | None = spec_field("count")
    gemm_min_tile_fp32: int | None = spec_field("count")
    #: Split-K is considered only while the output tiles fill less than this fraction of the SMs
    #: (a library's heuristic keeps a partly filled grid rather than pay the partial-sum
    #: reduction); absent: 1, whenever there are fewer tiles than SMs. This and the feed bound
    #: below are properties of the tensor-core GEMM kernels; fp32 GEMMs on the CUDA cores keep
    #: the defaults.
    gemm_split_k_fill: float | None = spec_field("fraction")
    #: The fill test above counts the output in the library's smallest tile, whatever tile is
    #: run: the library narrows the tile before it splits K (a split pays a partial-sum
    #: reduction; a narrower tile only a lower per-tile rate), so a problem that fills the SMs in
    #: small tiles is not split in large ones. Absent or false: the fill is counted in the tile
    #: being run. Chosen per chip on the fit half of the kernel benchmark.
    gemm_split_k_smallest_tile: bool | None = spec_field("flag")
    #: Per-SM bandwidth at which a CTA's operand tiles arrive from L2 into shared memory. A tile
    #: does 2 x tm x tn FLOPs per (tm + tn) operand elements loaded, so a small tile runs at most at
    #: this bandwidth times that ratio (why 64x64 tiles do not reach the plateau); absent: no bound.
    gemm_tile_feed_bandwidth: float | None = spec_field("quantity", units="bandwidth", unit="gbps")
    #: The same for the library's TF32/XF32 kernels (fp32 operands, 4 bytes per element: twice the
    #: bytes per FLOP of a 16-bit tile), which need not be the 16-bit kernels' design; absent:
    #: ``gemm_tile_feed_bandwidth``.
    gemm_tile_feed_bandwidth_tf32: float | None = spec_field("quantity", units="bandwidth", unit="gbps")
    #: The fraction of the achievable DRAM bandwidth at which an fp32 GEMM on the vector units (the
    #: library's SGEMM kernels) streams an operand stored K-major (its contracted dim unit-stride,
    #: where the graph states the storage: the DOT's ``operand_major``). A CTA's K step reads a
    #: tm x tk operand tile: MN-major, tk runs of tm elements; K-major, tm runs of tk elements, and
    #: SGEMM tiles are shallow (CUTLASS's SIMT default is 128 x 128 x 8: 32-byte runs, one DRAM sector
    #: per row per step, against 64 bytes for a 16-bit tensor-core tile's K of 32). Memory-bound
    #: (skinny) GEMMs feel it. Absent: 1 (every layout streams alike), also for a graph that does not
    #: state its storage.
    gemm_k_major_read_efficiency_fp32: float | None = spec_field("fraction")
    #: The largest split-K of the library's implicit-GEMM convolution kernels (absent:
    #: ``gemm_max_split_k``): a layer with few output tiles runs its whole reduction per tile.
    conv_max_split_k: int | None = spec_field("count")
    #: The convolution library's own latency floor and narrowest tensor-core output tile (cuDNN's
    #: implicit-GEMM kernels are not cuBLAS's GEMM kernels: they precompute their gather offsets
    #: and tile the output channels in their own steps); absent: ``gemm_latency``, ``gemm_min_tile``.
    conv_latency: float | None = spec_field("quantity", units="time", unit="us", allow_zero=True)
    conv_min_tile: int | None = spec_field("count")
    #: The library runs 3x3 and 5x5 stride-1 weight gradients with non-fused Winograd on the
    #: vector units (cuDNN's BWD_FILTER_ALGO_WINOGRAD_NONFUSED); absent: it does not.
    conv_winograd_wgrad: bool | None = spec_field("flag")
    #: Weight-gradient kernels (a GEMM reducing over batch x positions, its partial sums combined
    #: in a workspace or with atomics) reach this fraction of the unit's GEMM plateau; absent: 1.
    conv_wgrad_efficiency: float | None = spec_field("fraction")
    #: The library's strided data-gradient kernels on the vector units (stride > 1; cuDNN 6/7's fp32
    #: dgrad kernels, which gather the output gradient at the taps landing on each input position and
    #: test each tap against the stride) reach this fraction of the unit's GEMM plateau: DeepBench's
    #: fp32 strided data gradients take a median 2.3x (P100), 1.7x (T4), 1.8x (V100) the time of the
    #: same layer's forward, its stride-1 ones 1.0-1.1x. Absent: 1 (MIOpen's on MI25: 1.1x).
    conv_dgrad_strided_efficiency: float | None = spec_field("fraction")
    #: The library's direct convolution on the vector units (MIOpen's ConvolutionFwdAlgoDirect and its
    #: backward kernels; on cuDNN, whose FWD_ALGO_DIRECT answers NOT_SUPPORTED, an assumption standing
    #: for its unpadded non-GEMM kernels): a loop over the filter taps per output,
    #: no channel padding, at this fraction of the vector peak. It wins where the GEMM pads a narrow
    #: side (a one-channel layer's data gradient has N = 1); absent: the library has none modelled.
    conv_direct_efficiency: float | None = spec_field("fraction")
    #: The library's any-filter Winograd kernel (MIOpen's ConvBinWinogradRxS on gfx9): fp32 only,
    #: 2-D, groups and dilation 1, filters padded to 3x3 blocks, stride 1 or 2, forward and data
    #: gradient, one persistent workgroup per CU; its F(2x2,3x3) multiplies reach this fraction of
    #: the vector peak
    #: (:mod:`~narrowpipe.costmodel.execution.conv_winograd_rxs`); absent: the library has none.
    conv_winograd_rxs_efficiency: float | None = spec_field("fraction")
    #: The library runs an unpadded, ungrouped 1x1 stride-2 fp32 forward convolution as one GEMM
    #: between two layout transposes, not as an implicit GEMM (MIOpen 1.x's GEMM algorithm,
    #: :mod:`~narrowpipe.costmodel.execution.conv_miopen_gemm`); absent: it does not.
    conv_gemm_1x1_stride2: bool | None = spec_field("flag")
    #: The convolution library runs fp32 convolutions on the TF32 tensor cores unless told not to
    #: (cuDNN on Ampere and later under PyTorch's ``torch.backends.cudnn.allow_tf32`` default and
    #: TensorFlow's TF32 default), while fp32 matmuls follow ``--fp32-matmul``; absent: convolutions
    #: take the matmul precision (``--fp32-conv`` overrides either way).
    conv_fp32_as_tf32: bool | None = spec_field("flag")
    #: Best fraction of the matrix peak a fused (FlashAttention-style) attention kernel reaches, for
    #: long sequences; it is below the GEMM plateau (softmax, masking and the online rescale share the
    #: SM with the MMAs). Absent: the GEMM efficiency curve.
    attention_efficiency: float | None = spec_field("fraction")

    def _check_family(self) -> None:
        if not self.tile_shapes:
            raise TargetSpecError("field 'tile_shapes': needs at least one (M, N, K) tile")


@dataclass(frozen=True, kw_only=True)
class TpuTarget(Target):
    """Systolic-array accelerator: Google TPU, and by the same model AWS Trainium and Intel Gaudi.

    ``mxu_dim`` is the side of one matrix unit (contractions pad to it); ``torus_dims`` the largest
    ICI torus (empty when the chips are wired all-to-all instead, as on Gaudi).
    ``ici_link_bandwidth`` is per link, one direction. The on-chip VMEM (SBUF on Trainium) is the
    common ``onchip_capacity``, recorded once.
    """

    FAMILY: ClassVar[str] = "tpu"

    mxu_dim: int = spec_field("count", required=True)
    mxu_count: int | None = spec_field("count")
    tensorcores: int = spec_field("count", required=True)
    ici_links: int | None = spec_field("count")
    ici_link_bandwidth: float | None = spec_field("quantity", units="bandwidth", unit="gbps")
    torus_dims: tuple[int, ...] = spec_field("dims")
    clock_hz: float | None = spec_field("quantity", units="frequency", unit="mhz")
    #: Tile folding: each weight tile (a fold) streams at most ``mxu_block_rows`` rows of the LHS
    #: before the output block is written back and the next tile loads (XLA's M block), and each fold
    #: loses ``mxu_fold_overhead`` x ``mxu_dim`` cycles of fill and drain that double buffering does
    #: not hide. Large matmuls then reach block / (block + overhead x dim) of peak.
    mxu_block_rows: int | None = spec_field("count")
    mxu_fold_overhead: float | None = spec_field("fraction", allow_zero=True)

    def _check_family(self) -> None:
        if self.torus_dims and self.scale_up_domain > math.prod(self.torus_dims):
            raise TargetSpecError(
                f"field 'scale_up_domain': {self.scale_up_domain} chips do not fit the torus "
                f"{'x'.join(map(str, self.torus_dims))}")


@dataclass(frozen=True, kw_only=True)
class DataflowTarget(Target):
    """Spatial dataflow ASIC: Groq LPU, Cerebras WSE, SambaNova RDU.

    ``memory_*`` is the memory the compute reads weights from at full speed: the on-chip SRAM on
    Groq and Cerebras, HBM on SambaNova. ``external_memory_*`` is the tier behind it (Cerebras
    MemoryX, SambaNova DDR; 0 for Groq). ``weight_streaming`` says whether models larger than SRAM
    run by streaming weights in (Cerebras, SambaNova) rather than by adding chips (Groq).
    ``chip_to_chip_bandwidth`` is per chip, one direction, and follows ``scale_up`` in what-ifs.
    The on-chip SRAM is the common ``onchip_capacity``/``onchip_bandwidth`` (recorded once; on Groq
    and Cerebras it is also the main memory, ``memory_*``). ``pe_count`` is for reference: the
    layout assumes a chip's compiler balances its kernels over all its processing elements.
    """

    FAMILY: ClassVar[str] = "dataflow"

    pe_count: int | None = spec_field("count")
    external_memory_capacity: float = spec_field("quantity", units="bytes", unit="gb",
                                                 required=True, allow_zero=True)
    external_memory_bandwidth: float = spec_field("quantity", units="bandwidth", unit="gbps",
                                                  required=True, allow_zero=True)
    weight_streaming: bool = spec_field("flag", required=True)
    chip_to_chip_bandwidth: float | None = spec_field("quantity", units="bandwidth", unit="gbps")
    chip_to_chip_latency: float | None = spec_field("quantity", units="time", unit="us",
                                                    allow_zero=True)
    max_chips: int | None = spec_field("count")

    def _check_family(self) -> None:
        if (self.external_memory_capacity > 0) != (self.external_memory_bandwidth > 0):
            raise TargetSpecError("fields 'external_memory_capacity' and "
                                  "'external_memory_bandwidth': both zero or both positive")


@dataclass(frozen=True, kw_only=True)
class CpuTarget(Target):
    """Server CPU: cores x SIMD x FMA x clock, plus AMX where present.

    ``amx_ops_per_cycle`` is BF16 FLOP per cycle per core on the matrix unit (0 when none). On a
    CPU without AMX, ``matrix_flops`` holds the SIMD FMA peak so contractions still have a rate.
    ``simd_width_bits``, ``fma_units`` and ``memory_channels`` explain those peaks; no model reads
    them (the rates are given), so a spec may leave them out.
    """

    FAMILY: ClassVar[str] = "cpu"

    cores: int = spec_field("count", required=True)
    clock_hz: float = spec_field("quantity", units="frequency", unit="ghz", required=True)
    simd_width_bits: int | None = spec_field("count")
    fma_units: int | None = spec_field("count")
    amx_ops_per_cycle: int = spec_field("count", required=True, allow_zero=True)
    memory_channels: int | None = spec_field("count")
    #: What a whole model run eagerly pays per op on the host beyond the bare dispatch of
    #: ``launch_overhead``: the module call, argument handling and Python glue between ops
    #: (measured by ``calibrate`` as a small model's time per op minus its ops' bare times).
    #: Whole-model predictions pay it; bare-op predictions do not.
    eager_op_overhead: float | None = spec_field("quantity", units="time", unit="us", allow_zero=True)
    #: What an eager run pays per ``nn.Module`` call (``__call__``, hook checks, the forward's own
    #: frame), measured by ``calibrate`` as nested trivial modules minus the same ops inline; a
    #: whole-model prediction pays it for each module call its graph records (``module_calls``).
    eager_module_call_overhead: float | None = spec_field("quantity", units="time", unit="us", allow_zero=True)
    #: What an eager run pays per host call (each launched kernel and each ``nn.Module`` call) on top
    #: of the two above when the state the call touches (Python module objects, tensor metadata, the
    #: dispatcher's tables and code) was evicted from the caches since the op last ran: a model whose
    #: forward touches more bytes than the caches hold finds every op's state cold, one forward
    #: later. Measured by ``calibrate`` as a deep eager stack's time per host call (four times a large
    #: LLC) minus a cache-resident one's, its weights from memory taken out.
    eager_cold_call_overhead: float | None = spec_field("quantity", units="time", unit="us", allow_zero=True)
    #: The fraction of ``eager_cold_call_overhead`` paid by bytes touched between two runs of an op
    #: (the forward's footprint: weights plus the peak of live activations), measured on stacks of
    #: several depths. Absent: all of it once the footprint exceeds the resident part of the LLC.
    eager_cold_call_curve: tuple[tuple[float, float], ...] = spec_field("curve")
    #: What a host call stalls, right after a kernel that moved more bytes than the caches hold,
    #: to fetch back the host state (dispatcher and allocator state, code, page-table entries) that
    #: kernel evicted: measured by ``calibrate`` as a one-element add after an add of up to 128 MiB,
    #: beyond the dispatch. An eager whole-model prediction charges each kernel this times
    #: ``eager_evicted_call_curve`` at the distinct bytes touched since its op's previous kernel
    #: (that one's included), less this times
    #: ``eager_evicted_call_self_curve`` at its own bytes (the part its hot-loop calibration, each
    #: call after the previous call's traffic, already paid). Absent: no such stall.
    eager_evicted_call_overhead: float | None = spec_field("quantity", units="time", unit="us", allow_zero=True)
    #: (bytes touched since the op last ran, fraction of ``eager_evicted_call_overhead`` stalled).
    eager_evicted_call_curve: tuple[tuple[float, float], ...] = spec_field("curve")
    #: (bytes a kernel moves, fraction of ``eager_evicted_call_overhead`` a hot loop of it includes).
    eager_evicted_call_self_curve: tuple[tuple[float, float], ...] = spec_field("curve")
    #: The stall of re-reading an input that other kernels' traffic pushed out of the caches, as the
    #: bytes/s of that stall after the largest traffic measured (its reciprocal: seconds per byte):
    #: ``calibrate`` times an add whose inputs were last touched before an add of up to 128 MiB (host
    #: state warm, output hot) against the same add in a hot loop. An eager whole-model prediction
    #: charges each kernel its inputs' bytes at this rate times ``evicted_read_curve`` at their reuse
    #: distance (:mod:`narrowpipe.costmodel.execution.reuse`). Absent: no such stall.
    evicted_read_bandwidth: float | None = spec_field("quantity", units="bandwidth", unit="gbps")
    #: (bytes moved since an input was last touched, fraction of the per-byte stall).
    evicted_read_curve: tuple[tuple[float, float], ...] = spec_field("curve")
    #: The eager fused attention kernel (PyTorch's CPU flash attention) by key length, which sets its
    #: blocks' sizes: points are (keys, achieved fraction of the matrix peak, softmax included).
    #: Absent: the GEMM curve.
    attention_curve: tuple[tuple[float, float], ...] = spec_field("curve")
    #: GEMM efficiency by shape: (M, N, K, achieved fraction of the matrix peak) measured over a grid
    #: of M, N and K (the BLAS's blocking and packing costs depend on each dim, not only on the
    #: FLOPs). Plain GEMMs interpolate it in log space; absent: matmul_curve x matmul_skinny_curve.
    matmul_grid: tuple[tuple[int, int, int, float], ...] = spec_field("grid")
    #: Seconds each item of a batched GEMM (``bmm``, a batched ``matmul``) costs beyond its own
    #: GEMM at the grid's efficiency for the item's (M, N, K): the BLAS runs a batch as a loop of
    #: small GEMMs in one call, so each item runs at its own shape's rate and the call's dispatch is
    #: paid once. Measured by ``calibrate`` on batched GEMMs (the item's cold operand as the grid's
    #: weights), never below zero. Absent: batched GEMMs take the grid alone, or, without a grid, the
    #: FLOPs and skinny curves.
    bmm_item_time: float | None = spec_field("quantity", units="time", unit="us", allow_zero=True)
    #: A GEMM whose output rows do not start on a ``CPU_GEMM_ROW_ALIGN_BYTES`` boundary (N x item size not a
    #: multiple of it: GPT-2's 50,257-wide LM head, RoBERTa's 50,265) runs its output tiles' loads and
    #: stores across cache lines: points are (bytes of the GEMM's output, its efficiency as a fraction
    #: of the grid's for the same shape), measured by ``calibrate`` on GEMMs one column wider than an
    #: aligned twin. Absent: alignment is not modelled.
    matmul_unaligned_curve: tuple[tuple[float, float], ...] = spec_field("curve")
    #: Seconds per contiguous input row of a constant pad beyond its bytes (PyTorch fills the
    #: output, then copies the input into its interior one row at a time; measured by ``calibrate``
    #: at two row lengths). Absent: a pad is a copy.
    pad_row_time: float | None = spec_field("quantity", units="time", unit="us", allow_zero=True)
    #: Seconds per plane of a constant pad that pads two or more dims (a 4-D NCHW input padded in H
    #: and W: one per N x C plane): the interior copy then cannot merge the dims above the second
    #: innermost padded one into its 2-D loop and steps an outer loop per plane, beyond the rows.
    #: Measured by ``calibrate`` as the same rows padded in 4-D and in 2-D. Absent: no such cost.
    pad_plane_time: float | None = spec_field("quantity", units="time", unit="us", allow_zero=True)
    #: A depthwise convolution's time (oneDNN reorders its input to a blocked layout, runs its
    #: ``jit_dw`` kernel, reorders the output back): a fixed cost per call beyond the dispatch, a cost
    #: per input + output element (the reorders) and per output element per tap (the multiply-adds),
    #: fitted by ``calibrate`` over single layers. Absent: the ``conv_depthwise`` per-op rate.
    depthwise_call_time: float | None = spec_field("quantity", units="time", unit="us", allow_zero=True)
    depthwise_element_time: float | None = spec_field("quantity", units="time", unit="ns", allow_zero=True)
    depthwise_tap_time: float | None = spec_field("quantity", units="time", unit="ns", allow_zero=True)
    #: Buffers at least this large are mapped fresh from the operating system at every allocation
    #: (glibc's malloc serves them with mmap and returns them with munmap), so each op output, or
    #: library temporary, of that size pays a page fault and zeroing per page on first touch.
    fresh_page_threshold: float | None = spec_field("quantity", units="bytes", unit="mib")
    #: Bytes/s at which such fresh pages are faulted in and zeroed (measured by ``calibrate``);
    #: absent: the cost is not modeled.
    fresh_page_bandwidth: float | None = spec_field("quantity", units="bandwidth", unit="gbps")


#: family name -> schema class
TARGET_CLASSES: dict[str, type[Target]] = {
    cls.FAMILY: cls for cls in (GpuTarget, TpuTarget, DataflowTarget, CpuTarget)
}
