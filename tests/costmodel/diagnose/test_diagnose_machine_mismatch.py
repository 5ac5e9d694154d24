"""A trace judged on a machine of another kind warns both ways, and a CUDA run profiled with CPU
activity only says its op durations are host launch times, not the GPU's."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from narrowpipe.costmodel.diagnose import diagnose
from narrowpipe.errors import NarrowpipeWarning

_MM = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 8000,
       "args": {"Input Dims": [[1024, 1024], [1024, 1024]], "Input type": ["float", "float"]}}


def _trace(tmp_path: Path, **top: object) -> Path:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"record_shapes": 1, **top, "traceEvents": [_MM]}))
    return p


def _warned(path: Path, target: str) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d = diagnose(path, target)
    return [str(w.message) for w in caught if issubclass(w.category, NarrowpipeWarning)] + d.notes


def test_a_cpu_trace_judged_on_a_gpu_target_warns(tmp_path: Path) -> None:
    said = _warned(_trace(tmp_path), "h100")
    assert any("recorded on a CPU" in s and "h100-sxm, a gpu target" in s for s in said)


def test_a_cpu_trace_judged_on_a_cpu_target_does_not_warn(tmp_path: Path) -> None:
    said = _warned(_trace(tmp_path), "epyc-9755")
    assert not any("recorded on a CPU" in s for s in said)
    assert "CPU trace: op durations on the host are the measured times" in said


@pytest.mark.parametrize("target", ["h100", "epyc-9755"])
def test_a_cuda_run_without_kernel_events_says_durations_are_launch_times(tmp_path: Path, target: str) -> None:
    """QA's gpu/s7_cpu_activity_only_cuda_run.json: deviceProperties lists an H100, no kernel events."""
    said = _warned(_trace(tmp_path, deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]), target)
    assert any("NVIDIA H100 80GB HBM3" in s and "launch times" in s for s in said)
    assert "CPU trace: op durations on the host are the measured times" not in said
    assert not any("recorded on a CPU" in s for s in said)
