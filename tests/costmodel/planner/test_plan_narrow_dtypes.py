"""``plan --dtype``: which narrow formats plan and which are refused (QA qa95 finding 1, revisited).

An earlier version retyped every weight, activation and norm to FP8 and ran every op at the FP8 rate:
Llama3-8B on 8 x H100 (GBS 128, MBS 1, seq 8192, CP 2) printed 1222 model TFLOP/s per GPU against the
711 NVIDIA measured in FP8 (NeMo performance summary, 24.07 container), 1.72x. FP8 names now mean FP8
training as Transformer Engine runs it (only the Linear layers' GEMMs in FP8, bf16 weights and
activations: :mod:`narrowpipe.costmodel.training.fp8_gemms`), whichever FP8 format is named, so the
weights stay bf16 and the plan says what it modelled. Integer and 4-bit formats are no training
precision a plan models: refused, with the reason and what to plan instead.
"""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.errors import PlanError


@pytest.fixture(scope="module")
def tiny() -> narrowpipe.Graph:
    return narrowpipe.transformer(2, 512, 8, 1000, ffn=1024, seq=256, name="tiny")


@pytest.mark.parametrize("dtype", ["int8", "int4", "fp4"])
def test_integer_and_4_bit_formats_are_refused_with_the_reason(tiny, dtype):
    with pytest.raises(PlanError) as e:
        narrowpipe.plan(tiny, "dgx-h100", 8, global_batch=8, seq=256, dtype=dtype, top=0)
    text = str(e.value)
    assert f"does not train in {dtype}" in text and "Transformer Engine" in text and "--dtype fp8 or bf16" in text


@pytest.mark.parametrize("dtype", ["fp8", "fp8_e4m3", "fp8_e5m2"])
def test_fp8_names_plan_transformer_engine_fp8_with_bf16_weights(tiny, dtype):
    p = narrowpipe.plan(tiny, "dgx-h100", 8, global_batch=8, seq=256, dtype=dtype, top=0)
    assert p.dtype == "bf16" and p.runtime["fp8"] == "hybrid"
    assert sum(n.startswith("FP8: GEMMs only") for n in p.notes) == 1


def test_an_unknown_dtype_is_a_plan_error(tiny):
    with pytest.raises(PlanError, match="unknown dtype"):
        narrowpipe.plan(tiny, "dgx-h100", 8, global_batch=8, seq=256, dtype="fp7", top=0)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_training_precisions_still_plan(tiny, dtype):
    p = narrowpipe.plan(tiny, "dgx-h100", 8, global_batch=8, seq=256, dtype=dtype, top=0)
    assert p.dtype == dtype and "fp8" not in p.runtime


def test_an_fp8_plan_round_trips_through_its_versioned_json(tiny):
    p = narrowpipe.plan(tiny, "dgx-h100", 8, global_batch=8, seq=256, dtype="fp8", top=0)
    assert narrowpipe.Plan.from_json(p.to_json()) == p
