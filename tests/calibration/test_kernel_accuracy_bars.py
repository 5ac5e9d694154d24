"""The kernel-accuracy acceptance (issue 12) on the held-out half of the public per-kernel timings,
with the catalog as committed: median |error| <= 10% and 90th percentile <= 25% per chip.

Chips that do not meet the bars yet are strict expected failures (the test fails the day they pass,
so this list gets updated) and are held to their recorded numbers so they cannot get worse. The
per-chip numbers and why the rest fail: ``benchmarks/results/kernel_accuracy.md``.
"""

from __future__ import annotations

import pytest
from benchmark_module import load_benchmark  # tests/benchmark_module.py

ka = load_benchmark("kernel_accuracy")

#: chip -> (median, p90) of held-out |error| recorded with this catalog; regressions fail.
#: Since every allowed split-K factor is tried (the fastest kept, so a GEMM's time never drops when a
#: dim grows): H100 p90 0.269 -> 0.259, MI355X 0.292 -> 0.315 (its terms were fitted with the largest
#: split; refitting its split threshold on the fit half keeps 0.25), the rest within 0.001.
#: Round 3 (0451672 -> now; benchmarks/kernel_accuracy.py's notes: 3a convolution algorithms, 3b each
#: library's own kernels, 3c both refitted on the DeepBench chips' fit half): H100 0.097 / 0.259 -> 0.060 /
#: 0.222 (meets the bars), T4 0.154 / 0.492 -> 0.143 / 0.448, P100 0.198 / 0.575 -> 0.146 / 0.543, MI25 0.182 /
#: 0.507 -> 0.171 / 0.500, V100 (never fitted, copies T4's terms) 0.129 / 0.522 -> 0.114 / 0.533; MI300X and
#: MI355X unchanged. Round 5: MIOpen's any-filter Winograd kernel and 1x1 stride-2 GEMM path on MI25: MI25
#: 0.171 / 0.500 -> 0.151 / 0.472 (0.154 / 0.465 with the Winograd kernel alone); gemm_split_k_smallest_tile,
#: chosen on the fit half: MI300X 0.129 / 0.353 -> 0.122 / 0.352 (B200, meeting the bars, 0.044 / 0.125 -> 0.042 /
#: 0.113); the rest unchanged. Round 6 (DeepBench's forced tensor-core algorithms and channel padding,
#: data/harness_conv.toml): every chip's numbers unchanged (V100's conv backward class 0.187 / 0.712 -> 0.187 / 0.670).
#: Round 7 (GEMM operand layouts, gemm_k_major_read_efficiency_fp32 fitted alone on T4 and MI25):
#: T4 0.143 / 0.448 -> 0.141 / 0.448, MI25 0.151 / 0.472 -> 0.142 / 0.457; the rest unchanged.
SHORT_OF_THE_BARS = {
    "mi300x": (0.122, 0.352), "mi355x": (0.064, 0.315),
    "v100-sxm2": (0.114, 0.533), "t4": (0.141, 0.448), "p100-pcie": (0.146, 0.543), "mi25": (0.142, 0.457),
}
MEETING_THE_BARS = ("b200", "h100-sxm", "tpu-v5e", "tpu-v6e", "tpu-v7-tensorcore")


@pytest.fixture(scope="module")
def held_out():
    rows = [r for r in ka.load_rows() if ka.is_held_out(r)]
    return ka.per_chip(ka.evaluate(rows), held_out=True)


def test_the_benchmark_covers_two_vendors_and_every_chip_generation_in_the_data(held_out):
    assert set(held_out) == set(SHORT_OF_THE_BARS) | set(MEETING_THE_BARS)
    assert sum(s["all"]["n"] for s in held_out.values()) >= 2000


def test_v100_is_never_fitted():
    from narrowpipe.backends import get_target
    fields, copies = ka.fitted_fields(get_target("v100-sxm2"))
    assert not fields and copies
    assert ("DEEPBENCH", "v100-sxm2") in ka.INDEPENDENT


def test_the_tpu7x_chip_takes_its_tensorcores_fitted_fold_overhead():
    """TPU7x's public timings are of one JAX device, one of the chip's two TensorCores (no megacore):
    the fold overhead is fitted on ``tpu-v7-tensorcore``'s fit rows and the whole chip copies it."""
    from narrowpipe.backends import get_target
    core, chip = get_target("tpu-v7-tensorcore"), get_target("tpu-v7")
    assert ka.fitted_fields(core)[0] == ["mxu_fold_overhead"]
    assert ka.fitted_fields(chip)[1] == {"mxu_fold_overhead": "tpu-v7-tensorcore"}
    assert chip.mxu_fold_overhead == core.mxu_fold_overhead
    assert core.tensorcores == 1 and chip.tensorcores == 2
    assert core.matrix_flops["bf16"] * 2 == chip.matrix_flops["bf16"]


def test_k_major_sgemm_streams_keep_mi25_small_gemms(held_out):
    """Round 7's ratchet: MI25's skinny K-major GEMMs (DeepBench's TN rows) stream their A slower
    (held-out small-GEMM class 0.329 / 0.555 -> 0.197 / 0.527)."""
    s = held_out["mi25"]["small GEMM"]
    assert s["median_abs"] <= 0.197 + 0.005 and s["p90_abs"] <= 0.527 + 0.01


def test_forced_tensor_core_algorithms_keep_v100_conv_backward_class(held_out):
    """Round 6's ratchet: with DeepBench's channel padding the V100 fp16 first-layer weight gradients
    do their padded work (held-out conv backward p90 0.712 -> 0.670)."""
    s = held_out["v100-sxm2"]["conv bwd"]
    assert s["median_abs"] <= 0.187 + 0.005 and s["p90_abs"] <= 0.670 + 0.01


@pytest.mark.parametrize("chip", MEETING_THE_BARS)
def test_held_out_error_meets_the_bars(held_out, chip):
    s = held_out[chip]["all"]
    assert s["median_abs"] <= ka.MEDIAN_BAR and s["p90_abs"] <= ka.P90_BAR


@pytest.mark.parametrize("chip", sorted(SHORT_OF_THE_BARS))
def test_chips_short_of_the_bars_do_not_get_worse(held_out, chip):
    s = held_out[chip]["all"]
    median, p90 = SHORT_OF_THE_BARS[chip]
    assert s["median_abs"] <= median + 0.005 and s["p90_abs"] <= p90 + 0.01


@pytest.mark.xfail(strict=True, reason="not met yet: library heuristics (AMD, DeepBench-era cuBLAS/cuDNN); "
                                       "see benchmarks/results/kernel_accuracy.md")
@pytest.mark.parametrize("chip", sorted(SHORT_OF_THE_BARS))
def test_held_out_error_meets_the_bars_known_short(held_out, chip):
    s = held_out[chip]["all"]
    assert s["median_abs"] <= ka.MEDIAN_BAR and s["p90_abs"] <= ka.P90_BAR


def test_families_pool_their_chips_held_out_rows(held_out):
    import kernel_residuals as kr
    rows = [r for r in ka.load_rows() if ka.is_held_out(r)]
    # the GEMM and convolution rows: norms and elementwise have their own table (kernel_rows_vector)
    families = kr.per_family([r for r in ka.evaluate(rows) if r["class"] in ka.CLASSES], ka.summary)
    for family, s in families.items():
        chips = [c for c, f in kr.FAMILY_OF.items() if f == family]
        assert s["n"] == sum(held_out[c]["all"]["n"] for c in chips)
    assert set(families) == {"NVIDIA GPUs", "AMD GPUs", "TPUs"}


def test_misses_are_grouped_by_shape_and_sign_not_by_chip():
    import kernel_residuals as kr
    base = {"held_out": True, "chip": "t4", "dtype": "fp16", "compute_s": 1e-5, "measured_s": 1e-4}
    first = {**base, "kind": "conv_bwd_filter", "shape": "n=8 c=3 h=224 w=224 k=64 r=3 s=3", "error": -0.9}
    strided = {**base, "kind": "conv_bwd_data", "shape": "n=8 c=64 h=56 w=56 k=256 r=1 s=1 sh=2 sw=2",
               "error": -0.5}
    skinny = {**base, "kind": "gemm", "shape": "b=1 m=4096 n=16 k=4096", "error": 0.4}
    fast = {**base, "kind": "gemm", "shape": "b=1 m=4096 n=4096 k=4096", "error": 3.0, "compute_s": 4e-4}
    assert kr.cause(first) == "first layer (1-3 input channels)"
    assert kr.cause(strided) == "strided backward data"
    assert kr.cause(skinny) == "skinny GEMM (M or N <= 64)"
    assert kr.cause(fast).startswith("faster than the modelled algorithm's arithmetic")
    assert kr.misses_by_cause([first, strided, {**skinny, "error": 0.1}]) == {
        "first layer (1-3 input channels)": {"t4": 1}, "strided backward data": {"t4": 1}}
