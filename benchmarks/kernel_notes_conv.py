"""The kernel-accuracy report's notes on rounds 5 to 8 (issue 12): the convolution rows of the DeepBench
chips, and their GEMMs' operand layouts. Kept apart from :mod:`kernel_accuracy` (a module stays under 400
lines), appended to its notes."""

ROUND5 = """\
* **Round 5: what MIOpen 1.3 runs** (MI25; the NVIDIA chips unchanged). *MIOpen's any-filter
  Winograd kernel* (`conv_winograd_rxs_efficiency`, `costmodel/execution/conv_winograd_rxs.py`):
  ConvBinWinogradRxS pads any filter to 3x3 blocks (MIOpen's solver rules), runs each with
  F(2x2,3x3) (16/36 of the direct multiplies) at stride 1 or 2, forward and data gradient, one
  persistent workgroup per CU; DeepBench names it for MI25's 5x5 and 5x10 stride-2 layers, which were
  33-70% too slow as implicit GEMMs. Its plateau, 0.55 of the FP32 peak, is fitted alone on MI25's fit
  half with the other terms as committed: a joint refit on main after the round-5 merges moves the
  shared FP32 plateau 0.65 -> 0.625, the GEMM floor 20 -> 19 us, the narrowest fp32 tile 64 -> 128
  and the direct plateau 0.2 -> 0.05, and reads 15.7% / 49.1% held out (the GEMM rows 9.6% -> 13.6%
  median; wt-conv5 reported 0.5 and 23.4% / 53.5% before the merge). *The 1x1 stride-2 GEMM path*
  (`conv_gemm_1x1_stride2`, `conv_miopen_gemm.py`): a transpose that samples x, one GEMM, a transpose
  back (MIOpen 1.3 has no implicit GEMM and its assembly 1x1 kernel runs stride 1 only): those rows
  were 24-34% too fast. MI25 held out 17.1% / 50.0% -> 15.1% / 47.2% (forward 18.4% / 54.5% -> 10.7% /
  31.9%, backward 22.0% / 49.4% -> 17.1% / 50.2%; 15.4% / 46.5% with the Winograd kernel alone); its
  convolution misses 60 -> 48 (the library's pick faster than the model 30 -> 19, strided data
  gradients 5 -> 3, first layers 7 -> 9: the data gradients of 1-3 channel layers now run the
  Winograd kernel, as MIOpen's rules allow, 58-70% below their times). Not transferred and left:
  MI25's weight gradients (3x3 +25%, 1x1 -14..-35%: MIOpen 1.3's direct WrW kernels and per-image
  GEMMs are not modelled; the later Winograd WrW kernel makes the 3x3 ones 43-49% fast); on T4, P100 and
  V100 no cuDNN rule explains the misses by group: on P100 an fp32 layer at batch 16 takes only
  1.2-1.5x its batch-8 time (the model: about 2x), so its batch-8 1x1 and 3x3 rows are 30-60% fast,
  while T4's batch-8 fp32 1x1 rows are 30-60% slow and their batch-16 twins 10-20%; strided data
  gradients run 1.3-4x the scatter formulation's time with no order in the channels; fp16 3x3 weight
  gradients run faster than the plateau with many channels and 2-5x slower with few.
"""

ROUND6 = """\
* **Round 6: DeepBench's forced algorithms** (T4, V100 fp16; nothing else changes). DeepBench's
  `code/nvidia/conv_bench.cu` (da81ba7; the T4/V100 sheets came with commit 30c5115, cuDNN 7.6) makes
  no library choice on its tensor-core runs: built with `USE_TENSOR_CORES=1` it sets
  CUDNN_TENSOR_OP_MATH, fp16 NHWC tensors with an fp32 compute type, and overwrites cudnnFind's
  answer with IMPLICIT_PRECOMP_GEMM, BWD_DATA_ALGO_1 and BWD_FILTER_ALGO_1 (cuDNN 7's tensor-core
  algorithms), after padding C and K up to multiples of 8 (`PAD_KERNELS`); the fp32 sheets come from
  the default build (`USE_TENSOR_CORES=0`): cudnnFind's fastest, no padding. That is now a row
  property (`data/harness_conv.toml`, `calibration/harness_algos.py`): those rows run the implicit
  GEMM of their pass (`forced_algo`; a model's own layers keep the fastest plan) on the padded
  problem. On tensor cores the model already ran only the implicit GEMM, so the padding is what
  moves: the weight gradients of the 1-3 channel first layers do 8/3-8x the work of the reported
  shape (the forward and data-gradient GEMMs already padded C to the MMA step). V100 held-out conv
  backward 18.7% / 71.2% -> 18.7% / 67.0%, T4's fp16 weight gradients p90 80.9% -> 73.8%, V100's
  94.5% -> 90.2%; the chips' bars unchanged (T4 14.3% / 44.8%, V100 11.4% / 53.3%). The misses
  the report blamed on cuDNN's pick include 20 T4 and 39 V100 fp16 rows where cuDNN picked
  nothing: they are the cost of the forced implicit GEMM on tensor cores itself (now their own
  cause). Tried and not kept (judged on T4's fit half, V100 being never fitted): the forced weight
  gradient at the GEMM plateau without `conv_wgrad_efficiency` (its large 3x3 layers reach it, 35-39
  TFLOP/s on T4), alone or with split-K limited to 1, 2, 4 or 8. At the plateau with the split
  over all SMs, V100's fp16 weight gradients go 28.2% / 90.2% -> 21.0% / 74.9% but T4's fit half
  41.1% / 82.4% -> 41.4% / 84.0% and held out 27.1% / 73.8% -> 32.6% / 83.5%; the limited splits are
  worse on one chip or both (V100 up to 88.9% / 609% at split 1): the same algorithm runs the
  small-output layers (1x1, few channels) 2-5x slower than their tile count allows, which no
  plateau or split shared with the large layers reproduces.
"""

ROUND7 = """\
* **Round 7: GEMM operand layouts** (T4 and MI25; `results/kernel_layouts.md`, `kernel_layouts.py`).
  DeepBench's GEMM rows state their cuBLAS/rocBLAS op flags (`ta`, `tb`; column-major: `ta=N` an
  M-contiguous A, `T` a K-contiguous one); the reader carries them as the DOT's `operand_major`,
  outside the shape the split hashes. A skinny GEMM whose large operand is K-major runs slower than
  the same problem M-major (median TN / NN 1.20-1.61 on MI25, 1.20-1.31 on T4 fp32, 1.04-1.48 on
  V100; 1.00 on P100). `gemm_k_major_read_efficiency_fp32`: an SGEMM kernel streams a K-major
  operand at that fraction of its DRAM rate (shallow SGEMM tiles read it in 32-byte runs); fitted
  alone on the fit half, T4 0.55 and MI25 0.55; P100 (no layout cost at N = 32/64) and V100 (never
  fitted) unset. Held out: MI25 15.1% / 47.2% -> 14.2% / 45.7% (small GEMMs 32.9% / 55.5% -> 19.7% /
  52.7%), T4 14.3% / 44.8% -> 14.1% / 44.8% (GEMMs 9.7% / 22.2% -> 9.1% / 21.8%). Left: cuBLAS 10 runs
  skinny K-major GEMMs nearly at the M-major speed when K is a power of two and 1.2-1.9x slower at
  K = 1536-2816, which no mechanism here explains.
"""

ROUND8 = """\
* **Round 8: cuDNN's strided data gradients** (P100, T4, V100 fp32; `conv_dgrad_strided_efficiency`).
  Held out, the data gradients were predicted too fast (signed median P100 -25.9%, T4 fp32 -10.7%,
  fp16 -14.1%, V100 fp32 -15.9%, fp16 -6.9%), the forward convolutions were not; split by stride,
  the bias is the strided rows (P100 -38.8%, T4 fp32 -22.0%, V100 fp32 -30.5%; stride 1: -7.6%,
  +5.9%, -8.2%). Measured against the same layer's forward (no model involved), DeepBench's fp32
  strided data gradients take a median 2.3x (P100, cuDNN 6), 1.7x (T4) and 1.8x (V100, cuDNN 7.6)
  the forward's time, its stride-1 ones 0.99-1.07x, and MIOpen's on MI25 1.1x (stride 1: 0.94x).
  cuDNN's fp32 data-gradient kernels are cudnnFind's pick among BWD_DATA_ALGO_0/1 (FFT and Winograd
  need stride 1); which kernel runs and why it is slower is not public, so the term is an assumption
  with a fitted value: on the vector units the strided plan's GEMM (the zero fill as before) runs at
  `conv_dgrad_strided_efficiency` of the plateau, fitted alone on the fit half with every other term
  as committed (T4 0.75, P100 0.4; V100 copies T4, MI25 leaves it unset). Held out, data gradients
  median / p90: P100 33.4% / 54.3% -> 15.1% / 54.3% (misses over 25%: 31 -> 25), T4 fp32 21.8% /
  46.4% -> 17.3% / 46.4%, V100 fp32 19.0% / 47.4% -> 13.0% / 46.3% (33 -> 25); per chip P100 14.6% /
  54.3% -> 13.8% / 54.3%, T4 14.1% / 44.8% -> 13.8% / 44.8%, V100 11.4% / 53.3% -> 11.0% / 53.3%.
  Tried and not kept: the same plateau on the forced tensor-core BWD_DATA_ALGO_1 rows too (T4 0.5,
  P100 0.4 fitted; T4's fp16 strided rows -24.7% -> +12.5% signed but V100's -2.0% -> +41.9%: T4 13.8%
  / 46.5%, V100 11.4% / 53.8%), and one kernel over the input positions writing dx once instead of
  the fill and the GEMM (T4 0.45 or 0.7, P100 0.4 fitted: held out no better, p90s up to 1.6 points
  worse). What one plateau cannot follow: the strided rows' spread (P100's fp32 ratio to the forward
  0.7-4.4x: its 5x5 stride-2 layers go from 16-41% fast to 41-106% slow and its 1x1 ones with 2048
  output-gradient channels to 59-69% slow, while its c=32 5x10 ones stay 36-41% fast), the fp16 1x1 stride-2
  rows with few channels (memory-bound in the model, 20-70% slow), the padded 1x1 stride-2 layer
  (c=2048, pad 3) that T4 and V100 run in fp16 at 5-12x its forward's time, and the tensor-core
  strided rows (T4 2.1x, V100 1.5x their forward).
"""
