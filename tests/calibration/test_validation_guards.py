"""validate refuses what it cannot answer (a non-CPU target, a model too big for this machine)
before building anything, reports the spread of its repeats, and keeps torch's native profiler
log lines out of its output."""

from __future__ import annotations

import os
import sys

import pytest

from narrowpipe.backends import get_target
from narrowpipe.calibration.guards import (
    ValidationError,
    check_fits_in_memory,
    check_target_family,
    quiet_native_stderr,
)
from narrowpipe.calibration.timer import spread
from narrowpipe.calibration.validate import validate_model, validation_param_count
from narrowpipe.errors import NarrowpipeError


def test_a_gpu_or_tpu_target_is_refused_and_a_cpu_target_accepted():
    for name in ("h100", "tpu-v5e", "groq-lpu"):
        with pytest.raises(ValidationError, match="CPU measurements say nothing"):
            check_target_family(get_target(name))
    check_target_family(get_target("epyc-9755"))
    assert issubclass(ValidationError, NarrowpipeError)


def test_validate_model_refuses_before_building_the_model(monkeypatch):
    import narrowpipe.calibration.validate as v

    def boom(*a, **k):
        raise AssertionError("the model was built")
    monkeypatch.setattr(v, "build_validation_model", boom)
    with pytest.raises(ValidationError):
        validate_model("gpt2", "h100", tiny=True)


def test_a_model_bigger_than_free_memory_is_refused_with_the_numbers():
    params = validation_param_count("llama-3-70b")
    assert 69e9 < params < 72e9                                     # counted on the meta device
    with pytest.raises(ValidationError, match=r"needs about 5\d\d GB"):
        check_fits_in_memory("llama-3-70b", params, available=24 << 30)
    check_fits_in_memory("gpt2", validation_param_count("gpt2", tiny=True), available=24 << 30)


def test_spread_is_the_interquartile_range_over_the_median():
    assert spread([1.0]) == 0.0
    assert spread([1.0, 1.0, 1.0, 1.0, 1.0]) == 0.0
    assert spread([0.9, 1.0, 1.0, 1.1, 1.0]) == pytest.approx((1.0 - 1.0) / 1.0)
    assert spread([0.8, 0.9, 1.0, 1.1, 1.2]) == pytest.approx((1.1 - 0.9) / 1.0)


def test_native_writes_to_stderr_are_silenced_and_stderr_restored(capfd):
    with quiet_native_stderr():
        os.write(2, b"profiler_start\n")
    os.write(2, b"after\n")
    sys.stderr.flush()
    err = capfd.readouterr().err
    assert "profiler_start" not in err and "after" in err
