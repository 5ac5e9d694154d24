"""Every ``--json`` output validates against the shipped JSON Schema, a renamed field fails, and no
format's fields change without a version bump."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import jsonschema
import pytest

from narrowpipe import __version__
from narrowpipe.calibration.validate import Case, ModelValidation
from narrowpipe.cli import main
from narrowpipe.costmodel.report import REPORT_VERSION
from narrowpipe.errors import NarrowpipeError
from narrowpipe.schema import FORMATS, SCHEMA_VERSION, format_versions, schema, schema_for, validate

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "golden" / "traces"
sys.path.insert(0, str(ROOT / "tools"))
import schema_fields  # noqa: E402


def test_the_schema_is_a_valid_2020_12_schema_with_its_version():
    bundle = schema()
    jsonschema.Draft202012Validator.check_schema(bundle)
    assert bundle["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert bundle["$id"].endswith(f":{SCHEMA_VERSION}")
    assert format_versions()["narrowpipe.report"] == REPORT_VERSION
    assert set(FORMATS) == {d["properties"]["format"]["const"] for d in bundle["$defs"].values()
                            if "format" in d.get("properties", {})}


def test_no_format_changes_its_fields_without_a_version_bump():
    recorded, now = schema_fields.recorded(), schema_fields.current()
    for key, fields in now.items():
        assert key in recorded, f"{key} not recorded: run python tools/schema_fields.py --write"
        assert fields == recorded[key], (f"{key}: the fields changed without a version bump; bump the format's "
                                         f"version and SCHEMA_VERSION, then tools/schema_fields.py --write")


def _cli_json(tmp_path, *argv) -> dict:
    out = tmp_path / f"out{len(list(tmp_path.iterdir()))}.json"
    # serve --tpot exits 1 when no layout meets the targets, its plan still written
    assert main(["-q", *argv, "--json", str(out)]) == (1 if "--tpot" in argv and "1ms" in argv else 0)
    return json.loads(out.read_text())


@pytest.mark.parametrize("argv", [
    ("analyze", "gpt2", "--set", "seq=16"),                                  # counts only
    ("analyze", "gpt2", "--set", "seq=16", "--target", "h100", "--price", "h100=2"),
    ("analyze", "gpt2", "--train", "--set", "seq=16", "--target", "h100"),   # phases, per-op phase
    ("compare", "gpt2", "--set", "seq=16", "--targets", "h100,tpu-v5e,groq-lpu,xeon-6980p,cerebras-wse3"),
    ("compare", "llama-3-70b", "--set", "seq=1", "--targets", "h100,groq-lpu"),   # does not fit: notes, excluded
    ("compare", "bert-base", "--set", "batch=1,2", "--targets", "h100,tpu-v6e"),    # a sweep
    ("whatif", "gpt2", "--set", "seq=16", "--target", "h100", "--scale", "hbm_bandwidth=2"),
    ("diagnose", str(TRACES / "synthetic-gpu.json.gz"), "--target", "h100"),
    ("diagnose", str(TRACES / "gpt2-tiny-cpu.json.gz"), "--target", "epyc-9755"),
    ("plan", "gpt2", "--devices", "8", "--target", "dgx-h100", "--global-batch", "16", "--seq", "512"),
    ("plan", "gpt2", "--devices", "8", "--target", "dgx-h100", "--global-batch", "16", "--seq", "512", "--pp", "2",
     "--fix", "interleave=2,zero=3"),                                          # interleaved chunks, ZeRO-3 gathers
    ("serve", "llama-3-8b", "--target", "h100", "--batch", "4", "--input", "512", "--output", "64"),
    ("serve", "llama-3-8b", "--target", "h100", "--mode", "generate", "--input", "16", "--output", "1"),  # no TPOT
    ("serve", "llama-3-8b", "--target", "h100", "--mode", "decode", "--batch", "4", "--context", "512"),
    ("serve", "llama-3-8b", "--target", "h100", "--mode", "prefill", "--input", "512", "--price", "h100=2"),
    ("serve", "gpt2", "--target", "h100,tpu-v6e", "--rate", "100", "--input", "512", "--output", "64",
     "--tpot", "30ms"),                                  # a capacity plan (gpt2: Llama-3-8B's took 45 s on CI)
    ("serve", "llama-3-8b", "--target", "groq-lpu", "--rate", "10", "--input", "512", "--output", "64",
     "--tpot", "1ms"),                                                           # a dataflow target, none meets
    ("serve-sweep", "llama-3-8b", "--target", "h100", "--batches", "1,8", "--context", "1024"),
])
def test_every_json_output_validates(argv, tmp_path):
    doc = json.loads(json.dumps(_cli_json(tmp_path, *argv)))
    validate(doc)
    assert doc["version"] == format_versions()[doc["format"]]


def test_a_plan_file_validates_and_round_trips_through_plan_from_json(tmp_path):
    from narrowpipe import Plan
    doc = _cli_json(tmp_path, "plan", "gpt2", "--devices", "4", "--target", "dgx-h100", "--global-batch", "8",
                    "--seq", "256", "--pp", "2", "--fix", "interleave=2")
    validate(doc)
    plan = Plan.from_json(json.dumps(doc))
    assert json.loads(plan.to_json()) == doc
    renamed = copy.deepcopy(doc)
    renamed["stages"][0]["chunks"][0]["fwd_s"] = renamed["stages"][0]["chunks"][0].pop("forward_s")
    with pytest.raises(NarrowpipeError, match="stages/0/chunks/0"):
        validate(renamed)


def test_validate_json_output_validates(tmp_path, monkeypatch):
    import narrowpipe.calibration.validate as v
    fake = ModelValidation("gpt2", 1, 128, Case("model", "gpt2 b1 s128", 0.010, 0.011, 0.02, 0.0095, 0.01),
                           [Case("dot", "dot", 0.006, 0.0055, how="op wall"),
                            Case("add", "add", 1e-9, 0.0055, impossible=True)], kernels=420)
    probe = Case("probe", "GEMM 768x768x768", 0.01, 0.0101, 0.01, 0.0099, 0.01, how="whole forward")
    # no torch run: the JSON is the point
    monkeypatch.setattr(v, "validate_run", lambda *a, **k: v.ValidationRun([fake], [probe]))
    validate(_cli_json(tmp_path, "validate", "gpt2", "--target", "epyc-9755", "--batch", "1"))


def test_a_renamed_or_retyped_field_fails_with_its_path(tmp_path):
    doc = _cli_json(tmp_path, "analyze", "gpt2", "--set", "seq=16", "--target", "h100")
    renamed = copy.deepcopy(doc)
    renamed["timing"]["seconds"] = renamed["timing"].pop("time_s")
    with pytest.raises(NarrowpipeError, match="timing"):
        validate(renamed)
    retyped = copy.deepcopy(doc)
    retyped["timeline"][0]["device"] = "0"
    with pytest.raises(NarrowpipeError, match="timeline/0/device"):
        validate(retyped)
    old = copy.deepcopy(doc)
    old["version"] = 1
    with pytest.raises(NarrowpipeError, match="version"):
        validate(old)
    with pytest.raises(NarrowpipeError, match="no schema for format"):
        schema_for("narrowpipe.nothing")


def test_version_flag(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"narrowpipe {__version__}"
