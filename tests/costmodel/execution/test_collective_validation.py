"""Collective times against published bus bandwidths (benchmarks/collective_validate.py): the DGX
H100 NVLS and DGX A100 ring figures, the TPU v5e pod figure (the links' peak) against the measured
ICI rate, and the 8xH200 message-size sweep with 17 of its 20 points held out."""

from __future__ import annotations

import json
import statistics

import pytest
from benchmark_module import BENCHMARKS, load_benchmark  # tests/benchmark_module.py


def _module():
    return load_benchmark("collective_validate")


def test_large_message_bus_bandwidths_match_the_published_figures():
    """Single-node figures are the system files' inputs (within 2%); the two-node H100 figure is held
    out (a published 400-450 GB/s range): within 15% (it read -39% with the ring capped at one NIC).
    GCP's v5e pod figure is the links' peak (256 x 200 GB/s); the pod runs at the rate v5e ICI was
    measured to reach (SB-SHARD: 0.82 x 4 x 45 GB/s = 148 GB/s per chip), 256 x 148 = 37.9 TB/s."""
    for row in _module().published():
        if row["system"] == "tpu-v5e-256":
            assert row["predicted"] == pytest.approx(256 * 148e9 / 1e12, rel=0.01), row
            continue
        assert abs(row["error"]) < (0.15 if "2 nodes" in str(row["what"]) else 0.02), row


def test_nvls_carries_large_all_reduces_on_dgx_h100_and_rings_the_small_ones():
    rows = {r["bytes"]: r for r in _module().sweep()}
    assert rows[32 * 1024]["algorithm"] == "ring (LL)"      # NCCL's low-latency protocol
    assert rows[4 * 1024**2]["algorithm"] == "ring"
    assert rows[1024**3]["algorithm"] == "in-network"


def test_held_out_sweep_points_are_within_a_quarter_and_typically_within_ten_percent():
    """From 4 MiB up; below 2 MiB the sweep's times are its script's ~39 us host floor (not scored)."""
    held = [r for r in _module().sweep() if r["role"] == "held out"]
    assert len(held) == 12 and min(int(r["bytes"]) for r in held) == 4 * 1024**2
    errors = [abs(r["error"]) for r in held]
    assert max(errors) <= 0.26
    assert statistics.median(errors) <= 0.10


def test_small_all_reduces_with_the_engines_kernels_match_published_kernel_times():
    """Held out (SGL-AR, VLLM-SYMM in backends/catalog/SOURCES.toml): a decode all-reduce over 8 H100s
    (32 KiB: 7.8 us measured) within 25%, as one one-shot step, not NCCL's 14-step ring (43 us
    before); vLLM's own benchmark at 0.5-4 MiB over 6 H100s within 10%."""
    rows = _module().small()
    tp8 = [r for r in rows if r["engine"] == "own kernels" and r["ranks"] == 8 and r["system"] == "dgx-h100"
           and "TensorRT" in str(r["source"]) and int(r["bytes"]) <= 32 * 1024]
    assert len(tp8) == 2 and all(r["algorithm"] == "one-shot" and abs(r["error"]) <= 0.25 for r in tp8), tp8
    vllm = [r for r in rows if str(r["source"]).startswith("VLLM-SYMM")]
    assert len(vllm) == 4 and all(abs(r["error"]) <= 0.10 for r in vllm), vllm


def test_small_nccl_all_reduces_match_published_times():
    """Held out: NCCL alone on 8 H100s (a torch.distributed loop, TDIST-NCCL) and 4 H100s (nccl-tests under
    CUDA graphs, NCCL-G4), 8 B to 8 MiB: small buffers on NCCL's LL ring (NCCL-TUNE's constants unchanged,
    15 us over 8 GPUs), larger on the Simple ring. The Simple ring alone priced the 8-GPU rows at 43 us
    (+48% to +124%); now every row is within a third and the median within a quarter."""
    rows = [r for r in _module().small() if r["engine"] == "NCCL"]
    assert len(rows) == 16 and {r["ranks"] for r in rows} == {4, 8}
    assert all(abs(r["error"]) <= 0.33 for r in rows), rows
    assert statistics.median(abs(r["error"]) for r in rows) <= 0.25
    assert {r["algorithm"] for r in rows if r["bytes"] <= 256 * 1024} == {"ring (LL)"}


def test_the_committed_results_are_what_the_code_predicts():
    committed = json.loads((BENCHMARKS / "results" / "collective_validate.json").read_text())
    for key, field, rows in (("published", "predicted", _module().published()),
                             ("sweep_8xh200", "predicted_busbw", _module().sweep()),
                             ("small_all_reduce", "predicted_us", _module().small())):
        assert [r[field] for r in committed[key]] == [r[field] for r in rows], \
            "rerun python benchmarks/collective_validate.py and commit benchmarks/results/collective_validate.*"
