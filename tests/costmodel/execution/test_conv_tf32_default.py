"""fp32 convolutions run as the GPU's convolution library runs them by default.

PyTorch leaves ``torch.backends.cudnn.allow_tf32`` True (torch 2.13: ``cudnn.conv.fp32_precision`` is
"tf32") while its fp32 matmuls stay full precision (``cuda.matmul.allow_tf32`` False), and TensorFlow
enables TF32 by default: on an A100 an fp32 ResNet-50's convolutions run on the TF32 tensor cores.
narrowpipe timed them on the CUDA cores (ResNet-50 batch 256 on A100: 102 ms against 25.9 ms).
The hand numbers use the catalog's A100 figures (``backends/catalog/a100-sxm-80gb.toml``: TF32 156
TFLOP/s dense, fp32 vector 19.5 TFLOP/s, matmul efficiency 0.8587).
"""

import json

import pytest

import narrowpipe
from narrowpipe.cli import main
from narrowpipe.costmodel.execution.common import TimingOptions
from narrowpipe.errors import NarrowpipeError
from narrowpipe.ir import DType
from tests.graph_builders import conv_graph, gemm_graph

#: A ResNet stage-2 3x3 layer at batch 64: implicit GEMM M = 64 x 56 x 56, N = 256, K = 256 x 9.
BIG = dict(n=64, c=256, hw=(56, 56), k=256, kernel=(3, 3), pad=1)
BIG_FLOPS = 2 * 64 * 56 * 56 * 256 * 256 * 9


def _time(graph, target, **options):
    r = narrowpipe.analyze(graph, target, **options)
    return r.timing.time_s, r.timing.precision


def test_an_fp32_convolution_runs_on_tf32_tensor_cores_by_default_on_an_a100():
    g = conv_graph(**BIG)
    t, precision = _time(g, "a100")
    assert precision == "fp32 as tf32"
    # compute-bound at the TF32 plateau; the tile waves and the latency floor add a few percent
    assert t == pytest.approx(BIG_FLOPS / (156e12 * 0.8587), rel=0.05)        # hand: 1.767 ms
    full, full_precision = _time(g, "a100", fp32_conv="highest")
    assert full_precision == "fp32 on vector units"
    # even Winograd F(4x4,3x3)'s 4x fewer multiplies on the 19.5 TFLOP/s CUDA cores take longer
    assert full > BIG_FLOPS / 4 / 19.5e12 > t


def test_fp32_matmuls_keep_torchs_full_precision_default_beside_tf32_convolutions():
    t, precision = _time(gemm_graph(4096, 4096, 4096, DType.FP32), "a100")
    assert precision == "fp32 on vector units"
    assert t > 2 * 4096 ** 3 / 19.5e12                      # no faster than the CUDA cores' peak
    assert _time(gemm_graph(4096, 4096, 4096, DType.FP32), "a100", fp32_conv="high") == (t, precision)


@pytest.mark.parametrize("target", ["v100", "mi300x"])
def test_a_library_without_a_tf32_default_keeps_full_fp32_convolutions(target):
    """V100 has no TF32; MIOpen on MI300X does not use XF32 for convolutions unless asked, so its
    default equals full precision and ``--fp32-conv high`` is what puts them on the XF32 rate."""
    g = conv_graph(**BIG)
    default, highest = _time(g, target), _time(g, target, fp32_conv="highest")
    assert default == highest
    high = _time(g, target, fp32_conv="high")
    assert (high[0] < default[0]) == (target == "mi300x")


def test_a_tpu_convolution_follows_the_matmul_precision():
    g = conv_graph(**BIG)
    assert _time(g, "tpu-v5e")[1] == "fp32 as 1x bf16"
    assert _time(g, "tpu-v5e", fp32_matmul="highest")[1] == "fp32 as 6x bf16"
    assert _time(g, "tpu-v5e", fp32_matmul="highest", fp32_conv="default")[1] == "fp32 as 6x bf16"
    assert _time(g, "tpu-v5e", fp32_conv="high")[1] == "fp32 as 3x bf16"


@pytest.mark.parametrize("shape", [
    dict(n=1, c=3, hw=(224, 224), k=768, kernel=(16, 16), stride=16),      # ViT-B's patch embedding
    dict(n=1, c=64, hw=(56, 56), k=64, kernel=(3, 3), pad=1),
    dict(n=8, c=512, hw=(7, 7), k=2048, kernel=(1, 1)),
])
@pytest.mark.parametrize("target", ["a100", "h100-sxm"])
def test_allowing_tf32_never_makes_a_convolution_slower(shape, target):
    """TF32 is allowed, not forced: cuDNN's heuristics rank its fp32 kernels too, so a layer whose
    TF32 tiles run slower (H100's TF32 GEMMs are fed at their own, lower, fitted bandwidth) keeps
    the fp32 kernel."""
    g = conv_graph(**shape)
    assert _time(g, target)[0] <= _time(g, target, fp32_conv="highest")[0] * (1 + 1e-9)


def test_the_cli_sets_the_convolution_precision_apart(tmp_path, capsys):
    out = {}
    for level in ("default", "highest"):
        path = tmp_path / f"{level}.json"
        assert main(["analyze", "resnet50", "--target", "a100", "--set", "batch=64", "--fp32-conv", level,
                     "--json", str(path)]) == 0
        out[level] = json.loads(path.read_text())["timing"]
    assert out["default"]["precision"] == "fp32 as tf32"
    assert out["highest"]["precision"] == "fp32 on vector units"
    assert out["highest"]["time_s"] > 2.5 * out["default"]["time_s"]
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["analyze", "resnet50", "--target", "a100", "--fp32-conv", "tf32"])


def test_an_unknown_convolution_precision_is_refused():
    with pytest.raises(NarrowpipeError, match="fp32 convolution precision 'medium'"):
        TimingOptions(fp32_conv="medium")


def test_a_convnet_plans_mfu_against_the_precision_its_convolutions_run_in():
    """QA: ``plan resnet50 --devices 8 --target dgx-h100`` read 'MFU 113.2%': the step timed the
    convolutions on TF32 tensor cores while MFU held them against the fp32 CUDA-core peak (67 TFLOP/s).
    H100 SXM's TF32 dense peak is 494.5 TFLOP/s (catalog)."""
    p = narrowpipe.plan("resnet50", "dgx-h100", 8, global_batch=256,
                        parallel={"tp": 1, "pp": 1, "microbatch": 32, "zero": 0, "recompute": "none"})
    assert p.mfu == pytest.approx(p.tflops_per_device / 494.5, rel=1e-6)
    assert 0 < p.mfu < 1
