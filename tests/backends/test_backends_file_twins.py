"""A user's file that keeps a catalog chip's name with other numbers, and what a user's file is told
about its unsourced numbers: QA93 findings 3 and 5.

QA copied ``backends/catalog/h100-sxm.toml``, set ``memory_bandwidth_tbps = 6.7`` and passed the copy as
``--targets FILE``: it was reported as ``h100-sxm`` (5.79 ms against the real H100's 9.95), with the
catalog H100's "6.0%/22% on 376 timings" kernel check and no warning. The unsourced warning of a user's
file named ``tdp, clock_hz, l2_bytes`` where the file writes ``tdp_w, clock_mhz, l2_mb``, and came
before a hard error about the same file.
"""

from __future__ import annotations

import warnings

import pytest

import narrowpipe
from narrowpipe.backends import get_target, load_target_file
from narrowpipe.backends.kernel_checks import check_text, kernel_check
from narrowpipe.backends.registry import CATALOG_DIR, file_target
from narrowpipe.backends.sourcing import UnsourcedSpecWarning
from narrowpipe.backends.twins import CatalogNameWarning, differing_fields
from narrowpipe.errors import TargetSpecError
from narrowpipe.models.examples import load_example

H100 = (CATALOG_DIR / "h100-sxm.toml").read_text()


def _copy(tmp_path, name: str, *edits: tuple[str, str], drop: str = ""):
    """The catalog H100 file with ``edits`` made and the lines of key ``drop`` (value and source) gone."""
    text = "\n".join(line for line in H100.splitlines() if not drop or not line.startswith(f"{drop} ")) + "\n"
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_changed_copy_of_a_catalog_chip_is_renamed_and_not_claimed_checked(tmp_path):
    """The copy differs in exactly the one key edited by hand (memory_bandwidth_tbps); it is named
    h100-sxm@h100-same.toml, drops the catalog's aliases, and has no kernel check of its own."""
    path = _copy(tmp_path, "h100-same.toml", ("memory_bandwidth_tbps = 3.35", "memory_bandwidth_tbps = 6.7"))
    with pytest.warns(CatalogNameWarning) as caught:
        chip = get_target(str(path))
    (message,) = [str(w.message) for w in caught if w.category is CatalogNameWarning]
    assert "differs in memory_bandwidth_tbps;" in message and "'h100-sxm@h100-same.toml'" in message
    assert chip.name == "h100-sxm@h100-same.toml" and chip.aliases == ()
    assert chip.memory_bandwidth == 6.7e12                          # the file's number, kept
    assert "h100-same.toml" in chip.display_name
    assert kernel_check(chip) is None and check_text(chip.name) == "unchecked"
    assert kernel_check(get_target("h100")) is not None             # the catalog chip keeps its check
    with pytest.warns(CatalogNameWarning):
        written, reported = file_target(path)
    assert written.name == "h100-sxm" and reported.name == chip.name


def test_the_python_api_reports_the_copy_beside_the_catalog_chip_under_two_names(tmp_path):
    """Both in one comparison (refused before as two targets named 'h100-sxm'); the copy's 2x bandwidth
    shows in a memory-bound decode-sized run (batch 1, seq 1: weights streamed once)."""
    path = _copy(tmp_path, "h100-same.toml", ("memory_bandwidth_tbps = 3.35", "memory_bandwidth_tbps = 6.7"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CatalogNameWarning)
        c = narrowpipe.compare(load_example("gpt2"), ["h100", str(path)], seq=1)
    assert [r.target for r in c.reports] == ["h100-sxm", "h100-sxm@h100-same.toml"]
    assert c.reports[1].time_s < c.reports[0].time_s


def test_a_copy_saved_under_the_catalog_file_name_still_differs_from_the_catalog_chip(tmp_path):
    """The file's stem alone would be 'h100-sxm' again: the label keeps the chip name and the file name."""
    path = _copy(tmp_path, "h100-sxm.toml", ("tdp_w = 700", "tdp_w = 500"))
    with pytest.warns(CatalogNameWarning, match="differs in tdp_w;"):
        assert get_target(str(path)).name == "h100-sxm@h100-sxm.toml"


def test_differing_fields_are_named_as_the_file_writes_them(tmp_path):
    """By hand: the copy edits clock_mhz, one entry of [matrix_tflops] and drops attention_efficiency
    (and its source); nothing else differs."""
    path = _copy(tmp_path, "mine.toml", ("clock_mhz = 1830", "clock_mhz = 1980"),
                 ("\nbf16 = 989\n", "\nbf16 = 1000\n"), drop="attention_efficiency")
    with pytest.warns(CatalogNameWarning) as caught:
        get_target(str(path))
    (message,) = [str(w.message) for w in caught if w.category is CatalogNameWarning]
    assert "differs in matrix_tflops.bf16, clock_mhz, attention_efficiency (not in the file);" in message
    chip = load_target_file(path)
    assert differing_fields(chip, get_target("h100")) == ["matrix_flops.bf16", "clock_hz", "attention_efficiency"]


def test_a_copy_with_the_catalog_numbers_is_the_catalog_chip(tmp_path):
    """Only the display name, notes and a source edited: the same chip, its name and check kept."""
    path = _copy(tmp_path, "h100-notes.toml", ('display_name = "NVIDIA H100 SXM5 80GB"', 'display_name = "our H100"'),
                 ('tdp_w = "NV-H100"', 'tdp_w = "our measurement"'))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CatalogNameWarning)
        chip = get_target(str(path))
    assert chip.name == "h100-sxm" and kernel_check(chip) == kernel_check("h100-sxm") is not None
    assert differing_fields(chip, get_target("h100")) == []
    in_gbps = _copy(tmp_path, "h100-gbps.toml", ("memory_bandwidth_tbps = 3.35", "memory_bandwidth_gbps = 3350"),
                    ('memory_bandwidth_tbps = "NV', 'memory_bandwidth_gbps = "NV'))
    assert get_target(str(in_gbps)).name == "h100-sxm"   # the same number in another unit


USER_GPU = """name = "my-gpu"
family = "gpu"
vendor = "Acme"
display_name = "Acme X1"
memory_capacity_gib = 48
memory_bandwidth_tbps = 1.0
tdp_w = 400
sm_count = 100
clock_mhz = 1500
l2_mb = 40
[matrix_tflops]
bf16 = 400
[vector_tflops]
fp32 = 50
[sources]
memory_capacity_gib = "made up"
memory_bandwidth_tbps = "made up"
matrix_tflops = "made up"
sm_count = "made up"
"""


def test_the_unsourced_warning_names_the_files_keys(tmp_path):
    """The file writes vector_tflops.fp32, tdp_w, clock_mhz and l2_mb without a source (by hand, in
    the schema's field order); it said vector_flops.fp32, tdp, clock_hz, l2_bytes."""
    path = tmp_path / "my-gpu.toml"
    path.write_text(USER_GPU)
    with pytest.warns(UnsourcedSpecWarning) as caught:
        load_target_file(path)
    (message,) = [str(w.message) for w in caught]
    assert "no source for vector_tflops.fp32, tdp_w, clock_mhz, l2_mb;" in message
    for internal in ("clock_hz", "l2_bytes", "vector_flops", "tdp,"):
        assert internal not in message


def test_a_file_that_fails_to_load_is_not_also_warned_about_its_sources(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(USER_GPU.replace("memory_bandwidth_tbps = 1.0", "memory_bandwidth_tbps = -1.0"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(TargetSpecError, match="memory_bandwidth_tbps"):
            load_target_file(path)
    assert not [w for w in caught if w.category is UnsourcedSpecWarning]
