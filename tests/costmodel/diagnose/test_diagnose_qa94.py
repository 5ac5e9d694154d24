"""QA94's diagnose findings: dtype counting, peak labels, CPU-fit advice, typical-call labels.

Hand figures: QA's AVX2 host (``hostq.toml``) lists fp32 78.25 GFLOP/s (1 core x 8 lanes x 2 FMA x
2 units x 2.445 GHz) and bf16 2.17 GFLOP/s (measured), so bf16 runs at 2.17 / 78.25 = 2.8% of fp32;
``tests/render/data/qa_host.toml`` lists fp32 181.02 GFLOP/s and no fp64 rate.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from narrowpipe.backends import get_target
from narrowpipe.costmodel.diagnose import diagnose
from narrowpipe.costmodel.diagnose.labels import Machine, op_advice, slow_dtypes
from narrowpipe.frontends.trace.read import load_trace

QA_HOST = Path(__file__).resolve().parents[2] / "render" / "data" / "qa_host.toml"
AVX2_HOST = Machine(False, "cpu", False, False, simd_bits=256, calibrated_host=True,
                    slow_dtypes=slow_dtypes({"fp32": 78.25e9, "bf16": 2.17e9}))


def _write(path: Path, events: list[dict]) -> Path:
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, **e}
                                                for e in events]}))
    return path


def _scalar_adds(n: int = 200) -> list[dict]:
    """``t = t + 1.0`` on fp32[8], as torch.profiler records it: the Python scalar is a 0-dim double
    tensor, wrapped by an ``aten::to`` of a 0-dim double."""
    out = []
    for i in range(n):
        ts = i * 20
        out.append({"name": "aten::add", "ts": ts, "dur": 10, "args": {
            "Input Dims": [[8], [], []], "Input type": ["float", "double", "Scalar"]}})
        out.append({"name": "aten::to", "ts": ts + 11, "dur": 5, "args": {
            "Input Dims": [[], [], [], [], []], "Input type": ["double", "Scalar", "Scalar", "Scalar", ""]}})
    return out


def test_python_scalars_do_not_make_an_fp32_run_fp64(tmp_path) -> None:
    from narrowpipe.costmodel.diagnose.run import _dominant_float
    from narrowpipe.ir import DType
    trace = load_trace(_write(tmp_path / "tiny.json", _scalar_adds()))
    assert _dominant_float(trace) is DType.FP32       # 200 fp32[8] inputs; the 400 doubles are 0-dim
    d = diagnose(tmp_path / "tiny.json", str(QA_HOST))
    assert d.dtype == "fp32" and "fp64" not in d.reasons[-1]


def test_a_peak_is_never_labelled_with_a_dtype_the_target_lacks(tmp_path) -> None:
    """A real fp64 matmul on qa_host (no fp64 rate): timed at fp32's 181.02 GFLOP/s, and said so."""
    p = _write(tmp_path / "f64.json", [{"name": "aten::mm", "ts": 0, "dur": 1000, "args": {
        "Input Dims": [[256, 256], [256, 256]], "Input type": ["double", "double"]}}])
    d = diagnose(p, str(QA_HOST))
    assert "fp64" not in get_target(str(QA_HOST)).matrix_flops
    assert d.peak_flops == pytest.approx(181.02e9, rel=1e-4)
    assert d.dtype == "fp64 as fp32" and "(fp64 as fp32 peak" in d.reasons[-1]


def test_no_small_gemm_rule_on_a_cpu_core() -> None:
    """QA's convnet GEMM 8192x64x288 (aligned to 8 fp32 lanes) ran at 63% of an AVX2 core's peak:
    the 128-wide tile rule is a GPU/TPU one."""
    cpu = op_advice("compute", "convolution", "fp32", 0.1, machine=AVX2_HOST, gemm=(8192, 64, 288))
    assert not any("small GEMM" in a for a in cpu)
    gpu = op_advice("compute", "contraction", "bf16", 0.1, machine=Machine(True, "gpu", True, True),
                    gemm=(8192, 64, 288))
    assert "a small GEMM (8192x64x288" in gpu[0]


def test_a_calibrated_host_is_not_told_to_calibrate() -> None:
    adv = op_advice("compute", "contraction", "fp32", 0.27, machine=AVX2_HOST, gemm=(1024, 1024, 1024))
    assert "calibrate the target" not in adv[0] and "threads the target was calibrated at" in adv[0]
    catalog = Machine(False, "cpu", False, False, simd_bits=256)
    assert "calibrate the target on this machine" in op_advice("compute", "contraction", "fp32", 0.27,
                                                                machine=catalog, gemm=(1024, 1024, 1024))[0]


def test_bf16_far_slower_than_fp32_on_the_cpu_is_advised_to_run_fp32() -> None:
    """2.17 / 78.25 = 2.8% < 50%: bf16 is slow there; 256^3 bf16 at 28% of the bf16 peak gets fp32 first,
    and an fp32 GEMM near the roof is not told to use a narrower dtype."""
    assert slow_dtypes({"fp32": 78.25e9, "bf16": 2.17e9}) == (("bf16", pytest.approx(0.02773, rel=1e-3)),)
    assert slow_dtypes({"fp32": 1.0, "bf16": 2.0}) == ()
    adv = op_advice("compute", "contraction", "bf16", 0.28, machine=AVX2_HOST, gemm=(256, 256, 256))
    assert "bf16 matmuls run at 3% of this target's fp32 rate" in adv[0] and "run them in fp32" in adv[0]
    near = op_advice("compute", "contraction", "fp32", 0.8, machine=AVX2_HOST, gemm=(1024, 1024, 1024))
    assert "narrower dtype" not in near[0]


def test_an_optimizer_sqrt_is_not_sent_to_a_matmul_epilogue() -> None:
    adv = op_advice("compute", "elementwise", "fp32", 0.9, machine=AVX2_HOST)
    assert "epilogue" not in adv[0] and "fused=True" in adv[0]


def test_the_offenders_table_says_utilizations_are_the_typical_calls(tmp_path) -> None:
    """QA's llama q/o linear: 4 calls of 882, 850, 606 and 12,691 us; its share of peak is the median
    call's, its time all four calls': the columns must say which."""
    from narrowpipe.render.diagnosis import offenders_table
    ev = [{"name": "aten::mm", "ts": t, "dur": dur, "args": {"Input Dims": [[256, 256], [256, 256]],
                                                           "Input type": ["float", "float"]}}
          for t, dur in ((0, 882), (1000, 850), (2000, 606), (3000, 12691))]
    d = diagnose(_write(tmp_path / "mm.json", ev), str(QA_HOST))
    table = offenders_table(d)
    headers = [c.header for c in table.columns]
    assert "compute (typical call)" in headers and "memory/link (typical call)" in headers
    assert "typical (median) call" in str(table.caption)
    mm = d.ops[0]
    assert mm.time_s == pytest.approx((882 + 850 + 606 + 12691) * 1e-6)
    # median call (850 + 606 ... sorted 606, 850, 882, 12691 -> 866 us); 2 x 256^3 FLOP / 181.02e9 = 185.4 us
    assert mm.compute_utilization == pytest.approx(2 * 256 ** 3 / 181.02e9 / 866e-6, rel=1e-3)


def test_narrowpipes_own_trace_is_named_so(tmp_path) -> None:
    """``narrowpipe ... --trace`` writes the prediction's timeline (otherData.format narrowpipe.trace):
    no recorded op, and the refusal says what the file is."""
    from narrowpipe.errors import TraceError
    p = tmp_path / "own.json"
    p.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "gpt2 on h100-sxm", "cat": "run", "pid": 1,
                                              "tid": 1, "ts": 0.0, "dur": 6454.0}],
                             "otherData": {"format": "narrowpipe.trace", "version": 1}}))
    with pytest.raises(TraceError, match="narrowpipe's own predicted trace"):
        diagnose(p, str(QA_HOST))
    p.write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(TraceError, match="no CPU op or GPU kernel events"):
        diagnose(p, str(QA_HOST))
