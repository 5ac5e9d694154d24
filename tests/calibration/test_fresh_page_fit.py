"""calibrate's fresh-page rate: a just-mapped fill minus a mapped fill, per byte; the adds whose
output is mapped fresh enter the bandwidth curve without that time (synthetic measurements)."""

from __future__ import annotations

import pytest

from narrowpipe.calibration.fit import fit_curves, fresh_page_bandwidth
from narrowpipe.calibration.sweeps import Measurement

MIB = 2**20


def _fills(fresh_bw: float, stream_bw: float) -> list[Measurement]:
    out = []
    for nbytes in (64 * MIB, 128 * MIB):
        n = nbytes // 4
        fill = nbytes / stream_bw
        out += [Measurement("fill", "fp32", (n,), 0, nbytes, fill),
                Measurement("fresh_fill", "fp32", (n,), 0, nbytes, fill + nbytes / fresh_bw)]
    return out


def test_the_rate_is_the_extra_time_of_a_fresh_fill_per_byte():
    assert fresh_page_bandwidth(_fills(2.5e9, 30e9)) == pytest.approx(2.5e9)
    assert fresh_page_bandwidth([]) is None


def test_adds_over_the_threshold_lose_their_fresh_pages_before_the_bandwidth_fit():
    """Two adds streaming at the same 40 GB/s; the 48 MiB-output one also faulted its output in."""
    stream, fresh = 40e9, 2.5e9
    adds = []
    for n in (4 * MIB, 12 * MIB):                 # outputs of 16 MiB (heap) and 48 MiB (mmap)
        nbytes = 3 * 4 * n
        t = nbytes / stream + (4 * n / fresh if 4 * n >= 32 * MIB else 0.0)
        adds.append(Measurement("add", "fp32", (n,), n, nbytes, t))
    with_fills = fit_curves(adds + _fills(fresh, 30e9), {"fp32": 1e11})
    assert with_fills.fresh_page_bandwidth == pytest.approx(fresh)
    assert [y for _, y in with_fills.bandwidth_curve] == [1.0, 1.0]          # both stream at 40 GB/s
    assert with_fills.best_bandwidth == pytest.approx(stream)
    without = fit_curves(adds, {"fp32": 1e11})                               # an old measurements file
    assert without.fresh_page_bandwidth is None and without.bandwidth_curve[-1][1] < 0.2


def test_a_convolution_faster_than_the_derived_peak_raises_it_so_no_efficiency_is_clipped():
    """A host whose lscpu clock gives 100 GFLOP/s, a GEMM at 60 and a 3x3 convolution at 150: the
    peak becomes 150 (the measurement wins, said in the source) and the convolution's efficiency 1."""
    from narrowpipe.calibration.fit import host_target
    from narrowpipe.calibration.host import HostCpu
    host = HostCpu("test CPU", 1, 1.5625e9, 512, 2, False, False, None)     # 1 x 16 x 2 x 2 x 1.5625 = 100 GF/s
    gemm = Measurement("matmul", "fp32", (512, 512, 512), 2 * 512**3, 0, 2 * 512**3 / 60e9)
    conv_flops = 2 * 64 * 64 * 9 * 56 * 56
    conv = Measurement("conv", "fp32", (64, 64, 3, 1, 56), conv_flops, 0, conv_flops / 150e9)
    t = host_target(host, [Measurement("dispatch", "fp32", (1,), 1, 12, 0.0), gemm, conv])
    assert t.matrix_flops["fp32"] == pytest.approx(150e9)
    assert t.source("matrix_flops.fp32").startswith("measured:")
    assert dict(t.conv_curve)[9.0] == pytest.approx(1.0)
    assert t.matmul_efficiency == pytest.approx(0.4)
