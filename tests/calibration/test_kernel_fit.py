"""Fitting kernel terms: the fitter recovers the terms that generated a set of timings, timing
conventions are applied, and ``calibrate --from-measurements`` writes a usable target from a CSV."""

from __future__ import annotations

from pathlib import Path

import pytest

from narrowpipe.backends import get_target
from narrowpipe.calibration import calibrate
from narrowpipe.calibration.kernel_fit import (
    errors,
    fit_kernel_terms,
    fitted_target,
    kernel_cases,
    predict,
)
from narrowpipe.calibration.kernel_measurements import KernelMeasurement
from narrowpipe.errors import NarrowpipeError

SHAPES = [(1, m, n, k) for m in (256, 1024, 4096) for n in (256, 2048) for k in (256, 1024, 4096)] + \
    [(4, 512, 512, 512), (2, 2048, 256, 2048), (1, 8192, 8192, 1024), (8, 4096, 4096, 256), (1, 16384, 8192, 512)]
#: the last three run several waves of tiles: without them a latency floor and a per-wave fill
#: cannot be told apart


def _rows(chip: str, timing: str = "kernel") -> list[KernelMeasurement]:
    return [KernelMeasurement("T", chip, "gemm", "bf16", {"b": b, "m": m, "n": n, "k": k}, 1.0, timing)
            for b, m, n, k in SHAPES]


def _measured_as(target, rows, host=0.0):
    """The rows with the times ``target`` predicts (a chip whose true terms we know)."""
    cases = kernel_cases(rows, target)
    return [KernelMeasurement(**{**r.__dict__, "seconds": predict(c, target, host)}) for r, c in zip(rows, cases)]


def test_the_fit_recovers_the_gpu_terms_that_generated_the_timings():
    h100 = get_target("h100")
    truth = fitted_target(h100, {"gemm_latency": 7e-6, "gemm_wave_overhead": 1e-6, "gemm_epilogue_exposed": 0.25},
                          "truth")
    rows = _measured_as(truth, _rows("h100"))
    start = fitted_target(h100, {"gemm_latency": 1e-6, "gemm_wave_overhead": 0.0, "gemm_epilogue_exposed": 1.0},
                          "start")
    res = fit_kernel_terms(kernel_cases(rows, start), start, ["gemm_latency", "gemm_wave_overhead",
                                                              "gemm_epilogue_exposed"])
    assert res.values == pytest.approx({"gemm_latency": 7e-6, "gemm_wave_overhead": 1e-6,
                                        "gemm_epilogue_exposed": 0.25})
    assert max(abs(e) for e in errors(kernel_cases(rows, res.target), res.target)) < 1e-9


def test_the_fit_recovers_the_tpu_fold_overhead_and_a_host_overhead():
    v6e = get_target("tpu-v6e")
    truth = fitted_target(v6e, {"mxu_fold_overhead": 0.3}, "truth")
    rows = _measured_as(truth, _rows("tpu-v6e", "host"), host=100e-6)
    res = fit_kernel_terms(kernel_cases(rows, v6e), v6e, ["mxu_fold_overhead"])
    assert res.values["mxu_fold_overhead"] == pytest.approx(0.3)
    assert res.host_overhead == pytest.approx(100e-6)


def test_kernel_timing_leaves_out_the_launch_and_host_timing_adds_the_dispatch():
    h100 = get_target("h100")
    (kernel,), (stream,), (host,) = (kernel_cases(_rows("h100", t)[:1], h100) for t in ("kernel", "stream", "host"))
    assert predict(stream, h100) - predict(kernel, h100) == pytest.approx(h100.launch_overhead)
    assert predict(host, h100, 50e-6) - predict(stream, h100) == pytest.approx(50e-6)


def test_fitting_a_field_the_family_does_not_have_is_an_error():
    with pytest.raises(NarrowpipeError, match="cannot fit gemm_latency of a tpu target"):
        fit_kernel_terms(kernel_cases(_rows("tpu-v6e")[:2]), get_target("tpu-v6e"), ["gemm_latency"])


def test_calibrate_from_a_kernel_csv_writes_a_target_with_measured_terms(tmp_path):
    truth = fitted_target(get_target("b200"), {"gemm_latency": 3e-6, "gemm_wave_overhead": 2e-6,
                                               "matmul_efficiency": 0.7}, "truth")      # values on the grids
    rows = _measured_as(truth, _rows("b200"))
    csv = tmp_path / "mine.csv"
    csv.write_text("source,chip,kind,dtype,shape,measured_us,timing\n" + "".join(
        f"mine,b200,gemm,bf16,{r.shape_text},{r.seconds * 1e6!r},kernel\n" for r in rows))
    target = calibrate(tmp_path / "b200-mine.toml", base="b200", from_measurements=csv)
    assert target.name == "b200-calibrated"
    assert target.gemm_latency == pytest.approx(3e-6) and target.gemm_wave_overhead == pytest.approx(2e-6)
    assert target.matmul_efficiency == pytest.approx(0.7)
    assert target.source("gemm_latency").startswith("measured: fitted to mine.csv")
    assert get_target(str(tmp_path / "b200-mine.toml")).gemm_latency == pytest.approx(3e-6)
    with pytest.raises(NarrowpipeError, match="pass --base"):
        calibrate(tmp_path / "x.toml", from_measurements=csv)


def test_the_cli_calibrates_a_chip_from_a_kernel_csv(tmp_path, capsys):
    from narrowpipe.cli import main
    rows = _measured_as(get_target("h100"), _rows("h100"))
    csv = tmp_path / "h100.csv"
    csv.write_text("source,chip,kind,dtype,shape,measured_us,timing\n" + "".join(
        f"mine,h100,gemm,bf16,{r.shape_text},{r.seconds * 1e6!r},kernel\n" for r in rows))
    out = tmp_path / "mine.toml"
    assert main(["calibrate", "--base", "h100", "--from-measurements", str(csv), "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out and get_target(str(out)).name == "h100-sxm-calibrated"
    # compared beside its base, the fitted chip must not read as the same chip
    assert get_target(str(out)).display_name == f"{get_target('h100').display_name} (fitted to h100.csv)"


def _conv_rows(chip: str) -> list[KernelMeasurement]:
    """Stride-1 same-padded 3x3 fp16 forward convolutions: many rows, as DeepBench has per chip."""
    return [KernelMeasurement("T", chip, "conv_fwd", "fp16",
                              {"n": n, "c": c, "h": hw, "w": hw, "k": k, "r": 3, "s": 3, "ph": 1, "pw": 1,
                               "sh": 1, "sw": 1}, 1.0, "kernel")
            for n in (1, 8) for c in (64, 256) for hw in (7, 28) for k in (64, 256)]


def test_the_fit_recovers_a_gemm_floor_among_many_convolution_rows():
    """Truth: GEMMs pay 5 us, convolutions 14 us (the GEMM and the convolution library's floors).
    16 convolution rows and 6 GEMMs, both floors starting at 10 us: both are recovered."""
    t4 = get_target("t4")
    truth = fitted_target(t4, {"gemm_latency": 5e-6, "conv_latency": 14e-6}, "truth")
    gemms = [KernelMeasurement("T", "t4", "gemm", "fp16", {"b": 1, "m": m, "n": n, "k": k}, 1.0, "kernel")
             for m, n, k in ((512, 16, 512), (1024, 32, 512), (2048, 64, 1024), (512, 512, 512),
                             (4096, 4096, 256), (1024, 1024, 2048))]
    rows = _measured_as(truth, gemms + _conv_rows("t4"))
    start = fitted_target(t4, {"gemm_latency": 10e-6, "conv_latency": 10e-6}, "start")
    res = fit_kernel_terms(kernel_cases(rows, start), start, ["gemm_latency", "conv_latency"])
    assert res.values == pytest.approx({"gemm_latency": 5e-6, "conv_latency": 14e-6})


def _xla_rows(chip: str, n: int = 20) -> list[str]:
    data = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "kernels_xla_gemm.csv"
    lines = [x for x in data.read_text().splitlines() if x and not x.startswith("#")]
    return [lines[0], *[x for x in lines[1:] if f",{chip},gemm,bf16," in x][:n]]


def test_from_measurements_refuses_rows_of_another_chip_and_bad_rows(tmp_path, capsys):
    """QA: rows measured on another (or a made-up) chip were fitted into --base; an infinite time and
    a short row crashed with tracebacks; a TF32 term without TF32 rows was stamped as fitted."""
    from narrowpipe.cli import main
    rows = _xla_rows("h100-sxm")
    cases = {"other.csv": ([rows[0], *(x.replace(",h100-sxm,", ",h900,") for x in rows[1:])],
                           "rows were measured on h900 (20 rows)"),
             "inf.csv": ([*rows[:5], "X,h100,gemm,bf16,b=1 m=256 n=256 k=256,inf,kernel,,"],
                         "data line 6: measured_us must be a positive, finite number"),
             "short.csv": ([*rows[:5], "X,h100,gemm,bf16,b=1 m=256 n=256 k=256"],
                           "data line 6: missing measured_us, timing")}
    for name, (lines, says) in cases.items():
        path = tmp_path / name
        path.write_text("\n".join(lines) + "\n")
        assert main(["calibrate", "--from-measurements", str(path), "--base", "h100", "--out",
                     str(tmp_path / "o.toml")]) == 2, name
        err = " ".join(capsys.readouterr().err.split())
        assert says in err and "Traceback" not in err, name
    good = tmp_path / "good.csv"
    good.write_text("\n".join(rows) + "\n")
    out = tmp_path / "g.toml"
    assert main(["calibrate", "--from-measurements", str(good), "--base", "h100", "--out", str(out)]) == 0
    fitted = get_target(out)
    assert "good.csv" not in fitted.sources["gemm_tile_feed_bandwidth_tf32"]      # no TF32 rows: not refitted
    assert "good.csv" in fitted.sources["gemm_latency"]
