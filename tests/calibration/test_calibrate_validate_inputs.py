"""calibrate measures only a real device at a real thread count, and validate only compares like with
like: a host file at the threads it was calibrated with, on the machine it describes.

QA: ``calibrate --device meta --quick`` wrote a target (100% GEMM plateau, 10 GB/s, 56.7 us
dispatch); ``--device tpu`` and ``--threads -3`` ended in tracebacks, ``--threads 0`` ran at the
default; ``validate gpt2 --tiny`` of a 1-thread host file at ``--threads 2`` read +72.7% with no
word of the mismatch, and of the 128-core catalog xeon-6980p on this 2-CPU VM -97.5%;
``validate mobilenet-v2 --seq 64`` ignored --seq.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from narrowpipe.backends import dump_target, get_target, load_target_file
from narrowpipe.calibration.guards import (
    ValidationError,
    ValidationWarning,
    check_this_machine,
    check_threads,
)
from narrowpipe.cli import main


def _fails(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return " ".join(err.split())


@pytest.mark.parametrize("device", ["meta", "tpu", "cpu:0", "cuda:x", "mps"])
def test_calibrate_refuses_a_device_that_is_not_a_cpu_or_cuda_gpu(capsys, tmp_path, device):
    pytest.importorskip("torch")
    out = tmp_path / "c.toml"
    err = _fails(capsys, ["calibrate", "--device", device, "--quick", "--out", str(out)])
    assert f"--device '{device}': calibrate measures this machine's CPU ('cpu') or a CUDA GPU" in err
    assert not out.exists()


@pytest.mark.parametrize("threads", ["0", "-3", "two"])
def test_calibrate_threads_must_be_a_positive_whole_number(capsys, threads):
    with pytest.raises(SystemExit) as e:
        main(["calibrate", "--threads", threads, "--quick"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and ("must be 1 or more" in err or "is not a whole number" in err)


def _measurements_file(tmp_path, threads: int):
    """A measurements file of a 1-thread host (the synthetic one of test_fp16_rate)."""
    from tests.calibration.test_fp16_rate import _measurements
    raw = tmp_path / "m.json"
    raw.write_text(json.dumps({"format": "narrowpipe.measurements", "version": 1, "threads": threads,
                               "measurements": [m.to_dict() for m in _measurements()]}))
    return raw


def test_a_fit_of_a_measurements_file_takes_the_files_threads(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    raw, out = _measurements_file(tmp_path, 1), tmp_path / "host.toml"
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert main(["calibrate", "--from-measurements", str(raw), "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(before)
    t = load_target_file(out)
    assert t.cores == 1 and "(1 thread, calibrated)" in t.display_name     # was this process's 2
    err = _fails(capsys, ["calibrate", "--from-measurements", str(raw), "--threads", "2", "--out", str(out)])
    assert "--threads 2: " in err and "was measured at 1 thread(s)" in err


def _host_file(tmp_path, cores: int = 1):
    """A calibrated host file (vendor "host") of ``cores`` threads."""
    t = dataclasses.replace(get_target("epyc-9755"), name="host", vendor="host", aliases=(), cores=cores,
                            display_name=f"AMD EPYC ({cores} thread, calibrated)")
    return dump_target(t, tmp_path / "host.toml")


def test_a_host_file_is_validated_only_at_the_threads_it_was_calibrated_with(tmp_path, capsys):
    host = load_target_file(_host_file(tmp_path))
    check_threads(host, 1)
    says = r"calibrated at 1 thread \(its rates are 1 thread's\), but torch runs 2 threads here"
    with pytest.raises(ValidationError, match=says):
        check_threads(host, 2)
    check_threads(get_target("epyc-9755"), 2)           # a catalog chip has no calibration threads
    pytest.importorskip("torch")
    err = _fails(capsys, ["validate", "gpt2", "--tiny", "--target", str(_host_file(tmp_path)), "--batch", "8",
                          "--threads", "2"])
    assert "Validate at --threads 1, or calibrate at --threads 2" in err


def test_a_target_that_is_not_this_machine_is_named_as_such():
    why = check_this_machine(get_target("xeon-6980p"), "AMD EPYC", 2)
    assert why is not None and "catalog's Intel Xeon 6 6980P (128 cores), not this machine (AMD EPYC, 2 CPUs)" in why
    assert check_this_machine(get_target("epyc-9755"), "AMD EPYC", 2) is not None           # a VM hides the model
    assert check_this_machine(get_target("epyc-9755"), "AMD EPYC 9755 128-Core Processor", 256) is None
    host = dataclasses.replace(get_target("epyc-9755"), vendor="host",
                               display_name="AMD EPYC (1 thread, calibrated)")
    assert check_this_machine(host, "AMD EPYC", 2) is None
    elsewhere = check_this_machine(host, "Intel Xeon 8480+", 8)
    assert elsewhere is not None and "was calibrated on 'AMD EPYC', not on this machine" in elsewhere
    assert check_this_machine(get_target("h100"), "AMD EPYC", 2) is None    # refused by the family check instead


def test_validate_warns_before_it_builds_the_model(monkeypatch):
    pytest.importorskip("torch")
    import narrowpipe.calibration.guards as guards
    import narrowpipe.calibration.model_validation as mv
    monkeypatch.setattr(guards, "check_this_machine", lambda *a: "not this machine")

    def boom(*a, **k):
        raise AssertionError("the model was built")
    monkeypatch.setattr(mv, "build_validation_model", boom)
    with pytest.warns(ValidationWarning, match="not this machine"), pytest.raises(AssertionError, match="built"):
        mv.validate_model("gpt2", "xeon-6980p", tiny=True)


def test_validate_refuses_seq_for_an_image_model(capsys, tmp_path):
    pytest.importorskip("torch")
    err = _fails(capsys, ["validate", "mobilenet-v2", "--tiny", "--target", str(_host_file(tmp_path)),
                          "--seq", "64"])
    assert "--seq 64: mobilenet-v2 is an image model, it has no sequence dim" in err
