"""A measurements file applied to a chip of another kind is refused, naming the file's device: a CPU's
sweeps given to ``--base h100`` read as a large-GEMM efficiency of 0.0027 and the error blamed a busy
or throttled machine."""

import json

import pytest

from narrowpipe.backends import get_target
from narrowpipe.calibration.calibrate import calibrate, check_measured_device
from narrowpipe.calibration.measurement import Measurement
from narrowpipe.errors import NarrowpipeError

_CPU_ROWS = [  # what `calibrate --device cpu` takes: a 4096^3 fp32 GEMM at ~1 TFLOP/s and the eager stack
    Measurement("matmul", "fp32", (4096, 4096, 4096), 2 * 4096**3, 3 * 4096 * 4096 * 4, 0.137),
    Measurement("eager_model", "fp32", (2, 256, 4, 64), 0, 0, 0.004),
]


def _file(tmp_path, device, rows):
    path = tmp_path / "m.measurements.json"
    path.write_text(json.dumps({"format": "narrowpipe.measurements", "version": 1, "device": device,
                                "threads": 1, "measurements": [m.to_dict() for m in rows]}))
    return path


def test_cpu_measurements_for_a_gpu_base_name_the_cpu(tmp_path):
    path = _file(tmp_path, "Intel(R) Xeon(R) Processor", _CPU_ROWS)
    with pytest.raises(NarrowpipeError, match=r"measured on a CPU \('Intel\(R\) Xeon\(R\) Processor'.*gpu target"):
        calibrate(tmp_path / "h.toml", base="h100", from_measurements=path)
    assert not (tmp_path / "h.toml").exists()


def test_gpu_measurements_for_a_cpu_base_are_refused_and_a_gpu_base_is_not(tmp_path):
    rows = [Measurement("matmul", "bf16", (8192, 8192, 8192), 2 * 8192**3, 3 * 8192 * 8192 * 2, 0.0016)]
    path = _file(tmp_path, "H100 SXM", rows)
    with pytest.raises(NarrowpipeError, match="'H100 SXM', a GPU.*CPU target"):
        check_measured_device(path, rows, get_target("epyc-9755"))
    check_measured_device(path, rows, get_target("h100"))        # the same kind of chip: no objection
