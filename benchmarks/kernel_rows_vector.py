"""The kernel benchmark's norm, elementwise and attention rows: classes, harness overhead, report.

Why apart from ``kernel_accuracy.py``: those rows are memory-bound kernels with no GEMM term to fit,
timed by another harness (Triton's ``do_bench``: CUDA events around one call after an L2 flush),
and reported in their own table so the GEMM and convolution numbers stay what they were. What they
share: the rows file format, the fixed split, and the execution model that predicts every row.

The one fitted quantity is the harness's per-call overhead (timing ``call``), one per (source,
chip) on the fit rows only: the measured floor of a one-kernel call (Liger's ReLU^2 of a 1 MB bf16
tensor takes 7.3 us on H100 where its 2 MB of traffic needs 0.7 us) is the harness's, not the
kernel's, as the eager two-kernel version of the same call costs only about a launch more (8.7 us).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from narrowpipe.backends import Target, get_target
from narrowpipe.calibration.kernel_fit import errors, kernel_cases, score
from narrowpipe.calibration.kernel_measurements import KernelMeasurement
from narrowpipe.calibration.vector_measurements import VECTOR_KINDS

__all__ = ["CLASS_OF", "VECTOR_CLASSES", "is_vector", "harness_key", "fit_harness", "markdown"]

CLASS_OF: Mapping[str, str] = {"rms_norm": "norm", "layer_norm": "norm", "add_rms_norm": "norm",
                               "group_norm": "norm", "relu_squared": "elementwise",
                               "rope": "elementwise", "attention": "attention"}
VECTOR_CLASSES = ("norm", "elementwise", "attention")
#: The per-call harness overheads searched (seconds): 0 to 60 us in 0.5 us steps.
HARNESS_GRID: tuple[float, ...] = tuple(x * 0.5e-6 for x in range(0, 121))


def is_vector(m: KernelMeasurement) -> bool:
    return m.kind in VECTOR_KINDS


def harness_key(m: KernelMeasurement) -> str:
    """The harness overhead a ``call`` row pays: its source's, on its chip (event timing and the
    cold caches after the flush differ by runtime and chip)."""
    return f"{m.source}@{m.chip}"


def fit_harness(rows: Sequence[KernelMeasurement], targets: Mapping[str, Target],
                held_out: Callable[[KernelMeasurement], bool], log: Any = print) -> dict[str, float]:
    """Per (source, chip): the per-call overhead (seconds, on :data:`HARNESS_GRID`) that best fits the
    fit rows of the ``call``-timed norm and elementwise rows, the chip's terms as fitted."""
    groups: dict[str, list[KernelMeasurement]] = defaultdict(list)
    for r in rows:
        if is_vector(r) and r.timing == "call" and not held_out(r):
            groups[harness_key(r)].append(r)
    out = {}
    for key, fit_rows in sorted(groups.items()):
        chip = fit_rows[0].chip
        target = targets.get(chip) or get_target(chip)
        cases = kernel_cases(fit_rows, target)
        out[key] = min(HARNESS_GRID, key=lambda h: score(errors(cases, target, h)))
        log(f"  {key}: {len(fit_rows)} fit rows, harness overhead {out[key] * 1e6:.1f} us")
    return out


NOTES = """
* **What is modelled**: a fused row is one kernel whose traffic is its inputs read once and its outputs
  written once, at the chip's HBM bandwidth times `memory_efficiency` (0.85, an assumption in every
  GPU's catalog file, not fitted here), plus the launch; an eager row is each ATen kernel's own
  traffic and launch. Large fused rows land within a few percent (H100 ReLU^2 and RMSNorm at
  128-512 MB: +3..+6%; A100 RoPE: 0..-1%), so the memory term needs no fitted curve.
* **Misses and why**: ATen's `native_layer_norm` at hidden >= 4096 takes 1.4-1.7x Liger's kernel on
  the same shape (A100, H100): the 3/2 traffic of a second pass over x, which ATen's kernel choice
  makes by size and the rows do not record (modelled as one pass: -22..-36%). HF's eager RMSNorm on
  bf16 runs 17-30% slower than its eight kernels' traffic (H100, A100) while the same chain on fp32
  (the naive residual add + RMSNorm) lands within -2..-13%: the bf16 casts and the bf16 x fp32-weight
  multiply take ATen's slower mixed-dtype path, which narrowpipe does not model. On MI300X, Liger's
  Triton kernels take >= 37 us whatever their size while ATen's take 25 us at 16 MB: one per-call
  overhead per chip cannot be both (fitted 33 us: ATen's small layer norms +50..+65%, Liger's -19%).
* **Attention** (FlashAttention-3 on H100, the paper's FP16 head-dim-128 bars; nothing fitted to
  them): without the mask +1.6..+5.9% from 1k to 16k and -6% at 512; with it -1..+1% from 2k to 16k,
  -7% at 1k and -18% at 512. Two mechanisms set this: (1) the plateau, `attention_efficiency` 0.655:
  FA3's head-dim-128 FP16 bars top at 648 TFLOP/s (16k, no mask; independently, pytorch/benchmark
  PR 2391 measured 621 on the same shape); the paper's 740 TFLOP/s headline is the head-dim-256
  panel (756 at 16k), which the catalog had cited. The 16k unmasked row is that same bar, so it is
  not independent of the plateau; the model still puts it +4% slow, its 2,048 query blocks taking
  16 waves on 132 SMs (1.03x) where FA3's persistent scheduler leaves no tail. (2) A fixed cost per
  query block of one key-block iteration (`ATTENTION_QBLOCK_PROLOGUE`, an assumption from FA2/FA3
  Algorithm 1: load Q and the first K/V block before the loop, rescale and write O after it): a
  512-token row runs 4 key blocks per query block and pays (4 + 1) / 4; the rows' own excess over
  the 16k plateau is 1.5, 1.1 and 0.6 iterations at 512, 1k and 2k. Still missing: causal 512 is
  memory-bound in the model (268 MB at 0.85 x 3.35 TB/s = 94 us against 118 measured), and the
  plateau's head-dim dependence: the same figure's FP16 head-dim-64 and -256 bars at 16k (497 and
  756 TFLOP/s) fit exponentials that run (92-100%) after the MMAs rather than under them (at 3.9 T
  exp/s, the rate FA3 quotes) with the MMAs at 0.92-0.94 of peak, which puts head dim 128 at 636-644
  TFLOP/s; the model takes max(MMA, exp) and one plateau per chip, so other head dims on H100 use
  the head-dim-128 figure.
* **Left out** (`data/README.md`): eager RoPE (HF's `apply_rotary_pos_emb` on the transposed q/k
  views runs at half the bandwidth of its ten kernels' traffic: strides are not in the IR), ATen's
  group norm on B200, Liger's batch norm, backward passes, and chips without a catalog target
  (H100 NVL among them).
"""


def _cell(s: dict[str, Any], pct: Callable[[dict[str, Any], str], str]) -> str:
    return f"{pct(s, 'median_abs')} / {pct(s, 'p90_abs')} ({s['n']})" if s.get("n") else "-"


def markdown(records: Sequence[dict[str, Any]], hosts: Mapping[str, float], summary: Callable[..., dict[str, Any]],
             md_table: Callable[..., str], pct: Callable[[dict[str, Any], str], str]) -> str:
    """The held-out error of the norm and elementwise rows per chip and class, and by structure."""
    vec = [r for r in records if r["class"] in VECTOR_CLASSES]
    if not vec:
        return ""
    chips = sorted({r["chip"] for r in vec})
    held = [r for r in vec if r["held_out"]]
    rows = []
    for chip in chips:
        mine = [r for r in held if r["chip"] == chip]
        fit_n = sum(1 for r in vec if r["chip"] == chip and not r["held_out"])
        cells = [_cell(summary([r for r in mine if r["class"] == c]), pct) for c in VECTOR_CLASSES]
        for structure in ("fused", "eager"):
            cells.append(_cell(summary([r for r in mine if f"[{structure}" in r["algorithm"]]), pct))
        harness = [f"{v * 1e6:.1f} us" for k, v in hosts.items() if k.endswith(f"@{chip}")]
        rows.append([chip, *cells, _cell(summary(mine), pct), fit_n, ", ".join(harness) or "-"])
    return ("\n## Norms, elementwise and attention, held out (median abs / p90 abs (rows))\n\n"
            "Liger-Kernel's forward benchmarks (`data/kernels_liger.csv`): one fused kernel (`fused`: Liger's "
            "Triton kernels, ATen's layer norm) or the ATen kernels eager PyTorch launches for the same math "
            "(`eager`, and `add+fused`); FlashAttention-3's forward on H100 (`data/kernels_attention.csv`). "
            "Each row is predicted by the GPU execution model from its graph "
            "(`calibration/vector_measurements.py`); the only fitted quantity is the Liger harness's per-call "
            "overhead (fit rows only).\n\n"
            + md_table(["chip", *VECTOR_CLASSES, "fused", "eager", "all", "fit rows", "harness overhead"], rows, "l")
            + f"\nAll chips pooled: {_cell(summary(held), pct)} held out.\n" + NOTES)
