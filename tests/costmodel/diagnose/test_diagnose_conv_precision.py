"""``diagnose`` holds fp32 convolutions against the precision the library runs them in.

PyTorch leaves ``torch.backends.cudnn.allow_tf32`` True, so a profiled fp32 convnet on an H100 ran
its convolutions on the TF32 tensor cores (catalog h100-sxm: 494.5 TFLOP/s dense) while fp32 matmuls
ran at the fp32 rate (67 TFLOP/s). The FLOP count of the recorded convolution is checked by hand.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from narrowpipe.costmodel.diagnose import diagnose  # noqa: E402

N, C, HW, K, R = 2, 16, 32, 32, 3
FLOPS = 2 * N * K * HW * HW * C * R * R            # padding 1: a 32x32 output per image and filter


@pytest.fixture(scope="module")
def conv_trace(tmp_path_factory) -> Path:
    x, w = torch.randn(N, C, HW, HW), torch.randn(K, C, R, R)
    torch.nn.functional.conv2d(x, w, padding=1)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.nn.functional.conv2d(x, w, padding=1)
    path = tmp_path_factory.mktemp("conv") / "conv.json"
    prof.export_chrome_trace(str(path))
    return path


@pytest.mark.parametrize(("level", "peak"), [("default", 494.5e12), ("highest", 67e12)])
def test_an_fp32_convolution_trace_is_judged_at_its_librarys_precision(conv_trace, level, peak):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # a CPU trace judged on a GPU: warned, on purpose here
        d = diagnose(conv_trace, "h100-sxm", fp32_conv=level)
    assert d.matmul_flops == FLOPS
    assert d.peak_flops == pytest.approx(peak)
    conv = next(o for o in d.ops if o.flops == FLOPS)
    # rel 1e-4: the utilization is on the typical call's duration, time_s the op's total; the trace's
    # microsecond timestamps (three decimals) round the two apart by up to ~1e-5 of a ~100 us op
    assert conv.compute_utilization == pytest.approx(FLOPS / conv.time_s / peak, rel=1e-4)
