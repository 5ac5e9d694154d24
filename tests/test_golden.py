"""Refactors keep every number: ``compare`` of every bundled example on every catalog target and
``diagnose`` of the bundled traces equal the golden files written before (``tools/golden.py``).

A change that moves numbers on purpose rewrites them (``python tools/golden.py --write``) and says in
its commit which numbers moved and why."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from narrowpipe.models.examples import example_names

_spec = importlib.util.spec_from_file_location("golden", Path(__file__).parent.parent / "tools" / "golden.py")
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def compare_golden() -> dict:
    return golden.read("compare.json.gz")


def test_the_golden_holds_every_example_and_variant(compare_golden):
    keys = {golden.golden_key(n, extra) for n in example_names() for extra in golden.VARIANTS.get(n, [{}])}
    assert set(compare_golden) == keys


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(example_names()))
def test_compare_of_every_example_on_every_target_matches_golden(name, compare_golden):
    now = json.loads(json.dumps(golden.compare_golden(name)))
    old = {k: v for k, v in compare_golden.items() if k in now}
    assert golden.diffs(old, now) == []


def test_diagnose_of_bundled_traces_matches_golden():
    now = json.loads(json.dumps(golden.diagnose_goldens()))
    assert golden.diffs(golden.read("diagnose.json.gz"), now) == []


def test_golden_diff_reports_a_moved_number():
    assert golden.diffs({"a": [1.0, 2.0]}, {"a": [1.0, 2.5]}) == [".a[1]: 2.0 -> 2.5"]
