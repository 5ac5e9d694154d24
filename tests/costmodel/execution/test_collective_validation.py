"""Collective times against published bus bandwidths (benchmarks/collective_validate.py): the DGX
H100 NVLS and DGX A100 ring figures, the TPU v5e pod figure predicted from per-link ICI bandwidths,
and the 8xH200 message-size sweep with 17 of its 20 points held out."""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path

_BENCH = Path(__file__).resolve().parents[3] / "benchmarks"


def _module():
    if "collective_validate" in sys.modules:
        return sys.modules["collective_validate"]
    sys.path.insert(0, str(_BENCH))
    spec = importlib.util.spec_from_file_location("collective_validate", _BENCH / "collective_validate.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["collective_validate"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_large_message_bus_bandwidths_match_the_published_figures():
    for row in _module().published():
        assert abs(row["error"]) < 0.02, row


def test_nvls_carries_large_all_reduces_on_dgx_h100_and_rings_the_small_ones():
    rows = {r["bytes"]: r for r in _module().sweep()}
    assert rows[32 * 1024]["algorithm"] == "ring"
    assert rows[1024**3]["algorithm"] == "in-network"


def test_held_out_sweep_points_are_within_a_quarter_and_typically_within_ten_percent():
    held = [r for r in _module().sweep() if r["role"] == "held out"]
    assert len(held) == 17
    errors = [abs(r["error"]) for r in held]
    assert max(errors) <= 0.26
    assert statistics.median(errors) <= 0.10
