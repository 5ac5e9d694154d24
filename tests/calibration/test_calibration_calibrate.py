"""Calibration on this machine (quick sweep): the target file round-trips and every command takes it."""

from __future__ import annotations

import dataclasses
import json

import pytest

torch = pytest.importorskip("torch")

import narrowpipe  # noqa: E402
from narrowpipe.backends import dump_target, get_target, load_target_file  # noqa: E402
from narrowpipe.calibration import apply_measurements, load_measurements, measurements_path  # noqa: E402
from narrowpipe.calibration.robust import CalibrationError, CalibrationWarning  # noqa: E402
from narrowpipe.cli import main  # noqa: E402
from narrowpipe.errors import NarrowpipeError  # noqa: E402
from narrowpipe.models.examples import load_example  # noqa: E402

pytestmark = pytest.mark.timing   # it measures this host: the other test workers wait (tests/host_lock.py)


def test_target_file_round_trips_and_has_measured_curves(host, tmp_path):
    t = load_target_file(host)
    assert t.family == "cpu" and t.cores == 1
    assert t.matmul_curve and t.bandwidth_curve and t.conv_curve and t.transcendental_flops
    assert 0 < t.matmul_efficiency <= 1 and t.launch_overhead > 0
    assert all(src for src in t.sources.values())
    again = dump_target(t, tmp_path / "again.toml")
    assert load_target_file(again) == t
    raw = json.loads(measurements_path(host).read_text())
    assert raw["format"] == "narrowpipe.measurements" and len(raw["measurements"]) > 20


def test_every_command_accepts_the_calibrated_target(host, capsys):
    g = load_example("gpt2")
    r = narrowpipe.analyze(g, str(host), seq=64)
    assert r.time_s > 0 and r.timing.fusion == "none"
    assert narrowpipe.compare(g, [str(host), "h100"], seq=64).reports[0].target == "host"
    assert main(["analyze", "gpt2", "--target", str(host), "--set", "seq=32"]) == 0
    assert main(["compare", "resnet50", "--targets", f"{host},h100"]) == 0
    assert main(["whatif", "bert-base", "--target", str(host), "--scale", "peak_flops=2", "--set", "seq=32"]) == 0


def test_measurements_calibrate_a_catalog_chip(host, tmp_path):
    """A chip's own measurements replace its fitted ceilings and keep its peaks (here the host's
    file stands in for a catalog chip: measurements of another chip would be refused, below)."""
    measurements = load_measurements(measurements_path(host))
    base = dataclasses.replace(load_target_file(host), name="base-chip")
    mine = apply_measurements(base, measurements, "mine")
    assert mine.matrix_flops == base.matrix_flops and mine.name == "mine"
    assert mine.display_name == f"{base.display_name} (calibrated)"
    assert mine.matmul_curve and mine.sources["matmul_curve"].startswith("measured")
    out = tmp_path / "mine.toml"
    assert main(["calibrate", "--base", str(host), "--from-measurements", str(measurements_path(host)),
                 "--out", str(out)]) == 0
    assert load_target_file(out).launch_overhead == pytest.approx(mine.launch_overhead)


def test_measurements_of_another_chip_are_refused(host):
    """This CPU's GEMMs reach ~0.1% of an H100's peak: not an H100 measurement, so no target file."""
    with pytest.raises(CalibrationError, match="large-GEMM efficiency came out at"):
        apply_measurements(get_target("h100"), load_measurements(measurements_path(host)), "my-h100")


def test_noisy_points_are_dropped_and_gemm_curves_made_monotone():
    from narrowpipe.calibration.robust import drop_outliers, monotone, plausible_rates
    assert drop_outliers([0.80, 0.81, 0.79, 0.80, 0.0003]) == [0.80, 0.81, 0.79, 0.80]
    assert drop_outliers([1.0, 1.0, 1.0]) == [1.0, 1.0, 1.0]
    curve = monotone([(1e6, 0.1), (1e8, 0.5), (1e9, 0.3), (1e10, 0.7)])    # a dip is interference
    assert [y for _, y in curve] == [0.1, 0.4, 0.4, 0.7] and [x for x, _ in curve] == [1e6, 1e8, 1e9, 1e10]
    with pytest.warns(CalibrationWarning, match="exp 33 M/s"):
        kept = plausible_rates({"exp": 33e6, "tanh": 4e8}, 166e9, "function")
    assert kept == {"tanh": 4e8}


def test_bad_measurement_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "m.json"
    bad.write_text("{}")
    with pytest.raises(NarrowpipeError, match="m.json"):
        load_measurements(bad)


def test_a_nan_measurement_is_refused_by_its_path(tmp_path):
    """Python's json reads NaN, which would have fitted a NaN rate into the target silently."""
    nan = tmp_path / "nan.json"
    nan.write_text('{"measurements": [{"kind": "add", "dtype": "float32", "shape": [1024], "flops": 1024, '
                   '"bytes": 12288, "seconds": NaN}]}')
    with pytest.raises(NarrowpipeError, match="nan.json: measurements/0/seconds is not a finite number"):
        load_measurements(nan)
