"""Where MIOpen's any-filter Winograd (ConvBinWinogradRxS) and its 1x1 stride-2 GEMM path do NOT
apply, checked against MIOpen 1.3.0's own rules (src/solver/conv_bin_winoRxS.cpp ``IsApplicable``:
equal strides of 1 or 2, dilation 1, fp32 (``float_size == 32``), NCHW 2-D, every dimension under
2^16 and an image at most 2^28 elements; src/ocl/convolutionocl.cpp: the '1x1 u2xv2' GEMM path only
for ``miopenFloat`` tensors, an unpadded 1x1 filter and a 2 x 2 stride; neither has groups in 1.3).

Each excluded layer must time exactly as on an MI25 without either kernel (both fields absent), and
the same layer without the disqualifying property must be offered the kernel (so the check can fail). A
user-written AMD target that leaves the two fields out predicts as that MI25 does."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from gpu_timing import last_kernel  # tests/gpu_timing.py
from graph_builders import conv_graph  # tests/graph_builders.py

from narrowpipe.backends import get_target
from narrowpipe.backends.loader import load_target_file
from narrowpipe.costmodel.execution.conv_winograd_rxs import rxs_flops
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.ir import DType, Op

MI25 = get_target("mi25")
NEW_FIELDS = ("conv_winograd_rxs_efficiency", "conv_gemm_1x1_stride2")
WITHOUT = dataclasses.replace(MI25, **dict.fromkeys(NEW_FIELDS),
                              sources={k: v for k, v in MI25.sources.items() if k not in NEW_FIELDS})


def _rxs(g):
    table = interpret(g, {})
    return rxs_flops(table, next(n for n in g.nodes if n.op is Op.CONV))


def _same_as_without(g) -> None:
    t = last_kernel(g, MI25)
    assert "RxS" not in t.note and "transposes" not in t.note
    assert t.time_s == last_kernel(g, WITHOUT).time_s


@pytest.mark.parametrize("excluded, admitted", [
    # groups 2 (not depthwise): MIOpen 1.3 has no grouped RxS
    (conv_graph(4, 64, (80, 80), 128, (5, 5), 2, groups=2), conv_graph(4, 64, (80, 80), 128, (5, 5), 2)),
    # dilation 2
    (conv_graph(4, 64, (56, 56), 64, (3, 3), 1, pad=2, dilation=2), conv_graph(4, 64, (56, 56), 64, (3, 3), 1, pad=1)),
    # depthwise (runs as a per-channel window on the vector units)
    (conv_graph(4, 64, (56, 56), 64, (3, 3), 2, pad=1, groups=64), conv_graph(4, 64, (56, 56), 64, (3, 3), 2, pad=1)),
    # a 1-D convolution (speech): the kernel is 2-D only
    (conv_graph(4, 64, (400,), 64, (5,), 2), conv_graph(4, 64, (1, 400), 64, (1, 5), 2)),
    # fp16 and bf16: fp32 only on gfx900
    (conv_graph(4, 64, (80, 80), 128, (5, 5), 2, dtype=DType.FP16), conv_graph(4, 64, (80, 80), 128, (5, 5), 2)),
    (conv_graph(4, 64, (80, 80), 128, (5, 5), 2, dtype=DType.BF16), conv_graph(4, 64, (80, 80), 128, (5, 5), 2)),
    # a 3-D convolution (video)
    (conv_graph(2, 32, (8, 28, 28), 64, (3, 3, 3), 1, pad=1), conv_graph(2, 32, (28, 28), 64, (3, 3), 1, pad=1)),
    # a stride-2 data gradient needs R > 1 (MIOpen's dilated-mode rule) and an even dy channel count
    (conv_graph(2, 64, (28, 28), 128, (1, 1), 2, role="grad_input"),
     conv_graph(2, 64, (28, 28), 128, (3, 3), 2, pad=1, role="grad_input")),
    (conv_graph(2, 64, (28, 28), 127, (3, 3), 2, pad=1, role="grad_input"),
     conv_graph(2, 64, (28, 28), 128, (3, 3), 2, pad=1, role="grad_input")),
], ids=["grouped", "dilated", "depthwise", "1-D", "fp16", "bf16", "3-D", "dgrad 1x1 s2", "dgrad odd dy channels"])
def test_rxs_winograd_is_not_offered_where_miopen_would_not_run_it(excluded, admitted):
    _same_as_without(excluded)
    assert _rxs(excluded) is None
    assert _rxs(admitted) is not None


@pytest.mark.parametrize("excluded", [
    conv_graph(8, 256, (28, 28), 512, (1, 1), 2, groups=2),
    conv_graph(8, 256, (784,), 512, (1,), 2),
    conv_graph(8, 256, (28, 28), 512, (1, 1), 2, dtype=DType.FP16),
    conv_graph(8, 256, (28, 28), 512, (1, 1), 2, dtype=DType.BF16),
    conv_graph(2, 256, (8, 28, 28), 512, (1, 1, 1), 2),
], ids=["grouped", "1-D", "fp16", "bf16", "3-D"])
def test_the_1x1_stride_2_gemm_path_is_not_taken_where_miopen_would_not(excluded):
    _same_as_without(excluded)
    assert "layout transposes" in last_kernel(conv_graph(8, 256, (28, 28), 512, (1, 1), 2), MI25).note


def test_rxs_respects_the_shaders_size_limits():
    """C x H x W <= 2^28: 64 x 2048 x 2048 is exactly 2^28 (admitted), two more columns are not;
    every dimension under 2^16: a 65,535-row image is admitted, a 65,536-row one is not."""
    assert _rxs(conv_graph(1, 64, (2048, 2048), 64, (3, 3), 1, pad=1)) is not None
    assert _rxs(conv_graph(1, 64, (2048, 2050), 64, (3, 3), 1, pad=1)) is None
    assert _rxs(conv_graph(1, 32, (65535, 4), 32, (3, 3), 1, pad=1)) is not None
    assert _rxs(conv_graph(1, 32, (65536, 4), 32, (3, 3), 1, pad=1)) is None


def test_a_user_amd_target_without_the_new_fields_predicts_as_before(tmp_path):
    """A user's MI25-like file written before round 5 (no conv_winograd_rxs_efficiency, no
    conv_gemm_1x1_stride2, and their sources) loads with both absent and times a 5x5 stride-2 layer
    and a 1x1 stride-2 layer as the implicit GEMMs, exactly as the catalog MI25 with both removed."""
    text = (Path(__file__).resolve().parents[3] / "backends" / "catalog" / "mi25.toml").read_text()
    text = re.sub(rf"^({'|'.join(NEW_FIELDS)}) = .*\n", "", text, flags=re.M)
    text = text.replace('name = "mi25"', 'name = "my-vega"').replace('aliases = ["radeon-instinct-mi25"]', "")
    path = tmp_path / "my-vega.toml"
    path.write_text(text)
    user = load_target_file(path)
    assert all(getattr(user, f) is None for f in NEW_FIELDS)
    for g in (conv_graph(4, 64, (80, 80), 128, (5, 5), 2), conv_graph(8, 256, (28, 28), 512, (1, 1), 2)):
        t = last_kernel(g, user)
        assert "RxS" not in t.note and "transposes" not in t.note
        assert t.time_s == last_kernel(g, WITHOUT).time_s
        assert t.time_s != last_kernel(g, MI25).time_s          # the catalog MI25 takes MIOpen's kernels
