"""AdamW's step ops as eager torch records them (QA's mlp_train.json: aten::lerp_, aten::addcmul_,
aten::addcdiv_ over [2048, 512] fp32 with a scalar) and ``aten::_int_mm`` are costed, not unmodeled.
Hand counts, N = 2048 x 512 = 1,048,576 elements of 4 bytes:

* addcmul_/addcdiv_(a, t1, t2, value): t1 op t2, times value, plus a: 3N FLOPs; one kernel reads
  a, t1, t2 and writes a: 16N bytes = 16 MiB;
* lerp_(a, b, w): a + w (b - a): 3N FLOPs; reads a and b, writes a: 12N bytes;
* _int_mm(int8 [1024, 1024], int8 [1024, 1024]) -> int32: 2 x 1024^3 FLOPs; 1 + 1 + 4 MiB.
"""

from __future__ import annotations

import pytest

from narrowpipe.backends import get_target
from narrowpipe.costmodel.diagnose.cost import Coster
from narrowpipe.costmodel.execution.common import TimingOptions
from narrowpipe.frontends.trace.lower import Call, lower_call
from narrowpipe.frontends.trace.read import TensorArg
from narrowpipe.ir import DType

N = 2048 * 512
_T = TensorArg((2048, 512), DType.FP32)


def _costed(name: str, inputs: list, concrete: list[str]):
    call = Call(name, inputs, concrete)
    assert lower_call(call) is not None, f"{name} is unmodeled"
    coster = Coster(get_target("epyc-9755"), TimingOptions(False, False, "full"), DType.FP32)
    c = coster._cost(lower_call(call))
    assert c is not None
    return c


@pytest.mark.parametrize("name", ["aten::addcmul_", "aten::addcdiv_", "aten::addcmul", "aten::addcdiv"])
def test_addcmul_and_addcdiv_are_three_flops_and_four_tensors_per_element(name: str) -> None:
    c = _costed(name, [_T, _T, _T, None], ["", "", "", "0.0010000000000000009"])
    assert c.flops == 3 * N
    assert c.bytes == 16 * N
    assert c.group == "elementwise"


def test_value_one_needs_no_scalar_multiply() -> None:
    c = _costed("aten::addcmul_", [_T, _T, _T, None], ["", "", "", "1"])
    assert c.flops == 2 * N and c.bytes == 16 * N


def test_lerp_is_three_flops_per_element() -> None:
    c = _costed("aten::lerp_", [_T, _T, None], ["", "", "0.099999999999999978"])
    assert c.flops == 3 * N


def test_lerp_reads_each_input_once() -> None:
    """lerp's a is read by the sub and the add of its fused kernel: loaded once."""
    c = _costed("aten::lerp_", [_T, _T, None], ["", "", "0.099999999999999978"])
    assert c.bytes == 12 * N


def test_int_mm_is_an_int8_matmul_into_int32() -> None:
    i8 = TensorArg((1024, 1024), DType.INT8)
    c = _costed("aten::_int_mm", [i8, i8], ["", ""])
    assert c.flops == c.matmul_flops == 2 * 1024 ** 3
    assert c.dtype == "int8"
    assert c.bytes == 2 * 1024 ** 2 + 4 * 1024 ** 2
