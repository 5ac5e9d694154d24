"""Documented defaults for what a datasheet does not say: achievable ceilings and overheads.

A user describing a new chip rarely knows its achievable GEMM fraction or launch overhead. Rather
than refuse the file or guess silently, the loader fills these from here and records the source as
``"assumption: ..."`` so every report can show which numbers were guesses. Catalog files write
their own values (measured where a measurement exists) and never rely on this table.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["DEFAULTS", "LINK_LATENCY_DEFAULT", "default_for", "default_value", "TRANSCENDENTAL_FRACTION",
           "VECTOR_FRACTION",
           "MXUS_PER_TENSORCORE", "AMX_BF16_OPS_PER_CYCLE", "AMX_OPS_PER_BF16_OP", "ATTENTION_BLOCK",
           "ATTENTION_QBLOCK_PROLOGUE", "ATTENTION_MIN_BLOCK_ROWS", "TPU_SUBLANE_ROWS",
           "CACHE_RESIDENT_FRACTION", "MIN_MATMUL_EFFICIENCY",
           "MIN_MEMORY_EFFICIENCY", "SPLIT_K_PARTIAL_BYTES", "SKINNY_TILE_STEP", "FP32_EMULATION_PASSES",
           "FP32_REDUCED_EMULATION_PASSES", "FP32_DEFAULT_PASSES", "FP32_MATMUL_PRECISIONS", "CPU_GEMM_ROW_ALIGN_BYTES",
           "IDLE_POWER_FRACTION", "MEMORY_POWER_FRACTION",
           "SERVING_MEMORY_RESERVE", "RUNTIME_MEMORY_RESERVE", "TPU_RUNTIME_MEMORY_RESERVE", "runtime_memory_reserve",
           "runtime_reserve_holders", "DEQUANT_OPS_PER_WEIGHT", "CPU_ATTENTION_KV_BLOCK"]

_EFF = "assumption: default for {family} targets when the spec gives none; calibrate to measure"
#: Where PyTorch's CPU allocator (posix_memalign) gets large buffers from.
_GLIBC_MMAP = ("assumption: the host allocates with glibc malloc (PyTorch's CPU allocator calls posix_memalign), "
               "which serves requests of at least its mmap threshold with mmap and frees them with munmap; the "
               "dynamic threshold never exceeds DEFAULT_MMAP_THRESHOLD_MAX = 4 MiB x sizeof(long) = 32 MiB on "
               "64-bit (mallopt(3), M_MMAP_THRESHOLD)")
_GEMM = "assumption: default for gpu targets when the spec gives none; calibrate --from-measurements to measure"

#: family -> field -> (SI value, source). "*" applies to every family.
DEFAULTS: Mapping[str, Mapping[str, tuple[Any, str]]] = MappingProxyType({
    "*": {
        "scale_up_domain": (1, "assumption: default 1 (no scale-up domain given)"),
    },
    "gpu": {
        # MLE-ACC MAMF measurements put large bf16 GEMMs at 51-86% of dense peak.
        "matmul_efficiency": (0.7, _EFF + " (measured GPUs reach 0.5-0.86, MLE-ACC)"),
        "memory_efficiency": (0.85, _EFF),
        # XLA's GPU performance model charges ~1 us per kernel launch.
        "launch_overhead": (1e-6, _EFF + " (~1 us kernel launch as in XLA's GPU model)"),
        "tile_shapes": (((128, 128, 64), (128, 256, 64), (256, 128, 64), (64, 128, 64),
                         (64, 64, 64)), "assumption: generic CUTLASS-style CTA tiles"),
        # The GEMM latency terms fitted on public per-shape measurements of catalog GPUs
        # (benchmarks/kernel_accuracy.py) lie at 4.5-6.5 us floors and 0.25-1.5 us per wave.
        "gemm_latency": (5e-6, _GEMM + " (fitted on kernel-timed rows: H100 5.5, B200 4.5, MI300X 6.5 us)"),
        "gemm_wave_overhead": (0.5e-6, _GEMM + " (fitted GPUs: 0.25-1.5 us; MI355X 4 us with no floor)"),
        "gemm_epilogue_exposed": (1.0, _GEMM + " (a non-persistent kernel writes C after its K loop)"),
        "gemm_max_split_k": (16, "assumption: 16 ways, as the catalog GPUs (public GEMM timings do not pin it)"),
    },
    "tpu": {
        "matmul_efficiency": (0.95, _EFF + " (the MXU tile folding accounts for the rest)"),
        # XLA's TPU matmuls stream an M block of a few hundred rows per weight tile (the JAX Pallas
        # TPU matmul guide's best blocks are 512 x 1024 x 1024).
        "mxu_block_rows": (512, "assumption: default M block per weight tile (JAX Pallas TPU matmul guide)"),
        "mxu_fold_overhead": (0.25, "assumption: default for tpu targets when the spec gives none; "
                                    "calibrate --from-measurements to measure"),
        "memory_efficiency": (0.85, _EFF),
        "launch_overhead": (1e-6, _EFF + " (~1 us per fused XLA op)"),
    },
    "dataflow": {
        "matmul_efficiency": (0.7, _EFF),
        "memory_efficiency": (0.85, _EFF),
        "launch_overhead": (0.0, _EFF + " (statically scheduled, no per-op dispatch)"),
    },
    "cpu": {
        "matmul_efficiency": (0.6, _EFF),
        "memory_efficiency": (0.75, _EFF + " (STREAM-like copies reach ~70-80% of DDR peak)"),
        "launch_overhead": (2e-6, _EFF + " (per-op framework dispatch)"),
        "eager_op_overhead": (0.0, "assumption: none unless calibrate measures it"),
        "fresh_page_threshold": (32 * 2**20, _GLIBC_MMAP),
    },
})

#: Alpha per hop when a spec gives interconnect bandwidth but no latency.
LINK_LATENCY_DEFAULT: tuple[float, str] = (
    2e-6, "assumption: default 2 us per hop; no latency given (NVLink/ICI hop latencies are "
          "unpublished, hardware.md section 29c)")


def default_value(family: str, field: str, value: Any) -> Any:
    """``value`` if the target has one, else the family's documented default (targets built in code
    may leave optional model parameters unset; files get the default and its note when loaded)."""
    if value is not None:
        return value
    default = default_for(family, field)
    return None if default is None else default[0]


def default_for(family: str, field: str) -> tuple[Any, str] | None:
    """(SI value, assumption source) for a field the spec left out, or None if there is none."""
    for scope in (family, "*"):
        table = DEFAULTS.get(scope, {})
        if field in table:
            value, source = table[field]
            return value, source.replace("{family}", family)
    return None


# -- ratios the cost model falls back on when a target lists no rate of its own ------------------

#: Transcendental (exp, rsqrt, ...) throughput as a fraction of the FP32 vector FLOP rate: NVIDIA
#: SMs issue 16 special-function ops per clock against 128 FP32 FMAs (256 FLOPs), i.e. 1/16;
#: FlashAttention-3 quotes 3.9 TFLOP/s of exp against 989 of BF16 matmul on H100, which this
#: reproduces (67 / 16 = 4.2). Targets with measured ``transcendental_flops`` do not use it.
TRANSCENDENTAL_FRACTION: float = 1 / 16
#: Vector (non-matrix) FP32 rate as a fraction of the BF16 matrix rate, for targets listing no
#: vector rate (TPU VPU, dataflow vector units). An assumption; calibration replaces it.
VECTOR_FRACTION: float = 1 / 16
#: MXUs per TensorCore for a TPU spec without ``mxu_count`` (TPU v2-v5: 4 per core, SB-TPU).
MXUS_PER_TENSORCORE: int = 4
#: Intel AMX: 1,024 BF16 operations per cycle per core (INTEL-AMX).
AMX_BF16_OPS_PER_CYCLE: int = 1024
#: AMX operations per cycle relative to BF16, by dtype: INT8 runs 2,048 per cycle (INTEL-AMX).
AMX_OPS_PER_BF16_OP: dict[str, int] = {"bf16": 1, "fp16": 1, "int8": 2}

# -- modelling constants of the execution models (one place each, with why) ----------------------

#: FlashAttention query x key block (Br, Bc) on GPUs: FlashAttention-2 runs 128 x 128 blocks for head
#: dims up to 128 on A100/H100 (FA2 paper, section 3.3 and its kernel configs). An assumption for
#: other GPUs; the causal skip counts blocks of this size.
ATTENTION_BLOCK: tuple[int, int] = (128, 128)
#: assumption: the fixed cost of one query block of a FlashAttention-style forward kernel, in key-block
#: iterations of its main loop: before the first QK^T MMA the block loads its Q tile and its first K
#: tile (nothing to overlap them with), and after the last PV MMA it rescales O by the softmax
#: denominator and writes it (FA2 Algorithm 1 lines 4-6 and 12-14, FA3 Algorithm 1: the producer warp
#: loads Q and K_0 before the consumer's loop starts, the epilogue writes O after it ends); about one
#: iteration's worth of time, not measured separately. Short rows (few key blocks per query block) pay
#: it in proportion; with split-KV (decode) each share of a query block's keys pays it, which stays
#: under the KV cache's read time (tests/costmodel/execution/test_gpu_attention_prologue.py).
ATTENTION_QBLOCK_PROLOGUE: float = 1.0
#: The smallest query block a tensor-core attention kernel runs: the M side of one MMA
#: (mma.m16n8k16, PTX ISA), so short queries (decode) still pay 16 rows.
ATTENTION_MIN_BLOCK_ROWS: int = 16
#: Rows of a TPU vector register (8 sublanes x 128 lanes, JAX Pallas TPU docs): the M side of a
#: contraction pads to a multiple of it before streaming through the MXU.
TPU_SUBLANE_ROWS: int = 8
#: assumption: a working set streams from the on-chip cache (GPU L2, CPU LLC) when it fits in this
#: fraction of it; the rest of the cache holds other tensors and suffers conflict misses.
CACHE_RESIDENT_FRACTION: float = 0.5
#: assumption: floor on an interpolated GEMM efficiency, so a calibration curve that extrapolates
#: to zero cannot predict an infinite time.
MIN_MATMUL_EFFICIENCY: float = 1e-4
#: assumption: the same floor for an interpolated memory-bandwidth efficiency.
MIN_MEMORY_EFFICIENCY: float = 1e-3
#: fp32 matmuls on a chip with no fp32 matrix or vector rate (TPUs, dataflow chips) run as 16-bit
#: passes, as many as the precision asks (``--fp32-matmul``, :data:`FP32_MATMUL_PRECISIONS`): six bf16
#: passes for full float32 ("highest": XLA's BF16_BF16_F32_X6), three for the TF32-like level ("high",
#: or ``--tf32``: BF16_BF16_F32_X3) (JAX "Matmul precision", docs.jax.dev/en/latest/201/precision.html).
FP32_EMULATION_PASSES: int = 6
FP32_REDUCED_EMULATION_PASSES: int = 3
#: The passes of the framework default ("default") per family, where it is not full float32. On TPU
#: one bf16 pass: by JAX's default "float32 dot products may be computed with reduced-precision
#: arithmetic internally (bfloat16 on TPU ...)" (the precision page above), and PyTorch/XLA's
#: ``torch_xla.backends.set_mat_mul_precision`` defaults to "default", one bf16 pass ("high" 3,
#: "highest" 6; docs.pytorch.org/xla/master/tutorials/precision_tutorial.html). Dataflow chips keep
#: six (full float32): their compilers' fp32 matmul algorithms are not published, so the conservative
#: count stands. A GPU's default is torch's: fp32 without TF32 (``torch.backends.cuda.matmul.allow_tf32``).
FP32_DEFAULT_PASSES: Mapping[str, int] = MappingProxyType({"tpu": 1})
#: ``--fp32-matmul`` levels, as torch.set_float32_matmul_precision and torch_xla name them: the
#: framework default, "high" (TF32 on GPUs, 3 bf16 passes elsewhere) and "highest" (full float32).
FP32_MATMUL_PRECISIONS: tuple[str, ...] = ("default", "high", "highest")
#: Bytes per element of a split-K GEMM's partial sums: fp32 accumulators written by each split and
#: read back by the reduction (cuBLAS and CUTLASS reduce split-K partials in fp32 workspace).
SPLIT_K_PARTIAL_BYTES: int = 4
#: A GEMM side narrower than a CTA tile shrinks the tile to it in steps of this many rows or columns
#: (the n=8 side of the smallest tensor-core MMA, mma.m16n8k16, PTX ISA): libraries run skinny
#: GEMMs with narrow-tile or GEMV-like kernels rather than padding N=8 to a 128-wide tile.
SKINNY_TILE_STEP: int = 8

#: The row alignment a CPU BLAS's GEMM output tiles need: 32 bytes (8 fp32 elements); rows N x item
#: size bytes apart that are not a multiple of it straddle cache lines. Measured on the 2-core EPYC VM
#: in two runs (benchmarks/results/cpu_unaligned_gemm.md): N = 16004 (16-byte rows) ran with the
#: unaligned widths (60-66 GFLOP/s at 128 x N x 768), N = 16008 (32-byte rows) with the aligned ones
#: (69-78). How much it costs is measured per host (``matmul_unaligned_curve``).
CPU_GEMM_ROW_ALIGN_BYTES: int = 32

# -- power by utilization (costmodel/power.py) ---------------------------------------------------

#: Board power with nothing running, as a fraction of TDP: 80.3 W idle against a 700 W TDP on an
#: H200 SXM, measured by serialalice.pt's GPU energy benchmark (June 2026; lower confidence: one
#: vendor page), i.e. 11.5%. Applied to every chip that gives no idle power of its own.
IDLE_POWER_FRACTION: float = 0.115
#: Power above idle of a kernel that keeps memory (and the links) at the achievable bandwidth the
#: whole time, as a fraction of TDP. assumption: batch-1 LLM decode (memory-bound, ~85% of
#: bandwidth) draws ~267 W of 700 W on an H100 SXM in the same benchmark (its lowest H100 reading),
#: 0.38 of TDP: (0.38 - 0.115) / 0.85 ~ 0.31; HBM alone is ~3.9 pJ/bit (O'Connor et al., MICRO 2017),
#: ~105 W at 3.35 TB/s, the rest is the on-chip path the bytes take.
MEMORY_POWER_FRACTION: float = 0.31

# -- serving -----------------------------------------------------------------------------------

#: Fraction of a device's memory a serving runtime leaves unallocated (CUDA/driver context, NCCL
#: and cuBLAS workspaces, allocator fragmentation): vLLM preallocates weights, activations and KV
#: cache within ``gpu_memory_utilization`` of the GPU, 0.9 by default (vLLM engine arguments,
#: docs.vllm.ai), so 10% stays free. An assumption for other runtimes and chips.
SERVING_MEMORY_RESERVE: float = 0.10

# -- training ------------------------------------------------------------------------------------

#: Fraction of a device's memory a run cannot plan for (a forward pass as analyze/compare time it,
#: with no ``--mode``): what the counted terms (weights, activations, a training plan's gradients,
#: optimizer states and working set) leave out and a process still holds: the runtime context,
#: library workspaces (cuBLAS, NCCL), the caching allocator's fragmentation. NVIDIA's Megatron
#: Bridge memory-tuning guide: its theoretical estimator "does not include allocator fragmentation,
#: CUDA/NCCL workspace, CUDA graph buffers", and fragmentation-induced OOMs near the limit are common
#: (docs.nvidia.com/nemo/megatron-bridge, perf-techniques/memory-tuning); MindSpeed (Megatron on
#: Ascend) caps PyTorch at 94% of device memory, set_per_process_memory_fraction(0.94), leaving the
#: rest to the collective library (hiascend.com MindSpeed memory-fragmentation guide). 6% is 4.8 GB
#: of an 80 GB H100, the top of the 2-5 GB Megatron runs commonly see beyond their tensors. An
#: assumption for CPUs and other accelerators.
RUNTIME_MEMORY_RESERVE: float = 0.06
#: The runtime reserve on a TPU: XLA holds back memory it reports as "reserved" in its out-of-memory
#: errors: 530 MB of 16 GiB (15.48G usable; LargeWorldModel/LWM issue 60) and 1.25G of 32 GiB on a
#: v4 (30.75G usable; erfanzar/EasyDeL issue 166): 3.2% and 3.9%, so 4%. Its allocator plans every
#: buffer at compile time, with little fragmentation beyond that.
TPU_RUNTIME_MEMORY_RESERVE: float = 0.04


def runtime_memory_reserve(family: str) -> float:
    """The fraction of a device's memory a plain run leaves to its runtime, by chip family: XLA's
    reserve on a TPU, the CUDA/ROCm-style context, workspaces and fragmentation elsewhere; 0 for a
    dataflow chip, whose compiler places every tensor ahead of time with no allocator."""
    return {"tpu": TPU_RUNTIME_MEMORY_RESERVE, "dataflow": 0.0}.get(family, RUNTIME_MEMORY_RESERVE)


def runtime_reserve_holders(family: str, vendor: str = "") -> str:
    """What holds :func:`runtime_memory_reserve`'s share on a chip, for the notes that say why a run
    may not fill its memory: XLA's own reserve on a TPU, ROCm's context and RCCL/hipBLASLt workspaces
    on an AMD GPU, CUDA's context and NCCL/cuBLAS workspaces on other GPUs; a training plan holds every
    family to this one rule too (every published layout the repository validates fits under it:
    benchmarks/megatron_validate.py at most 65% of an A100 80GB, moe_validate.py's Mixtral 78% of an H100)."""
    if family == "tpu":
        return "XLA's reserved memory"
    if family == "dataflow":
        return "nothing: the compiler places every tensor ahead of time"
    if family == "gpu" and vendor.lower() == "amd":
        return "HIP context, RCCL and hipBLASLt workspaces, allocator fragmentation"
    if family == "gpu":
        return "CUDA context, NCCL and cuBLAS workspaces, allocator fragmentation"
    return "the runtime's context, library workspaces, allocator fragmentation"
#: Vector operations per weight element to dequantize a weight-only quantized matmul's weights in
#: its kernel (a scale multiply and a convert per element; int4/fp4 unpacking folded in): an
#: assumption in the spirit of Marlin/AWQ kernels, which dequantize each weight tile in registers
#: once per tile of output rows. Timed on the vector units beside the tensor-core work.
DEQUANT_OPS_PER_WEIGHT: int = 2

# -- launch settings (render/emit_*.py) ----------------------------------------------------------

#: GPUs per host of a catalog system whose devices span several hosts, for torchrun's
#: ``--nproc-per-node``: a GB200 NVL72 rack is 18 compute trays, each 2 Grace CPUs and 4 Blackwell
#: GPUs (NVIDIA GB200 NVL72 product page and datasheet). A system not listed is one host holding all
#: its devices (the DGX/HGX boards: 8 GPUs).
GPUS_PER_HOST: dict[str, int] = {"gb200-nvl72": 4}

#: Keys per block of PyTorch's CPU flash attention (``kvSplitSize``): a causal attention skips the
#: key blocks past each query block's diagonal, so it saves work only from two blocks on (measured
#: here: causal/non-causal time 0.96-1.01 up to 512 tokens, 0.75 at 1024; ATen's
#: native/cpu/FlashAttentionKernel.cpp).
CPU_ATTENTION_KV_BLOCK = 512
