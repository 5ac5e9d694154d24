"""The ``maxtext`` runtime (JAX/XLA as MaxText runs it): what it offers the search, what it refuses,
and a plan under it round-trips and validates against the schema. Its numbers are checked against
MaxText's published tables in test_maxtext_validation.py."""

from __future__ import annotations

import dataclasses
import json

import pytest

import narrowpipe
from narrowpipe import PlanError
from narrowpipe.cli import main
from narrowpipe.costmodel.planner.plan import Plan
from narrowpipe.costmodel.planner.runtime import RUNTIMES
from narrowpipe.schema import validate

MAXTEXT = RUNTIMES["maxtext"]


@pytest.fixture(scope="module")
def small() -> narrowpipe.Graph:
    return narrowpipe.transformer(2, 512, 8, 32000, ffn=1408, gated_mlp=True, seq=1024, norm="rms", dtype="bf16",
                                  name="small-2l")


def test_every_field_names_its_source():
    fields = {f.name for f in dataclasses.fields(MAXTEXT)} - {"name", "sources", "fp8"}
    assert fields <= set(MAXTEXT.sources), sorted(fields - set(MAXTEXT.sources))


def test_it_offers_what_maxtext_has():
    """FSDP (3), plain DP (0) and shard_optimizer_over_data (1), no ZeRO-2; remat none/minimal/full;
    Megatron's selective is not a JAX policy and dots is not a Megatron mode."""
    assert MAXTEXT.zero_stages == (0, 1, 3)
    assert MAXTEXT.recompute_modes == ("none", "dots", "full")
    assert MAXTEXT.unsupported({"zero": 2}) and MAXTEXT.unsupported({"recompute": "selective"})
    assert "dots" not in RUNTIMES["megatron-core"].recompute_modes
    assert MAXTEXT.unsupported({"cp": 2, "ep": 2, "sequence_parallel": True}) is None


def test_a_dots_plan_round_trips_and_validates(small):
    p = narrowpipe.plan(small, "tpu-v5p", 8, global_batch=16, runtime="maxtext",
                        parallel={"tp": 2, "dp": 4, "zero": 3, "recompute": "dots", "microbatch": 4}, top=0)
    assert p.runtime["name"] == "maxtext" and p.parallel.recompute == "dots"
    assert p.breakdown["recompute"] > 0
    data = json.loads(p.to_json())
    validate(data)
    assert Plan.from_json(p.to_json()) == p


def test_megatron_core_refuses_dots(small):
    with pytest.raises(PlanError, match="no recompute=dots"):
        narrowpipe.plan(small, "tpu-v5p", 8, global_batch=16, runtime="megatron-core",
                        parallel={"recompute": "dots"})


def test_tpu_plans_default_to_maxtext_and_gpu_plans_to_megatron_core(small):
    """Megatron-Core does not run on TPUs (CUDA, NCCL groups): a TPU plan that names no runtime is
    timed as MaxText runs, and takes its recompute policies; a GPU plan stays Megatron-Core's."""
    tpu = narrowpipe.plan(small, "tpu-v5p", 8, global_batch=16, parallel={"recompute": "dots"}, top=0)
    assert tpu.runtime["name"] == "maxtext" and tpu.parallel.recompute == "dots"
    gpu = narrowpipe.plan(small, "h100", 8, global_batch=16, top=0)
    assert gpu.runtime["name"] == "megatron-core"
    with pytest.raises(PlanError, match="no recompute=dots"):
        narrowpipe.plan(small, "h100", 8, global_batch=16, parallel={"recompute": "dots"})


def test_the_cli_plans_under_maxtext(tmp_path):
    out = tmp_path / "plan.json"
    assert main(["-q", "plan", "gpt2", "--devices", "8", "--target", "tpu-v5p", "--global-batch", "16",
                 "--runtime", "maxtext", "--recompute", "dots", "--top", "0", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["runtime"]["name"] == "maxtext" and data["parallel"]["recompute"] == "dots"


def test_a_tpu_plan_under_megatron_core_says_it_is_a_what_if(small):
    """Megatron-LM does not run on TPUs: a plan that names it there says so; the default does not."""
    named = narrowpipe.plan(small, "tpu-v5p", 8, global_batch=16, runtime="megatron-core", top=0)
    assert any("not on TPUs" in n for n in named.notes)
    default = narrowpipe.plan(small, "tpu-v5p", 8, global_batch=16, top=0)
    assert not any("not on TPUs" in n for n in default.notes)


def test_maxtext_keeps_fp32_weights_only_and_megatron_bf16_plus_a_master_copy(small):
    """Per parameter, Adam with fp32 gradients: MaxText 4 (fp32 weights) + 4 (grads) + 8 (moments) =
    16 bytes; Megatron-Core 2 (bf16 weights) + 4 + 4 (fp32 master) + 8 = 18. Same strategy, no ZeRO, so
    weights + gradients + optimizer states differ by exactly 2 bytes a parameter on each device."""
    fixed = {"tp": 1, "pp": 1, "dp": 8, "zero": 0, "recompute": "full", "microbatch": 2}
    mt = narrowpipe.plan(small, "tpu-v5p", 8, global_batch=16, runtime="maxtext", parallel=fixed, top=0)
    mc = narrowpipe.plan(small, "tpu-v5p", 8, global_batch=16, runtime="megatron-core", parallel=fixed, top=0)
    params = sum(v.type.numel() for v in small.weights)
    m, c = mt.memory_per_device, mc.memory_per_device
    assert m["weights"] == pytest.approx(4 * params, rel=1e-6) and c["weights"] == pytest.approx(2 * params, rel=1e-6)
    assert (c["weights"] + c["gradients"] + c["optimizer_states"]) - (m["weights"] + m["gradients"]
                                                                       + m["optimizer_states"]) == \
        pytest.approx(2 * params, rel=1e-6)
    assert mt.runtime.get("fp32_weights") is True and "fp32_weights" not in mc.runtime


def test_only_google_tpus_default_to_maxtext(small):
    """Gaudi 3 is timed by the TPU execution model (a matrix-engine chip) but trains under PyTorch
    (Intel's Megatron-DeepSpeed): its default runtime is Megatron-Core's, not JAX's."""
    gaudi = narrowpipe.plan(small, "gaudi3", 8, global_batch=16, top=0)
    assert gaudi.runtime["name"] == "megatron-core"
    assert not any("not on TPUs" in n for n in gaudi.notes)
