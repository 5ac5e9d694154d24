"""DeepBench's forced tensor-core algorithms as a row property (issue 12, round 6).

The rule under test is read from ``code/nvidia/conv_bench.cu`` (baidu-research/DeepBench at
da81ba7): built with USE_TENSOR_CORES=1 and cuDNN >= 7, the fp16 training runs overwrite cudnnFind's
choice with IMPLICIT_PRECOMP_GEMM (forward), BWD_DATA_ALGO_1 and BWD_FILTER_ALGO_1, and pad C and K
up to multiples of 8 before timing (PAD_KERNELS=1). The fp32 runs (default build) keep cudnnFind's pick.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import narrowpipe
from narrowpipe.calibration.harness_algos import apply_forced_algos, read_forced_algos
from narrowpipe.calibration.kernel_measurements import KernelMeasurement, kernel_graph
from narrowpipe.errors import NarrowpipeError

RULES = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "harness_conv.toml"
FIRST = {"n": 16, "c": 3, "h": 224, "w": 224, "k": 64, "r": 7, "s": 7, "ph": 3, "pw": 3, "sh": 2, "sw": 2}


def _row(chip: str, kind: str, dtype: str, shape=FIRST, source: str = "DEEPBENCH") -> KernelMeasurement:
    return KernelMeasurement(source, chip, kind, dtype, dict(shape), 1e-3, "stream")


def test_deepbench_fp16_rows_get_conv_bench_cu_algorithms_and_padding():
    rules = read_forced_algos(RULES)
    rows = [_row(chip, kind, dt) for chip in ("t4", "v100-sxm2", "p100-pcie")
            for kind in ("conv_fwd", "conv_bwd_data", "conv_bwd_filter") for dt in ("fp16", "fp32")]
    out = {(m.chip, m.kind, m.dtype): m for m in apply_forced_algos(rows, rules)}
    expected = {"conv_fwd": "IMPLICIT_PRECOMP_GEMM", "conv_bwd_data": "BWD_DATA_ALGO_1",
                "conv_bwd_filter": "BWD_FILTER_ALGO_1"}
    for (chip, kind, dt), m in out.items():
        if dt == "fp16" and chip in ("t4", "v100-sxm2"):     # the USE_TENSOR_CORES=1 build, cuDNN 7.6
            assert (m.forced_algo, m.channel_multiple) == (expected[kind], 8)
        else:                                                 # cudnnFind's own pick; P100's cuDNN 6
            assert (m.forced_algo, m.channel_multiple) == ("", 1)
    # another source, a GEMM row: untouched
    assert apply_forced_algos([_row("t4", "conv_fwd", "fp16", source="OTHER")], rules)[0].forced_algo == ""
    gemm = KernelMeasurement("DEEPBENCH", "t4", "gemm", "fp16", {"b": 1, "m": 8, "n": 8, "k": 8}, 1e-6, "stream")
    assert apply_forced_algos([gemm], rules)[0] == gemm


def test_padded_problem_is_what_the_graph_times_but_not_what_the_row_reports():
    """A first layer (C = 3) of the fp16 sheet ran with C = 8: the weight gradient's FLOPs are
    2 N K C' R S P Q with C' = 8 (P = Q = 112), while the row's own FLOPs, shape and held-out
    split stay those of C = 3."""
    (m,) = apply_forced_algos([_row("t4", "conv_bwd_filter", "fp16")], read_forced_algos(RULES))
    plain = _row("t4", "conv_bwd_filter", "fp16")
    g = kernel_graph(m)
    (node,) = g.nodes
    assert tuple(node.outputs[0].type.shape) == (64, 8, 7, 7)
    assert node.attrs["forced_algo"] == "BWD_FILTER_ALGO_1"
    assert narrowpipe.analyze(g).flops == 2 * 16 * 64 * 8 * 7 * 7 * 112 * 112
    assert m.flops == plain.flops == 2 * 16 * 64 * 3 * 7 * 7 * 112 * 112
    assert m.held_out() == plain.held_out() and m.shape_text == plain.shape_text
    # K (output channels) pads too: K = 12 runs as 16
    odd = dict(FIRST, k=12)
    (m12,) = apply_forced_algos([_row("v100-sxm2", "conv_fwd", "fp16", odd)], read_forced_algos(RULES))
    assert tuple(kernel_graph(m12).nodes[0].outputs[0].type.shape) == (16, 16, 112, 112)


@pytest.mark.parametrize("body, words", [
    ('["DEEPBENCH@fp16"]\nchips = ["t4"]\nconv_fwd = "FFT_TILING"\n', "FFT_TILING"),
    ('["DEEPBENCH@fp16"]\nconv_fwd = "IMPLICIT_PRECOMP_GEMM"\n', "chips"),
    ('["DEEPBENCH"]\nchips = ["t4"]\n', "SOURCE@dtype"),
    ('["DEEPBENCH@fp16"]\nchips = ["t4"]\nchannel_multiple = 0\n', "channel_multiple"),
])
def test_bad_rules_name_the_file_table_and_reason(tmp_path, body, words):
    p = tmp_path / "rules.toml"
    p.write_text(body)
    with pytest.raises(NarrowpipeError, match=words) as err:
        read_forced_algos(p)
    assert str(p) in str(err.value)


def test_the_sheets_report_the_forced_forward_algorithm_and_cudnnfind_picks_for_fp32():
    """The data agree with the rule: every DeepBench fp16 forward row on T4 and V100 names
    IMPLICIT_PRECOMP_GEMM (the overwritten choice is what get_fwd_algo_string prints), while their
    fp32 rows name several algorithms (cudnnFind's pick in the default build)."""
    from narrowpipe.calibration.kernel_measurements import read_kernel_measurements
    rows = read_kernel_measurements(RULES.parent / "kernels_deepbench.csv")
    for chip in ("t4", "v100-sxm2"):
        fwd = [m for m in rows if m.chip == chip and m.kind == "conv_fwd"]
        assert {m.algo for m in fwd if m.dtype == "fp16"} == {"IMPLICIT_PRECOMP_GEMM"}
        assert len({m.algo for m in fwd if m.dtype == "fp32"}) >= 4
