"""``benchmarks/gpu_validate.py --dry-run``: the whole script on the CPU at tiny sizes, in a subprocess.

It cannot check GPU numbers (there is no GPU here); it checks that every section runs, predicts and
writes well-formed results within a tight time budget, so the real run on a GPU is not the first run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
# Not a timing module (tests/host_lock.py): the dry run's CPU measurements are not judged, and holding
# the host for its ~30 s left the other test worker idle. Its budget allows for sharing the host.

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu_validate.py"
SECTIONS = {"matmul", "copy", "attention", "models"}


def test_dry_run_completes_quickly_and_writes_results(tmp_path):
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=240)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert wall < 150, f"dry run took {wall:.0f} s"   # ~30 s alone on CI's two cores
    for section in SECTIONS:
        assert f"[{section}] " in proc.stdout          # each section prints its elapsed time
    (js,) = tmp_path.glob("gpu_validate_cpu-dryrun_*.json")
    (md,) = tmp_path.glob("gpu_validate_cpu-dryrun_*.md")
    data = json.loads(js.read_text())
    assert data["format"] == "narrowpipe.gpu_validate" and data["version"] == 1
    env = data["env"]
    assert env["dry_run"] is True and env["target"] == "epyc-9755" and env["date"][:10] in js.name
    assert {"device", "torch", "narrowpipe", "allow_tf32_matmul", "command"} <= set(env)
    assert SECTIONS <= set(data["elapsed_s"]) and data["elapsed_s"]["total"] > 0
    rows = data["rows"]
    assert {r["section"] for r in rows} == SECTIONS
    measured = [r for r in rows if r["measured_s"] is not None]
    assert len(measured) >= 20
    for r in measured:
        assert r["measured_s"] > 0 and r["predicted_s"] > 0
        assert r["error_pct"] == pytest.approx(100 * (r["predicted_s"] - r["measured_s"]) / r["measured_s"])
        assert r["predicted_bound"] in ("compute", "memory", "overhead", "interconnect")
    models = {r["case"].split(" batch")[0] for r in measured if r["section"] == "models"}
    assert models == {f"{m} {d}" for m in ("gpt2", "llama-3.2-1b", "resnet50") for d in ("fp32", "bf16")}
    assert all(r["params"] > 0 for r in measured if r["section"] == "models")
    skipped = [r for r in rows if r["measured_s"] is None]
    assert all(r["note"].startswith("skipped") for r in skipped)   # nothing errored
    for section, s in data["summary"].items():
        assert s["measured"] > 0 and s["median_abs_error_pct"] is not None, section
    text = md.read_text()
    assert "| section | case | measured | predicted | error |" in text and "gpt2 fp32 batch 1" in text


def test_gpu_names_map_to_catalog_targets():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu_validate
    finally:
        sys.path.remove(str(SCRIPT.parent))
    import narrowpipe
    cases = {"NVIDIA H100 80GB HBM3": "h100-sxm", "NVIDIA H100 PCIe": "h100-pcie", "NVIDIA H200": "h200",
             "NVIDIA B200": "b200", "NVIDIA GB200": "gb200", "NVIDIA A100-SXM4-80GB": "a100-sxm-80gb",
             "AMD Instinct MI300X": "mi300x", "NVIDIA H100 NVL": None, "NVIDIA L4": None,
             "NVIDIA A100-SXM4-40GB": None}
    for name, target in cases.items():
        assert gpu_validate.target_for(name) == target, name
        if target:
            assert narrowpipe.get_target(target).name == target
