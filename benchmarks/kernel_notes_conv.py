"""The kernel-accuracy report's notes on round 5 (issue 12): the convolution rows of the DeepBench
chips. Kept apart from :mod:`kernel_accuracy` (a module stays under 400 lines), appended to its notes."""

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
