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


_RECORDED_CPU = Path(__file__).resolve().parents[2] / "golden" / "traces" / "gpt2-tiny-cpu.json.gz"


@pytest.mark.parametrize("target", ["h100", "groq-lpu"])
def test_a_recorded_cpu_trace_on_another_family_is_cautioned_beside_its_label(target: str) -> None:
    """QA: a torch.profiler trace recorded on a CPU, judged on an H100 or Groq, printed
    "LATENCY-BOUND ... MFU 0.0%" with the mismatch only as a warning after every table. The
    diagnosis carries it (JSON too) and the summary prints it right under the label."""
    from rich.console import Console

    from narrowpipe.cli import main
    from narrowpipe.render.diagnosis import diagnosis_summary
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NarrowpipeWarning)
        d = diagnose(_RECORDED_CPU, target)
    assert d.mode == "cpu" and "recorded on a CPU" in d.machine_mismatch and d.target in d.machine_mismatch
    assert d.to_dict()["machine_mismatch"] == d.machine_mismatch
    console = Console(record=True, width=300)
    console.print(diagnosis_summary(d))
    lines = console.export_text().splitlines()
    label = next(i for i, line in enumerate(lines) if line.strip().startswith("label"))
    assert lines[label + 1].strip().startswith("caution") and "recorded on a CPU" in lines[label + 1]
    assert main(["diagnose", str(_RECORDED_CPU), "--target", target, "-q"]) == 0


def test_a_recorded_cpu_trace_on_a_cpu_target_has_no_caution() -> None:
    d = diagnose(_RECORDED_CPU, "epyc-9755")
    assert d.machine_mismatch == ""
