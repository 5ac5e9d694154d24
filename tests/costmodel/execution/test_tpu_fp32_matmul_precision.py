"""fp32 matmuls on a TPU run as the frameworks run them by default: one bf16 MXU pass.

JAX computes float32 dots with bfloat16 on TPU unless asked for more (docs.jax.dev/en/latest/201/
precision.html), and PyTorch/XLA's ``set_mat_mul_precision`` defaults to the same one pass ("high" 3,
"highest" 6). narrowpipe ran six passes by default (GPT-2, batch 8 x 1024, TPU v5e: 94.7 ms, "32.8
TFLOP/s fp32 as 6x bf16"). The times here follow the MXU fold formula of ``execution/tpu.py``'s
module doc, worked by hand for one 4096^3 GEMM on TPU v5e (catalog: 4 MXUs of 128 x 128, 197
TFLOP/s bf16, blocks of 512 rows, a fold overhead of 0.5 x 128 cycles, matmul efficiency 1).
"""

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.cli import main
from narrowpipe.costmodel.execution.common import TimingOptions, matrix_rate
from narrowpipe.ir import DType
from tests.graph_builders import gemm_graph

S = 4096


def _hand_compute_s(passes: int) -> float:
    """Rounds of folds x (rows per fold + unhidden fill/drain) + one full fill and drain, at the
    cycle rate the peak implies (peak = MXUs x 128^2 x 2 x clock) divided over the passes."""
    mxus, dim, peak = 4, 128, 197e12
    clock = peak / passes / (2 * mxus * dim * dim)
    folds = (S // 512) * (S // dim) * (S // dim)              # M blocks of 512 rows x K tiles x N tiles
    cycles = folds / mxus * (max(512, dim) + 0.5 * dim) + 2 * dim
    return cycles / clock


@pytest.mark.parametrize(("level", "passes"), [("default", 1), ("high", 3), ("highest", 6)])
def test_a_tpu_runs_an_fp32_gemm_in_the_passes_its_precision_asks(level, passes):
    v5e = get_target("tpu-v5e")
    r = narrowpipe.analyze(gemm_graph(S, S, S, DType.FP32), v5e, fp32_matmul=level)
    assert r.timing.precision == f"fp32 as {passes}x bf16"
    hand = _hand_compute_s(passes) + v5e.launch_overhead       # compute-bound: 3 x 64 MiB read at 819 GB/s
    assert r.timing.time_s == pytest.approx(hand, rel=1e-3)    # 1 pass: 786 us; 6 passes: 4.72 ms
    assert r.ops[0].time_s == pytest.approx(hand, rel=1e-3)


def test_tf32_is_high_and_the_gpu_and_dataflow_defaults_stay():
    fp32 = DType.FP32
    assert matrix_rate(get_target("tpu-v5e"), fp32, TimingOptions(allow_tf32=True)).runs_as == "fp32 as 3x bf16"
    # torch's GPU default: fp32 on the CUDA cores, TF32 only when asked
    assert matrix_rate(get_target("h100"), fp32).flops_per_s == get_target("h100").vector_flops["fp32"]
    assert matrix_rate(get_target("h100"), fp32, TimingOptions(fp32_matmul="high")).dtype == "tf32"
    # dataflow compilers' fp32 algorithms are not published: full float32 (six passes) stays their default
    groq = get_target("groq-lpu")
    assert matrix_rate(groq, fp32).flops_per_s == pytest.approx(groq.matrix_flops["fp16"] / 6)
    with pytest.raises(narrowpipe.NarrowpipeError, match="contradicts 'highest'"):
        TimingOptions(allow_tf32=True, fp32_matmul="highest")


def test_the_cli_says_which_ran(capsys):
    assert main(["analyze", "gpt2", "--target", "tpu-v5e", "--set", "batch=1", "--set", "seq=128"]) == 0
    assert "fp32 as 1x bf16" in capsys.readouterr().out
    assert main(["analyze", "gpt2", "--target", "tpu-v5e", "--set", "batch=1", "--set", "seq=128",
                 "--fp32-matmul", "highest"]) == 0
    assert "fp32 as 6x bf16" in capsys.readouterr().out
    assert main(["analyze", "gpt2", "--target", "tpu-v5e", "--tf32", "--fp32-matmul", "highest"]) == 2
