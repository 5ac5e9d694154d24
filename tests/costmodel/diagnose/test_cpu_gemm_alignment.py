"""CPU padding advice follows the target's vector width: an AVX2 host (simd_width_bits = 256, QA's
host.toml) holds 8 fp32 lanes, so M=264 = 33 x 8 is aligned there though not a multiple of 16."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from narrowpipe.backends import get_target
from narrowpipe.costmodel.diagnose import diagnose
from narrowpipe.costmodel.diagnose.labels import Machine, gemm_alignment, op_advice


def test_alignment_is_the_vector_width_in_elements() -> None:
    assert gemm_alignment("fp32", "cpu", 256) == (8, "a 256-bit vector's lanes")     # 256 / 32
    assert gemm_alignment("bf16", "cpu", 256) == (16, "a 256-bit vector's lanes")    # 256 / 16
    assert gemm_alignment("fp32", "cpu", 512) == (16, "a 512-bit vector's lanes")
    assert gemm_alignment("fp32", "cpu") == (16, "a 512-bit vector's lanes")          # unknown width


def test_avx2_advice_pads_only_dims_off_its_8_lanes() -> None:
    avx2 = Machine(False, "cpu", False, False, simd_bits=256)
    adv = op_advice("compute", "contraction", "fp32", 0.28, machine=avx2, gemm=(264, 1024, 1024))
    assert not any("multiple" in a for a in adv)
    adv = op_advice("compute", "contraction", "fp32", 0.28, machine=avx2, gemm=(260, 1024, 1024))
    assert "M=260 not a multiple of 8 (fp32, a 256-bit vector's lanes)" in adv[0]


def test_a_trace_judged_on_an_avx2_target_calls_m264_aligned(tmp_path: Path) -> None:
    """QA's hostile/mm264.json: 264x1024 @ 1024x1024 fp32, 553.6 MFLOP in 100 us on epyc-9755 (22.1 TFLOP/s):
    25% of peak, compute-bound with the low-utilization advice that checks alignment."""
    host = replace(get_target("epyc-9755"), simd_width_bits=256, amx_ops_per_cycle=0)
    ev = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 100,
          "args": {"Input Dims": [[264, 1024], [1024, 1024]], "Input type": ["float", "float"]}}
    p = tmp_path / "mm264.json"
    p.write_text(json.dumps({"traceEvents": [ev]}))
    mm = diagnose(p, host).ops[0]
    assert mm.bound == "compute"
    assert not any("multiple of" in a for a in mm.advice)
    assert "264x1024x1024, dims aligned" in mm.advice[0]
