"""Load a script from ``benchmarks/`` as a module, for the tests that hold its validation bars.

Why not ``import``: ``benchmarks/`` is not a package and is not shipped. The module is registered in
``sys.modules`` before it runs (dataclasses resolve their annotations through it) and its folder is
put on the path (the scripts import ``_common`` beside them); a second call returns the same module.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py``, run once per test session."""
    if name in sys.modules:
        return sys.modules[name]
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def committed_rows(name: str) -> list[dict]:
    """The rows of ``benchmarks/results/<name>.json`` as committed: tests compare them with what the
    code predicts now, so a result table cannot go stale after a model change (moe_validate's step
    read 2.35 s for three days while the code gave 2.37)."""
    return json.loads((BENCHMARKS / "results" / f"{name}.json").read_text())["rows"]
