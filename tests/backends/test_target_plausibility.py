"""A user's target file with a number far outside its family's catalog range is warned about (the
likely unit slip: GB/s written under a ``_tbps`` key), and real chips, large or small, are not."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from narrowpipe.backends import dump_target, get_target, load_target_file
from narrowpipe.backends.plausibility import ImplausibleSpecWarning


def _written(tmp_path: Path, chip: str, old: str, new: str) -> Path:
    """The catalog chip's own file with one line changed."""
    path = tmp_path / f"{chip}.toml"
    dump_target(get_target(chip), path)
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))
    return path


def _implausible(path: Path) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_target_file(path)
    return [str(w.message) for w in caught if issubclass(w.category, ImplausibleSpecWarning)]


def test_gb_per_s_under_a_tbps_key_is_warned_with_the_catalog_extreme(tmp_path: Path) -> None:
    # H100's 3.35 TB/s written as 3350 (its GB/s figure): B200's 8 TB/s is the catalog's largest GPU
    # bandwidth, so 3350 is 3350 / 8 = 419x above it
    path = _written(tmp_path, "h100", "memory_bandwidth_tbps = 3.35", "memory_bandwidth_tbps = 3350")
    (msg,) = _implausible(path)
    assert str(path) in msg and "memory_bandwidth_tbps = 3350 (419x above the largest, 8 on b200)" in msg
    assert get_target(path).memory_bandwidth == pytest.approx(3.35e15)    # a warning: the value stands


def test_a_rate_table_entry_names_its_dtype(tmp_path: Path) -> None:
    path = _written(tmp_path, "h100", "\nbf16 = 989\n", "\nbf16 = 989000\n")
    (msg,) = _implausible(path)
    assert re.search(r"matrix_tflops\.bf16 = 989000 \(\d+x above the largest, [\d.]+ on \w+", msg)


def test_catalog_chips_written_out_and_read_back_are_not_warned(tmp_path: Path) -> None:
    for chip in ("h100", "t4", "mi300x", "tpu-v5e", "groq-lpu", "xeon-6980p"):
        path = tmp_path / f"{chip}.toml"
        dump_target(get_target(chip), path)
        assert _implausible(path) == [], chip


def test_small_devices_are_not_warned_but_a_thousandfold_slip_below_is(tmp_path: Path) -> None:
    # a 2-core VM calibrated here has 1/30 of the smallest catalog CPU's memory and 1/7,000 of
    # Xeon 6980P's fp16 matmul rate (no AMX): real, no warning
    assert _implausible(_written(tmp_path, "xeon-6980p", "memory_capacity_gb = 768", "memory_capacity_gb = 24")) == []
    assert _implausible(_written(tmp_path, "xeon-6980p", "fp16 = 262144", "fp16 = 36")) == []
    # 768 GB written under a _tb key is not a slip this check can see; 0.0768 GB (768 GB read as MB) is
    (msg,) = _implausible(_written(tmp_path, "xeon-6980p", "memory_capacity_gb = 768", "memory_capacity_gb = 0.0768"))
    assert "memory_capacity_gb = 0.0768" in msg and "below the least" in msg
