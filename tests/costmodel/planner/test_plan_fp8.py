"""FP8 training as Transformer Engine runs it (``plan --dtype fp8``), checked by hand on one layer.

The layer is narrowpipe's builder transformer (q, k, v, o projections, a GeLU MLP of ``f``, heads equal
to KV heads) on one H100, microbatch 1 of ``T`` tokens, no parallelism, so every number below is a
short formula:

* six Linears, each with three GEMMs (forward, dgrad, wgrad) reading 8-bit operands; attention's
  kernels unchanged (bf16);
* the casts' bytes: each cast reads the bf16 value (2 B) and writes the FP8 value and its transposed
  copy (1 B + 1 B); inputs cast: the two norms' outputs, attention's output and the GeLU's output,
  ``T (3h + f)`` elements; output gradients: q, k, v, o (``h`` each), up (``f``) and down (``h``),
  ``T (5h + f)``; weights, once per step: ``4h^2 + 2hf``;
* memory: two FP8 bytes per Linear weight element (value + transpose) added to the weights; of the
  saved activations, the first norm's, the second norm's and the GeLU's outputs drop from 2 bytes to
  1, attention's output adds a 1-byte copy (the attention backward still reads its bf16 output):
  ``-T (h + f)`` bytes;
* a large GEMM runs at the FP8 rate: its time is its FLOPs over the H100's 1,979 TFLOP/s dense FP8
  peak (NVIDIA H100 datasheet) times the catalog's matmul efficiency, within 5% (the tile, wave and
  latency terms of the GPU model are under 5% at these sizes), and the bf16 GEMM's at 989 TFLOP/s.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import narrowpipe
from narrowpipe.costmodel.execution.gemm import dot_gemm
from narrowpipe.costmodel.planner import block_cost as bc
from narrowpipe.costmodel.planner.planner import Planner
from narrowpipe.costmodel.planner.runtime import get_runtime
from narrowpipe.costmodel.planner.strategy import Parallel
from narrowpipe.errors import PlanError

T, H, F = 2048, 1024, 4096


def _layer(monkeypatch: pytest.MonkeyPatch, fp8: str, t: int = T, h: int = H, f: int = F) -> tuple:
    """The layer's block cost, its cost table and its timed kernels (captured from ``block_cost``)."""
    seen: dict = {}
    interp, timed = bc.interpret, bc.time_program

    def keep_table(*a, **k):
        seen["table"] = interp(*a, **k)
        return seen["table"]

    def keep_times(program, group):
        seen["times"] = timed(program, group)
        seen["program"] = program
        return seen["times"]

    monkeypatch.setattr(bc, "interpret", keep_table)
    monkeypatch.setattr(bc, "time_program", keep_times)
    g = narrowpipe.transformer(1, h, 8, 1000, ffn=f, seq=t, name="one-layer")
    pl = Planner(g, "h100", 1, global_batch=1, seq=t, runtime=replace(get_runtime(None), fp8=fp8))
    cost = pl.cost(pl.blocks.layers[0], Parallel(global_batch=1))
    return cost, seen["table"], list(zip(seen["program"].kernels, seen["times"].times))


def test_every_linear_gemm_reads_fp8_and_attention_stays_bf16(monkeypatch):
    cost, table, kernels = _layer(monkeypatch, "hybrid")
    gemms = [dot_gemm(table, k.anchor) for k, _ in kernels if k.kind == "matmul"]
    assert len(gemms) == 6 * 3
    assert sorted(g.dtype.value for g in gemms) == ["fp8_e4m3"] * 6 + ["fp8_e5m2"] * 12
    _, _, bf16 = _layer(monkeypatch, "")
    attention = [t.time_s for k, t in kernels if k.kind == "attention"]
    assert len(attention) == 2 and attention == [t.time_s for k, t in bf16 if k.kind == "attention"]


def test_cast_bytes_match_the_hand_count(monkeypatch):
    _, table, _ = _layer(monkeypatch, "hybrid")
    casts = [n for n in table.costs if n.attrs.get("fp8_cast")]
    elements = {"activation": T * (3 * H + F), "gradient": T * (5 * H + F), "weight": 4 * H * H + 2 * H * F}
    for kind, n in elements.items():
        mine = [table.costs[c] for c in casts if c.attrs["fp8_cast"] == kind]
        assert sum(c.bytes_read for c in mine) == 2 * n, kind
        assert sum(c.bytes_written for c in mine) == 2 * n, kind      # FP8 value + transposed copy
    assert all(c.attrs["phase"] == "weight_cast" for c in casts if c.attrs["fp8_cast"] == "weight")


def test_memory_delta_per_param_and_per_saved_input(monkeypatch):
    fp8, _, _ = _layer(monkeypatch, "hybrid")
    bf16, _, _ = _layer(monkeypatch, "")
    linear_params = 4 * H * H + 2 * H * F
    assert fp8.fp8_weight_bytes == 2 * linear_params and bf16.fp8_weight_bytes == 0
    assert fp8.param_bytes == bf16.param_bytes                  # the bf16 weights stay
    assert fp8.saved_bytes - bf16.saved_bytes == -T * (H + F)


def test_a_large_gemm_runs_at_the_fp8_rate(monkeypatch):
    t, h, f = 8192, 4096, 16384
    eff = narrowpipe.get_target("h100").matmul_efficiency
    for fp8, peak in (("hybrid", 1979e12), ("", 989e12)):
        _, table, kernels = _layer(monkeypatch, fp8, t, h, f)
        up = next((k, s) for k, s in kernels if k.kind == "matmul" and k.anchor.name.endswith("up_proj_linear"))
        flops = 2 * t * h * f
        assert table.costs[up[0].anchor].flops == flops
        assert up[1].time_s == pytest.approx(flops / (peak * eff), rel=0.05)


def test_weight_casts_run_once_per_step_in_the_optimizer_term():
    g = narrowpipe.transformer(2, 512, 8, 1000, ffn=1024, seq=256, name="tiny")
    fixed = {"tp": 1, "pp": 1, "dp": 1, "cp": 1, "microbatch": 1, "zero": 0, "recompute": "none"}
    plans = {dt: narrowpipe.plan(g, "h100", 1, global_batch=4, seq=256, dtype=dt, parallel=fixed, top=0)
             for dt in ("bf16", "fp8")}
    cast = sum(b.weight_cast_s for b in _loads(plans["fp8"]))
    assert cast > 0
    assert plans["fp8"].breakdown["optimizer"] - plans["bf16"].breakdown["optimizer"] == pytest.approx(cast)
    assert plans["fp8"].runtime["fp8"] == "hybrid" and "fp8" not in plans["bf16"].runtime
    assert any(n.startswith("FP8: GEMMs only (Transformer Engine hybrid recipe") for n in plans["fp8"].notes)


def _loads(plan: narrowpipe.Plan) -> list:
    """The block costs behind a one-device plan (re-derived through the planner, as ``plan`` ran it)."""
    from narrowpipe.costmodel.planner.api import _training_dtype
    from narrowpipe.costmodel.precision import with_precision
    dtype, _ = _training_dtype("fp8")
    g = with_precision(narrowpipe.transformer(2, 512, 8, 1000, ffn=1024, seq=256, name="tiny"),
                       weights=dtype, activations=dtype)
    pl = Planner(g, "h100", 1, global_batch=4, seq=256, runtime=replace(get_runtime(None), fp8="hybrid"))
    layers, pro, epi = pl.costs(plan.parallel)
    return [*layers, *(b for b in (pro, epi) if b is not None)]


@pytest.mark.parametrize("chip", ["a100", "v100"])
def test_a_chip_without_an_fp8_tensor_rate_is_refused(chip):
    g = narrowpipe.transformer(2, 512, 8, 1000, ffn=1024, seq=256, name="tiny")
    with pytest.raises(PlanError, match="has no FP8 tensor rate") as e:
        narrowpipe.plan(g, chip, 8, global_batch=8, seq=256, dtype="fp8", top=0)
    assert narrowpipe.get_target(chip).name in str(e.value)


def test_a_tpu_is_refused_as_no_transformer_engine_target():
    g = narrowpipe.transformer(2, 512, 8, 1000, ffn=1024, seq=256, name="tiny")
    with pytest.raises(PlanError, match="Transformer Engine runs it on GPUs"):
        narrowpipe.plan(g, "tpu-v5p", 8, global_batch=8, seq=256, dtype="fp8_e4m3", top=0)


@pytest.mark.parametrize("runtime", ["maxtext", "megatron-lm-2021"])
def test_a_runtime_without_transformer_engine_is_refused(runtime):
    """The FP8 modelled is Transformer Engine's (Megatron-Core); MaxText's fp8 is XLA's quantization of
    its dots, and 2021's Megatron-LM predates FP8 tensor cores: either would print a TE plan under a
    runtime that does not run it."""
    g = narrowpipe.transformer(2, 512, 8, 1000, ffn=1024, seq=256, name="tiny")
    with pytest.raises(PlanError, match=f"runtime '{runtime}' does not train with Transformer Engine"):
        narrowpipe.plan(g, "h100", 8, global_batch=8, seq=256, dtype="fp8", runtime=runtime, top=0)
    assert narrowpipe.plan(g, "h100", 8, global_batch=8, seq=256, dtype="fp8", runtime="megatron-core",
                           top=0).runtime["fp8"] == "hybrid"


@pytest.mark.parametrize("hidden, seq, peak", [
    # per token and layer: q/k/v/o 4 x 2 x 512^2 = 2.1 MFLOP plus the MLP's Linears, against attention's
    # 4 x 256 x 512 = 0.5 MFLOP: the FP8 GEMMs do most, MFU is against H100 SXM's dense FP8 1979 TFLOP/s
    (512, 256, 1979e12),
    # 4 x 2 x 128^2 = 0.13 MFLOP of q/k/v/o against attention's 4 x 8192 x 128 = 4.2 MFLOP: bf16 does
    # most, MFU stays against the dense bf16 989 TFLOP/s (NVIDIA H100 datasheet, SXM5)
    (128, 8192, 989e12)])
def test_an_fp8_plans_mfu_is_against_the_peak_of_the_precision_doing_most_matmul_flops(hidden, seq, peak):
    """An FP8 plan read 'MFU 112.9%' against the bf16 peak; analyze's convention is the peak of the
    precision that does most of the matmul FLOPs."""
    g = narrowpipe.transformer(2, hidden, 4, 1000, ffn=2 * hidden, seq=seq, name="tiny")
    fixed = {"tp": 1, "pp": 1, "dp": 1, "cp": 1, "microbatch": 1, "zero": 0, "recompute": "none"}
    fp8 = narrowpipe.plan(g, "h100", 1, global_batch=4, seq=seq, dtype="fp8", parallel=fixed, top=0)
    assert fp8.mfu == pytest.approx(fp8.tflops_per_device * 1e12 / peak, rel=1e-9)
    bf16 = narrowpipe.plan(g, "h100", 1, global_batch=4, seq=seq, dtype="bf16", parallel=fixed, top=0)
    assert bf16.mfu == pytest.approx(bf16.tflops_per_device * 1e12 / 989e12, rel=1e-9)
