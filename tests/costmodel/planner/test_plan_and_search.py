"""``narrowpipe.plan``: the search returns only plans that fit, says why the runners-up lost,
reports the overflowing memory term of what cannot fit, and the plan round-trips through JSON."""

from __future__ import annotations

import json

import pytest

import narrowpipe
from narrowpipe import Plan, PlanError

FIX = {"microbatch": 1, "recompute": "full", "zero": 1, "cp": 1}


@pytest.fixture(scope="module")
def model() -> narrowpipe.Graph:
    # Llama-style 13B sizes, 8 layers kept so that costing stays fast; every layer is one cost
    return narrowpipe.transformer(8, 5120, 40, 32000, ffn=13824, gated_mlp=True, seq=4096, name="llama-8l")


@pytest.fixture(scope="module")
def plan(model) -> Plan:
    return narrowpipe.plan(model, "dgx-h100", 16, global_batch=64, parallel=FIX)


def test_the_search_returns_the_fastest_plan_that_fits_with_reasons_for_the_others(plan):
    assert plan.fits and plan.memory_per_device["total"] <= plan.memory_per_device["capacity"]
    assert plan.parallel.devices == 16 and plan.parallel.microbatch == 1
    assert plan.runners_up
    for r in plan.runners_up:
        assert r.why
        if r.step_time_s is not None and r.why.startswith("does not fit"):
            assert "GB over" in r.why
        else:
            assert r.step_time_s >= plan.step_time_s and "ms per step" in r.why
    assert sum(plan.breakdown.values()) == pytest.approx(plan.step_time_s)
    assert plan.tokens_per_s == pytest.approx(64 * 4096 / plan.step_time_s)
    assert 0 < plan.mfu < 1 and plan.hw_tflops_per_device >= plan.tflops_per_device


def test_the_plan_round_trips_through_versioned_json(plan):
    text = plan.to_json()
    data = json.loads(text)
    assert data["format"] == "narrowpipe.plan" and data["version"] == 10 and data["item_unit"] == "tokens"
    assert "tied_grad" in data["breakdown"]          # v6: the tied embedding's all-reduce between stages
    assert "moe_capacity_factor" not in data["runtime"]   # v10: recorded only under a capacity-factor runtime
    assert "fp8" not in data["runtime"]              # v7: recorded only for an FP8 plan (plan --dtype fp8)
    assert "rope_theta" in data["architecture"]          # v4: the rotary base (None: the builder was not told)
    # v5: the runtime's fused kernels, attention layout and vocabulary padding; the fullest device's
    # pipeline index an integer, as every stage's is
    assert {"attention_layout", "fused_glu", "fused_norm", "vocab_multiple"} <= set(data["runtime"])
    assert type(data["memory_per_device"]["device"]) is int
    assert data["memory_per_device"]["device"] in [s["device"] for s in data["stages"]]
    assert data["placement"]["axes"]["tp"]["size"] == plan.parallel.tp
    assert Plan.from_json(text) == plan
    with pytest.raises(PlanError, match="newer"):
        Plan.from_json(json.dumps({**data, "version": 99}))
    with pytest.raises(PlanError, match="lacks the field 'step_time_s'"):
        Plan.from_json(json.dumps({k: v for k, v in data.items() if k != "step_time_s"}))


def test_a_version_4_plan_file_loads_without_the_runtime_fields_it_did_not_record(plan):
    data = json.loads(plan.to_json())
    runtime = {k: v for k, v in data["runtime"].items()
               if k not in ("attention_layout", "fused_glu", "fused_norm", "vocab_multiple")}
    memory = {**data["memory_per_device"], "device": float(data["memory_per_device"]["device"])}
    old = Plan.from_json(json.dumps({**data, "version": 4, "runtime": runtime, "memory_per_device": memory}))
    assert old.runtime == runtime and old.parallel == plan.parallel


def test_a_version_3_plan_file_loads_without_the_rotary_base(plan):
    data = json.loads(plan.to_json())
    arch = {k: v for k, v in data["architecture"].items() if k not in ("rope_theta", "rope_scaling")}
    old = Plan.from_json(json.dumps({**data, "version": 3, "architecture": arch}))
    assert "rope_theta" not in old.architecture and old.parallel == plan.parallel


def test_a_version_1_plan_file_still_loads(plan):
    # version 1 named the document by 'kind' and had no closed-form step
    data = json.loads(plan.to_json())
    old = {"kind": data.pop("format"), **{k: v for k, v in data.items() if k != "closed_form_step_s"}, "version": 1}
    loaded = Plan.from_json(json.dumps(old))
    assert loaded.step_time_s == plan.step_time_s and loaded.parallel == plan.parallel
    assert loaded.closed_form_step_s == 0.0
    with pytest.raises(PlanError, match="not a narrowpipe plan"):
        Plan.from_json(json.dumps({**old, "kind": "something else"}))


def test_a_version_2_plan_reads_its_rate_as_tokens_and_an_image_model_counts_samples(plan):
    data = json.loads(plan.to_json())
    old = {**{k: v for k, v in data.items() if k != "item_unit"}, "version": 2}
    assert Plan.from_json(json.dumps(old)).item_unit == "tokens"
    resnet = narrowpipe.plan("resnet50", "dgx-h100", 8, global_batch=64,      # one strategy: no search needed
                             parallel={"tp": 1, "pp": 1, "microbatch": 8, "zero": 0, "recompute": "none"})
    assert resnet.item_unit == "samples"                    # images per second, not tokens (the CLI said tokens/s)
    assert resnet.tokens_per_s == pytest.approx(64 / resnet.step_time_s)


def test_collectives_of_the_plan_are_listed_with_their_time(plan):
    purposes = {c["purpose"] for c in plan.collectives}
    if plan.parallel.tp > 1:
        assert purposes & {"tensor-parallel all-reduce", "sequence-parallel reduce-scatter"}
    assert all(c["seconds"] >= c["exposed_s"] >= 0 for c in plan.collectives)


def test_a_fixed_configuration_that_cannot_fit_names_the_term_that_overflows(model):
    # parameters, gradients and states fit (52 GB of 85.5); eight sequences of activations do not
    with pytest.raises(PlanError, match=r"does not fit: pipeline device 0 needs .* GB over\); largest term"):
        narrowpipe.plan(model, "dgx-h100", 16, global_batch=128,
                        parallel={**FIX, "tp": 1, "pp": 1, "dp": 16, "zero": 0, "recompute": "none",
                                  "microbatch": 8})


def test_a_model_too_large_for_the_devices_is_refused_with_the_memory_it_needs():
    big = narrowpipe.transformer(4, 16384, 128, 32000, seq=2048)
    with pytest.raises(PlanError, match="no strategy fits"):
        narrowpipe.plan(big, "a100", 1, global_batch=1)


def test_bad_requests_are_plan_errors(model):
    with pytest.raises(PlanError, match="unknown parallel field"):
        narrowpipe.plan(model, "dgx-h100", 16, global_batch=64, parallel={"tensor": 2})
    with pytest.raises(PlanError, match="mode 'serve'"):
        narrowpipe.plan(model, "dgx-h100", 16, global_batch=64, mode="serve")
    with pytest.raises(PlanError, match="no strategy for 16 devices"):
        narrowpipe.plan(model, "dgx-h100", 16, global_batch=64, parallel={"tp": 3})


def test_an_fp32_model_s_mfu_is_against_the_rate_its_matmuls_run_at():
    """A QA pass found ``plan`` reporting MFU 0.0% for fp32 GPT-2 on H100s (no fp32 matrix rate):
    the peak is the fp32 vector rate there, as compare's MFU takes it (H100 SXM: 67 TFLOP/s)."""
    g = narrowpipe.transformer(2, 768, 12, 50257, seq=256, dtype="fp32", name="gpt2-2l")
    p = narrowpipe.plan(g, "dgx-h100", 8, global_batch=32, parallel=FIX)
    h100 = narrowpipe.backends.get_target("h100")
    assert "fp32" not in h100.matrix_flops
    assert p.mfu == pytest.approx(p.tflops_per_device * 1e12 / h100.vector_flops["fp32"], rel=1e-9)
    assert 0 < p.mfu < 1


@pytest.mark.parametrize("zero", [2, 3])
def test_data_parallel_and_zero3_collectives_carry_their_ring_bytes(model, zero):
    """Every data-parallel and ZeRO-3 collective is listed with what one device sends under a ring:
    ZeRO-2 reduce-scatters the gradients (fp32, Megatron-Core's default reduction) once per
    microbatch (here m = 32 / 16 = 2: it keeps only its shard between microbatches) and all-gathers
    the bf16 parameters once per step, (n-1)/n of each; ZeRO-3 gathers the parameters twice per microbatch (forward and
    backward) and reduce-scatters the gradients once. (ZeRO-3 plans listed none; the ZeRO 1-2 row
    had 0 bytes and its gather's seconds were in neither exposed nor hidden communication.)"""
    p = narrowpipe.plan(model, "dgx-h100", 16, global_batch=32,
                        parallel={"tp": 1, "pp": 1, "microbatch": 1, "recompute": "full", "zero": zero})
    n, params = 16, model.param_count()
    rows = {c["purpose"]: c for c in p.collectives}
    if zero == 2:
        rs, ag = rows["data-parallel gradient reduction"], rows["data-parallel parameter all-gather (ZeRO)"]
        assert rs["op"] == "reduce_scatter" and ag["op"] == "all_gather"
        m = p.parallel.microbatches
        assert m == 2 and rs["per_step"] == m and ag["per_step"] == 1
        assert rs["comm_bytes"] == pytest.approx(m * (n - 1) / n * 4 * params, rel=1e-6)
        assert ag["comm_bytes"] == pytest.approx((n - 1) / n * 2 * params, rel=1e-6)
        assert p.hidden_comm["param_gather"] == pytest.approx(ag["seconds"])      # under the next forward
    else:
        m = p.parallel.microbatches
        ag, rs = rows["ZeRO-3 parameter all-gather"], rows["ZeRO-3 gradient reduce-scatter"]
        assert ag["comm_bytes"] == pytest.approx(m * 2 * (n - 1) / n * 2 * params, rel=1e-6)
        assert rs["comm_bytes"] == pytest.approx(m * (n - 1) / n * 4 * params, rel=1e-6)
        assert ag["per_step"] % (2 * m) == 0 and rs["per_step"] % m == 0


def test_tensor_parallelism_splits_whole_heads_and_whole_kv_heads():
    """Megatron asserts num_attention_heads and num_query_groups divisible by the tensor-parallel size;
    a fixed tp that does not divide them is refused, and the search never tries one (the cost model
    would keep the K/V projections whole on every device, as vLLM does and Megatron refuses)."""
    gqa = narrowpipe.transformer(4, 2048, 16, 32000, kv_heads=2, ffn=5632, gated_mlp=True, seq=1024, name="gqa")
    with pytest.raises(PlanError, match=r"tp=4: 2 KV heads \(query groups\) do not split over tp=4"):
        narrowpipe.plan(gqa, "dgx-h100", 8, global_batch=16, parallel={"tp": 4})
    searched = narrowpipe.plan(gqa, "dgx-h100", 8, global_batch=16)
    assert all(p.parallel.tp <= 2 for p in searched.runners_up) and searched.parallel.tp <= 2
    mha = narrowpipe.transformer(2, 768, 12, 1000, seq=512, name="twelve-heads")
    with pytest.raises(PlanError, match="tp=8: 12 attention heads do not split over tp=8"):
        narrowpipe.plan(mha, "dgx-h100", 8, global_batch=16, parallel={"tp": 8})


def test_bundled_exports_are_checked_too():
    """The bundled GPT-2 is an export (no builder spec in its metadata): its 12 heads are read off the
    graph by the recogniser, so tp=8 is refused rather than emitted for Megatron."""
    with pytest.raises(PlanError, match="12 attention heads do not split over tp=8"):
        narrowpipe.plan("gpt2", "dgx-h100", 8, global_batch=64, parallel={"tp": 8})
