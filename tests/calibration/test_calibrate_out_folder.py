"""``calibrate --out`` is checked before anything is measured, and a folder it lacks is made.

QA: ``narrowpipe calibrate --quick --out /tmp/x/nodir/x.toml`` ran the whole calibration, then ended
in a FileNotFoundError traceback from ``dump_target``: the measurements were lost.
"""

from __future__ import annotations

import importlib

import pytest

from narrowpipe.backends import load_target_file
from narrowpipe.cli import main
from tests.calibration.test_fp16_rate import _measurements


@pytest.fixture()
def measuring(monkeypatch):
    """``run_all`` replaced by the synthetic 1-thread host's measurements, recording each call."""
    pytest.importorskip("torch")
    calls: list[str] = []
    module = importlib.import_module("narrowpipe.calibration.calibrate")

    def run_all(device, quick, progress):
        calls.append(device)
        return _measurements()
    monkeypatch.setattr(module, "run_all", run_all)
    return calls


def test_a_missing_output_folder_is_made_and_the_target_written(tmp_path, measuring, one_thread):
    out = tmp_path / "nodir" / "deeper" / "x.toml"
    assert main(["calibrate", "--quick", "--out", str(out)]) == 0
    assert measuring == ["cpu"] and load_target_file(out).vendor == "host"
    assert (out.parent / "x.measurements.json").exists()


@pytest.mark.parametrize("where, says", [
    ("afile/x.toml", "cannot create the folder {tmp}/afile: a file stands in its path"),
    ("afile/a/b/x.toml", "cannot create the folder {tmp}/afile/a/b: a file stands in its path"),
    (".", "is a folder; name the target file in it (e.g. {tmp}/host.toml)"),
])
def test_an_output_that_cannot_be_written_fails_before_measuring(tmp_path, capsys, measuring, where, says):
    (tmp_path / "afile").write_text("not a folder")
    out = tmp_path / where if where != "." else tmp_path
    assert main(["calibrate", "--quick", "--out", str(out)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "Traceback" not in err and f"--out {out}: " + says.format(tmp=tmp_path) in err
    assert measuring == []                  # nothing was measured for a file that could not be written
