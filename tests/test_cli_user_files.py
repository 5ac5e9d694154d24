"""What the command line says about a user's spec file and a catalog file: QA93 findings 3 to 5.

A changed copy of a catalog file was reported under the catalog chip's name through ``--targets``
and ``--target`` (only ``--target-file`` warned); ``targets --show`` re-picked units (B200's
``matrix_tflops.bf16 = 2250`` shown as ``matrix_pflops.bf16 2.25``); the unsourced warning was
printed twice with ``--target-file`` and in a sweep.
"""

from __future__ import annotations

import json

import pytest
import tomllib

from narrowpipe.backends import targets
from narrowpipe.backends.registry import CATALOG_DIR
from narrowpipe.cli import main

H100 = (CATALOG_DIR / "h100-sxm.toml").read_text()


@pytest.fixture
def fast_copy(tmp_path):
    """The catalog H100 file with twice its memory bandwidth (3.35 -> 6.7 TB/s), name kept."""
    path = tmp_path / "h100-same.toml"
    path.write_text(H100.replace("memory_bandwidth_tbps = 3.35", "memory_bandwidth_tbps = 6.7"))
    return path


def _said(capsys) -> tuple[str, str]:
    captured = capsys.readouterr()
    return " ".join(captured.out.split()), " ".join(captured.err.split())


@pytest.mark.parametrize("how", ["--targets", "--target", "--target-file"])
def test_a_changed_catalog_copy_is_labelled_as_the_file_by_every_flag(how, fast_copy, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    out = tmp_path / "r.json"
    if how == "--target":
        args = ["analyze", "gpt2", "--target", str(fast_copy)]
    elif how == "--targets":
        args = ["compare", "gpt2", "--targets", str(fast_copy)]
    else:
        args = ["compare", "gpt2", "--targets", "h100-sxm", "--target-file", str(fast_copy)]
    assert main([*args, "--set", "seq=64", "--json", str(out)]) == 0
    said, err = _said(capsys)
    assert err.count("differs in memory_bandwidth_tbps;") == 1
    doc = json.loads(out.read_text())
    names = [doc["target"]] if how == "--target" else [t["target"] for t in doc["targets"]]
    assert names == ["h100-sxm@h100-same.toml"]
    if how != "--target":       # the check line: no catalog H100 credentials for the copy
        assert "h100-sxm@h100-same.toml unchecked" in said and "376 timings" not in said


def test_a_file_named_twice_says_what_each_item_meant(fast_copy, capsys):
    """It said "two targets are named 'h100-sxm' (h100-same.toml and h100-same.toml)" though the user
    typed the catalog's name for one of them."""
    assert main(["compare", "gpt2", "--target-file", str(fast_copy), "--targets", f"h100-sxm,{fast_copy}"]) == 2
    _, err = _said(capsys)
    assert f"--targets names the chip of {fast_copy} twice: 'h100-sxm' (a name that file gives its chip" in err
    assert f"and '{fast_copy}'" in err


def test_a_target_file_also_given_by_path_in_targets_is_one_column(fast_copy, tmp_path, capsys):
    out = tmp_path / "c.json"
    assert main(["compare", "gpt2", "--target-file", str(fast_copy), "--targets", f"h100,{fast_copy}",
                 "--set", "seq=1", "--json", str(out)]) == 2     # h100 is the file's alias there: named twice
    assert main(["compare", "gpt2", "--target-file", str(fast_copy), "--targets", f"a100,{fast_copy}",
                 "--set", "seq=1", "--json", str(out)]) == 0
    assert [t["target"] for t in json.loads(out.read_text())["targets"]] == ["a100-sxm-80gb", "h100-sxm@h100-same.toml"]


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
[sources]
memory_capacity_gib = "made up"
memory_bandwidth_tbps = "made up"
matrix_tflops = "made up"
sm_count = "made up"
l2_bytes = "L2 table"
"""


@pytest.mark.parametrize("args", [["--targets", "my-gpu", "--target-file", "{f}"],
                                  ["--targets", "{f}", "--set", "batch=1,2"]])
def test_the_unsourced_warning_is_said_once_with_the_files_keys(args, tmp_path, capsys):
    path = tmp_path / "my-gpu.toml"
    path.write_text(USER_GPU)
    assert main(["compare", "gpt2", *[a.format(f=path) for a in args], "--set", "seq=8"]) == 0
    _, err = _said(capsys)
    assert err.count("no source for") == 1 and "no source for tdp_w, clock_mhz;" in err


def test_targets_show_prints_the_files_keys_and_values(capsys, monkeypatch):
    """QA: 19 of 25 catalog cards re-picked units (b200 'matrix_pflops.bf16 2.25', 'tdp_kw 1'; xeon-6980p
    'matrix_gflops.bf16 262144'; h100 'scale_out_bandwidth_gbps 50'). The reference is the file itself,
    parsed with tomllib: every row is a key the file writes, with the value it writes."""
    monkeypatch.setenv("COLUMNS", "400")
    for name, _ in targets():
        assert main(["targets", "--show", name]) == 0
        rows = _rows(capsys.readouterr().out)
        written = _flat(tomllib.loads((CATALOG_DIR / f"{name}.toml").read_text()))
        assert set(rows) == set(written), name
        for key, value in rows.items():
            assert value.startswith(_text(written[key])), (name, key, value)
    assert main(["targets", "--show", "b200"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert rows["matrix_tflops.bf16"].startswith("2250 ") and rows["tdp_w"].startswith("1000 ")
    assert "matrix_pflops.bf16" not in rows and "tdp_kw" not in rows


def test_targets_show_of_a_users_file_shows_its_keys_and_marks_the_defaults(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    path = tmp_path / "my-gpu.toml"
    path.write_text(USER_GPU)
    assert main(["targets", "--show", str(path)]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    assert set(rows) == set(_flat(tomllib.loads(USER_GPU)))
    assert rows["clock_mhz"].startswith("1500 ") and "clock_ghz" not in rows
    assert "L2 table" in rows["l2_mb"]                        # a source keyed by the field's name
    filled = out[out.index("not in the file"):]
    assert "matmul_efficiency" in filled and "assumption: default" in filled   # the loader's, marked


def test_roofline_offers_no_price(capsys):
    """A roofline plots no cost: --price did nothing there."""
    with pytest.raises(SystemExit):
        main(["roofline", "--help"])
    assert "--price" not in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    assert "--price" in capsys.readouterr().out


def _rows(out: str) -> dict[str, str]:
    """The rows of the card's first table (the file's fields): field -> the rest of its line."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["field", "value"]) + 2
    rows = {}
    for line in lines[start:]:
        if not line.strip():
            break
        if line[2] == " ":      # a long source wrapped under its row
            continue
        key, rest = line.split(maxsplit=1)
        rows[key] = rest
    return rows


def _flat(doc: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in doc.items():
        if k in ("sources", "notes"):
            continue
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def _text(value) -> str:
    if isinstance(value, list):
        return ", ".join("x".join(map(str, v)) if isinstance(v, list) else str(v) for v in value)
    return str(value)
