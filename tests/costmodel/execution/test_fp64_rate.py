"""fp64 matmuls never run at a narrower type's rate: where a chip lists no fp64 matrix rate, its fp64
vector rate, else full fp32's as a stated lower bound on the time (MI355X's missing fp64 fell back to
its 2,500 TFLOP/s bf16 rate, 16-32x AMD's published fp64)."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.costmodel.execution.common import matrix_rate
from narrowpipe.ir import DType


@pytest.mark.parametrize("chip", ["mi355x", "tpu-v5e", "groq-lpu", "cerebras-wse3", "xeon-6980p"])
def test_fp64_is_never_faster_than_full_fp32(chip: str) -> None:
    target = narrowpipe.get_target(chip)
    fp64 = matrix_rate(target, DType.FP64)
    assert fp64.flops_per_s <= max(target.matrix_flops.get("fp32", 0.0), target.vector_flops.get("fp32", 0.0),
                                   target.vector_flops.get("fp64", 0.0), min(target.matrix_flops.values()))
    assert fp64.flops_per_s < target.matrix_flops.get("bf16", target.matrix_flops.get("fp16", float("inf")))


def test_a_listed_fp64_rate_is_used_as_is() -> None:
    h100 = narrowpipe.get_target("h100")
    assert matrix_rate(h100, DType.FP64).flops_per_s == h100.matrix_flops["fp64"]
