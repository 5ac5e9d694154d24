"""A calibrated CPU's fp16 rate is its own, fitted from fp16 GEMMs; none is borrowed from bf16.

On one EPYC core (Zen 4: AVX512-BF16, no AVX512-FP16; torch 2.13) a 1024^3 GEMM ran 85 GFLOP/s in
fp32 and 202 in bf16 (QA), and in fp16 21.5 as ``F.linear`` (x @ W.T), 1.0 as ``torch.mm``
(PyTorch's reference loop; thread clock, 2026 session). A calibrated host file had no fp16 rate and
timed an fp16 ``nn.Linear(1024, 1024)`` at batch 1024 at the bf16 rate: 10.4 ms against 110 ms
measured (QA). The measurements here are synthetic at those rates, so the tests hold on any CI machine.
"""

from __future__ import annotations

import json

import pytest

from narrowpipe import analyze
from narrowpipe.calibration import host_target
from narrowpipe.calibration.host import HostCpu
from narrowpipe.calibration.measurement import Measurement
from narrowpipe.ir import DType
from tests.graph_builders import gemm_graph

DISPATCH = 2e-6
#: FLOP/s of 1024^3 GEMMs on the EPYC core, by dtype (fp16: as nn.Linear runs it, as calibrate measures it).
RATES = {"fp32": 85e9, "bf16": 202e9, "fp16": 21.5e9}


def _measurements(fp16: bool = True) -> list[Measurement]:
    out = [Measurement("dispatch", "fp32", (1,), 1, 12, DISPATCH)]
    for dtype, squares in (("fp32", (128, 256, 512, 1024, 2048)), ("bf16", (128, 256, 512, 1024, 2048)),
                           ("fp16", (256, 512, 1024, 2048) if fp16 else ())):
        for s in squares:
            flops = 2 * s**3
            # small GEMMs ramp up: 60% of the rate at 128, 90% at 256, the full rate from 512
            ramp = {128: 0.6, 256: 0.9}.get(s, 1.0)
            out.append(Measurement("matmul", dtype, (s, s, s), flops, 3 * s * s * DType.parse(dtype).nbytes(1),
                                   flops / (RATES[dtype] * ramp) + DISPATCH))
    for e in range(14, 25):
        n = 2**e
        out.append(Measurement("add", "fp32", (n,), n, 12 * n, 12 * n / 20e9 + DISPATCH))
    return out


HOST = HostCpu("Test CPU", cores=1, clock_hz=2.6e9, simd_bits=512, fma_units=2, bf16_simd=True, amx=False,
               l3_bytes=None)


def test_the_fp16_rate_is_fitted_from_fp16_gemms_and_gives_them_back():
    t = host_target(HOST, _measurements())
    assert t.sources["matrix_flops.fp16"].startswith("measured: fp16 GEMMs (square, 256, 512, 1024, 2048; x @ W.T")
    for s, ramp in ((256, 0.9), (512, 1.0), (1024, 1.0), (2048, 1.0)):
        # hand computation: the model's time is FLOPs / (fp16 peak x curve efficiency) + dispatch
        r = analyze(gemm_graph(s, s, s, DType.FP16), t, fusion="none", eager_overhead=False)
        assert r.time_s == pytest.approx(2 * s**3 / (RATES["fp16"] * ramp) + DISPATCH, rel=0.02)
    # and the bf16 and fp32 GEMMs keep theirs: 1024^3 at 202 and 85 GFLOP/s
    for dtype in ("bf16", "fp32"):
        r = analyze(gemm_graph(1024, 1024, 1024, DType.parse(dtype)), t, fusion="none", eager_overhead=False)
        assert r.time_s == pytest.approx(2 * 1024**3 / RATES[dtype] + DISPATCH, rel=0.02)


def test_an_fp16_linear_is_timed_at_the_measured_fp16_rate_not_bf16s():
    """The QA's case: nn.Linear 1024 -> 1024 at batch 1024 in fp16 measured 110 ms; at the bf16 rate
    the host file predicted 10.4 ms. At the fp16 rate fitted from linears measured in another
    session it is within 15% of the QA's measurement."""
    t = host_target(HOST, _measurements())
    fp16 = analyze(gemm_graph(1024, 1024, 1024, DType.FP16), t, fusion="none").time_s
    assert fp16 == pytest.approx(0.110, rel=0.15)
    bf16 = analyze(gemm_graph(1024, 1024, 1024, DType.BF16), t, fusion="none").time_s
    assert fp16 > 5 * bf16


def test_without_fp16_measurements_the_target_has_no_fp16_rate(tmp_path):
    """An older file (no fp16 GEMMs) gives a target without fp16, so the report names the fallback."""
    t = host_target(HOST, _measurements(fp16=False))
    assert "fp16" not in t.matrix_flops and "matrix_flops.fp16" not in t.sources


def test_calibrate_from_measurements_writes_the_fp16_rate_with_its_source(tmp_path, capsys):
    pytest.importorskip("torch")
    from narrowpipe.backends import load_target_file
    from narrowpipe.cli import main
    raw = tmp_path / "m.json"
    raw.write_text(json.dumps({"format": "narrowpipe.measurements", "version": 1, "threads": 1,
                               "measurements": [m.to_dict() for m in _measurements()]}))
    out = tmp_path / "host.toml"
    assert main(["calibrate", "--from-measurements", str(raw), "--out", str(out)]) == 0
    t = load_target_file(out)
    assert t.sources["matrix_flops.fp16"].startswith("measured: fp16 GEMMs")
    r = analyze(gemm_graph(1024, 1024, 1024, DType.FP16), t, fusion="none", eager_overhead=False)
    assert r.time_s == pytest.approx(2 * 1024**3 / RATES["fp16"] + DISPATCH, rel=0.02)
    printed = " ".join(capsys.readouterr().out.split())
    assert "fp16 21.5 GFLOP/s" in printed      # the GEMM plateau per dtype calibrate prints
