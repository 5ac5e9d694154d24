"""A training plan leaves part of each device's memory unplanned (QA: DeepSeek-V3 on 2048 H100s was
planned at 84.90 of 85.52 GB, 99.3%): the CUDA context, NCCL and cuBLAS workspaces and allocator
fragmentation hold memory no planned term counts. backends/defaults.py sources the 6%; here it is
checked by hand against the H100's capacity, and against the published layouts that ran."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.backends.defaults import RUNTIME_MEMORY_RESERVE
from narrowpipe.costmodel.planner.planner import Planner
from narrowpipe.costmodel.planner.strategy import Parallel

#: tp1 pp2 dp4, 16-sequence microbatches of an 8-layer 4096-wide model: by sequence length, the
#: fullest device needs 90.8% (4864 tokens) and 94.5% (5120) of an H100's memory (under Megatron-Core's
#: fused SwiGLU; 4096 and 4352 tokens were these two while SiLU's output was counted as kept).
FIXED = Parallel(tp=1, pp=2, dp=4, microbatch=16, global_batch=64)


@pytest.fixture(scope="module")
def model() -> narrowpipe.Graph:
    return narrowpipe.transformer(8, 4096, 32, 32000, ffn=14336, kv_heads=8, gated_mlp=True, seq=8192,
                                  name="mid-8l")


def test_the_reserve_is_what_megatron_runs_leave_free():
    h100 = float(get_target("h100-sxm").memory_capacity)
    assert RUNTIME_MEMORY_RESERVE == 0.06                 # MindSpeed: per-process memory fraction 0.94
    assert 2e9 <= RUNTIME_MEMORY_RESERVE * h100 <= 5.5e9   # the 2-5 GB Megatron runs see past their tensors


def test_a_layout_past_the_reserve_does_not_fit(model):
    h100 = float(get_target("h100-sxm").memory_capacity)
    fits = Planner(model, "dgx-h100", 8, global_batch=64, seq=4864).evaluate(FIXED)
    tight = Planner(model, "dgx-h100", 8, global_batch=64, seq=5120).evaluate(FIXED)
    assert fits.capacity == tight.capacity == pytest.approx(0.94 * h100, rel=1e-12)
    assert fits.fullest.total < 0.94 * h100 and fits.fits
    assert 0.94 * h100 < tight.fullest.total < h100 and not tight.fits     # it was planned before


def test_the_plan_says_what_it_checked_memory_against(model):
    p = narrowpipe.plan(model, "dgx-h100", 8, global_batch=64, seq=5120, top=0)
    h100 = float(get_target("h100-sxm").memory_capacity)
    assert p.memory_per_device["total"] <= 0.94 * h100
    assert p.memory_per_device["capacity"] == pytest.approx(0.94 * h100, rel=1e-12)
    assert any("memory is checked against" in n and "allocator fragmentation" in n for n in p.notes)


def test_a_tpu_plan_uses_xlas_reserve_as_compare_does():
    """QA (qa95 finding 4): plan held a v5e to 16.1 GB (6% off 17.18 GB) where compare allows XLA's
    15.48 GiB. By hand: 16 GiB = 17,179,869,184 B; less XLA's 4% = 16,492,674,416.6 B = 16.49 GB
    (XLA's reported 15.48G of 16 GiB is 3.2% off; backends/defaults.py rounds the reserves to 4%)."""
    tiny = narrowpipe.transformer(2, 512, 8, 1000, ffn=1024, seq=256, name="tiny")
    p = narrowpipe.plan(tiny, "tpu-v5e", 4, global_batch=8, seq=256, top=0)
    assert p.memory_per_device["capacity"] == pytest.approx(17_179_869_184 * 0.96, rel=1e-9)
    note = next(n for n in p.notes if "memory is checked against" in n)
    assert "XLA" in note and "CUDA" not in note and "16.5 GB" in note and "less 4%" in note


def test_an_amd_plan_names_rocm_not_cuda():
    """On an MI300X the unplanned share is ROCm's (HIP context, RCCL workspaces), not CUDA's/NCCL's."""
    tiny = narrowpipe.transformer(2, 512, 8, 1000, ffn=1024, seq=256, name="tiny")
    p = narrowpipe.plan(tiny, "mi300x", 8, global_batch=8, seq=256, top=0)
    note = next(n for n in p.notes if "memory is checked against" in n)
    assert "RCCL" in note and "CUDA" not in note and "NCCL " not in note and "less 6%" in note
