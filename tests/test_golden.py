"""Refactors keep every number: ``compare`` of every bundled example on every catalog target and
``diagnose`` of the bundled traces equal the golden files written before (``tools/golden.py``).

A change that moves numbers on purpose rewrites them (``python tools/golden.py --write``) and says in
its commit which numbers moved and why."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("golden", Path(__file__).parent.parent / "tools" / "golden.py")
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)  # type: ignore[union-attr]


@pytest.mark.slow
def test_compare_of_every_example_on_every_target_matches_golden():
    now = json.loads(json.dumps(golden.compare_goldens()))
    assert golden.diffs(golden.read("compare.json.gz"), now) == []


def test_diagnose_of_bundled_traces_matches_golden():
    now = json.loads(json.dumps(golden.diagnose_goldens()))
    assert golden.diffs(golden.read("diagnose.json.gz"), now) == []


def test_golden_diff_reports_a_moved_number():
    assert golden.diffs({"a": [1.0, 2.0]}, {"a": [1.0, 2.5]}) == [".a[1]: 2.0 -> 2.5"]
