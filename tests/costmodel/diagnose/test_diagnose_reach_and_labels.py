"""``diagnose`` judged against what the target reaches, unmodeled time as a label, damaged
contractions as errors, and advice that follows the recorded shapes, dtype and machine.

Each case is a hand-written Chrome trace whose numbers are worked out here from the formulas and
the specs they name (the calibrated bandwidth curve is the one QA's host calibration wrote), never
read back from the code under test.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import warnings
from dataclasses import replace
from pathlib import Path

import pytest

from narrowpipe.backends import get_target
from narrowpipe.costmodel.diagnose import diagnose
from narrowpipe.costmodel.diagnose.labels import Machine, op_advice
from narrowpipe.errors import NarrowpipeWarning, TraceError

#: QA's calibrated host (2-core EPYC VM): best add bandwidth and the measured add-bandwidth curve
#: (transfer bytes, fraction of the best), /tmp/qa_cpu/full.toml.
HOST_BW = 133338760559.03781
HOST_CURVE = ((73728.0, 0.8011), (196608.0, 1.0), (589824.0, 0.9284), (2359296.0, 0.5159), (6291456.0, 0.2148),
              (18874368.0, 0.1598), (50331648.0, 0.113), (201326592.0, 0.0935), (603979776.0, 0.0539))
GOLDEN_GPU = Path(__file__).resolve().parents[2] / "golden" / "traces" / "synthetic-gpu.json.gz"


def _trace(tmp_path: Path, events: list[dict], name: str = "t.json", **top: object) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({**top, "traceEvents": events}))
    return p


def _op(name: str, ts: float, dur: float, dims: list, types: list[str]) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1,
            "args": {"Input Dims": dims, "Input type": types}}


def _host():
    """A CPU target shaped like QA's calibrated host: its best (cache-resident) bandwidth and curve,
    (epyc-9755 lists no cache bandwidth, so every transfer streams at the curve)."""
    base = get_target("epyc-9755")
    sources = {**base.sources, "bandwidth_curve": "measured: QA's host calibration (/tmp/qa_cpu/full.toml)"}
    return replace(base, memory_bandwidth=HOST_BW, memory_efficiency=HOST_CURVE[-1][1], bandwidth_curve=HOST_CURVE,
                   sources=sources)


def test_streaming_add_is_memory_bound_against_the_bandwidth_it_can_reach(tmp_path: Path) -> None:
    """3 x (a + b) over 32M fp32: 402,653,184 bytes per call (two reads, one write), 280 ms in all.
    The curve, log-linear between 201,326,592 B (0.0935) and 603,979,776 B (0.0539), gives
    0.0935 - ln 2 / ln 3 x 0.0396 = 0.0685 of 133.3 GB/s = 9.14 GB/s reachable; a typical (median,
    91.8 ms) call moves 0.403 GB at 4.39 GB/s: 48% of it, 3.3% of the cache-resident best (below the
    5% overhead threshold, which called it latency-bound)."""
    n = 32 * 2 ** 20
    per_call = 3 * 4 * n
    durs = (102958.208, 85129.734, 91756.832)    # QA's bigadd.json
    events, ts = [], 0.0
    for d in durs:
        events.append(_op("aten::add", ts, d, [[n], [n], []], ["float", "float", "Scalar"]))
        ts += d + 1000
    d = diagnose(_trace(tmp_path, events), _host())
    t = 3 * sorted(durs)[1] * 1e-6        # utilizations are the median call's
    eff = 0.0935 + math.log(per_call / 201326592.0) / math.log(3.0) * (0.0539 - 0.0935)
    add = d.ops[0]
    assert add.bytes == 3 * per_call
    assert add.memory_utilization == pytest.approx(3 * per_call / HOST_BW / t, rel=1e-9)      # 3.2%
    assert add.memory_utilization < 0.05
    assert add.memory_reach_utilization == pytest.approx(3 * per_call / (HOST_BW * eff) / t, rel=1e-6)  # 47%
    assert add.bound == "memory" and d.label == "memory"
    assert "9.14 GB/s" in add.advice[0] and "3.3% of its 133.3 GB/s peak" in add.advice[0]


def test_flat_curve_gpu_reach_is_the_catalog_efficiency(tmp_path: Path) -> None:
    """H100: no curve, memory_efficiency 0.85 (the catalog's) at every size, so the reachable
    utilization is the peak one over 0.85 and the golden trace's bounds are those it had."""
    d = diagnose(GOLDEN_GPU, "h100")
    for o in d.ops:
        if o.memory_utilization:
            assert o.memory_reach_utilization == pytest.approx(o.memory_utilization / 0.85, rel=1e-9)


def test_unmodeled_time_labels_the_run(tmp_path: Path) -> None:
    """An op with no cost rule taking 32.3 ms of 33 ms (QA's svd.json: aten::_linalg_svd 98%) beside
    0.6 ms of costed work: the run is mostly unmodeled, not latency-bound from the 0.6 ms."""
    from narrowpipe.schema import validate
    events = [_op("aten::frobnicate", 0, 32300, [[64, 64]], ["float"])]
    events += [_op("aten::add", 32400 + 120 * i, 100, [[64, 64], [64, 64], []], ["float", "float", "Scalar"])
               for i in range(6)]
    d = diagnose(_trace(tmp_path, events), "epyc-9755")
    assert d.label == "unmodeled"
    assert d.label_text == "mostly unmodeled ops: aten::frobnicate 98%"
    assert d.reasons[0].startswith("largest part: unmodeled ops 32.3 ms")
    assert "without a cost rule (aten::frobnicate 98%)" in d.advice[0]
    validate(d.to_dict())


def test_only_unmodeled_time_is_never_a_zero_bucket(tmp_path: Path) -> None:
    """QA's unknownop.json: one 1 ms op with no rule; every bucket is 0, which picked 'launch 0 ms'."""
    d = diagnose(_trace(tmp_path, [_op("aten::frobnicate", 0, 1000, [[4, 4]], ["float"])]), "epyc-9755")
    assert d.label == "unmodeled" and d.label_text == "mostly unmodeled ops: aten::frobnicate 100%"
    assert "launch 0 ms of" not in d.reasons[0]


@pytest.mark.parametrize(("name", "dims", "why"), [
    ("aten::mm", [[4, 4], [5, 4]], "inputs 0 [4, 4] and 1 [5, 4] disagree on the contracted dim (4 vs 5)"),
    ("aten::addmm", [[4], [3, 4], [5, 4]], "inputs 1 [3, 4] and 2 [5, 4] disagree on the contracted dim (4 vs 5)"),
    ("aten::bmm", [[2, 3, 4], [2, 5, 6]], "(4 vs 5)"),
    ("aten::linear", [[8, 16], [32, 12], [32]], "(16 vs 12)"),
    ("aten::matmul", [[2, 8, 16], [15, 4]], "(16 vs 15)"),
])
def test_contraction_with_disagreeing_dims_is_a_trace_error(tmp_path: Path, name: str, dims: list, why: str) -> None:
    """torch raises on these before any kernel runs, so a trace holding one is damaged: an error
    naming the op and its timestamp, as a non-integer dim is, not 1 ms of unmodeled time."""
    p = _trace(tmp_path, [_op(name, 7, 10, dims, ["float"] * len(dims))])
    with pytest.raises(TraceError, match=re.escape(f"op '{name}' at ts 7 us: ") + ".*" + re.escape(why)):
        diagnose(p, "epyc-9755")


def test_matching_contractions_still_cost(tmp_path: Path) -> None:
    events = [_op("aten::mm", 0, 10, [[4, 4], [4, 5]], ["float", "float"]),
              _op("aten::linear", 20, 10, [[8, 16], [32, 16], [32]], ["float"] * 3)]
    d = diagnose(_trace(tmp_path, events), "epyc-9755")
    assert {o.name for o in d.ops} == {"aten::mm", "aten::linear"} and not d.unmodeled


def test_aligned_fp32_gemm_on_a_cpu_gets_no_padding_or_tf32_advice(tmp_path: Path) -> None:
    """1024^3 fp32 (2 x 1024^3 = 2.147 GFLOP) in 500 us on epyc-9755 (22.1 TFLOP/s fp32): 19% of peak,
    compute-bound. Every dim is a multiple of 16 (a 512-bit vector of fp32), and a CPU trace judged on
    a CPU has no TF32: neither piece of advice applies; epyc-9755's bf16 rate (44.2 TFLOP/s) is faster."""
    k = 1024
    d = diagnose(_trace(tmp_path, [_op("aten::mm", 0, 500, [[k, k], [k, k]], ["float", "float"])]), "epyc-9755")
    mm = d.ops[0]
    assert mm.bound == "compute" and mm.compute_utilization == pytest.approx(2 * k ** 3 / 22.1184e12 / 500e-6)
    text = " ".join(mm.advice) + " ".join(d.advice)
    assert "pad" not in text and "align" not in text.replace("aligned", "")
    assert "tf32" not in text.lower() and "cuda" not in text.lower()
    assert "torch.autocast('cpu', dtype=torch.bfloat16)" in text


def test_padding_advice_names_the_misaligned_dims() -> None:
    """NVIDIA's tensor-core requirement: dims in multiples of 16 bytes (8 fp16/bf16, 4 TF32/fp32);
    a CPU's 512-bit vector holds 16 fp32 lanes."""
    gpu = Machine(True, "gpu", True, True)
    adv = op_advice("compute", "contraction", "bf16", 0.2, machine=gpu, gemm=(1000, 4096, 1001))
    assert adv[0].startswith("compute-bound at 20% of peak: K=1001 not a multiple of 8 (bf16")
    adv = op_advice("compute", "contraction", "fp32", 0.2, machine=gpu, gemm=(1024, 1024, 1024))
    assert not any("multiple" in a for a in adv)
    assert any("allow_tf32" in a for a in adv)
    cpu = Machine(False, "cpu", False, False)
    adv = op_advice("compute", "contraction", "fp32", 0.2, machine=cpu, gemm=(1000, 1024, 1024))
    assert "M=1000 not a multiple of 16 (fp32, a 512-bit vector's lanes)" in adv[0]
    assert not any("tf32" in a.lower() or "bf16" in a for a in adv)


def test_tf32_on_a_cpu_target_warns(tmp_path: Path) -> None:
    p = _trace(tmp_path, [_op("aten::mm", 0, 500, [[64, 64], [64, 64]], ["float", "float"])])
    with pytest.warns(NarrowpipeWarning, match="--tf32 does nothing on epyc-9755"):
        diagnose(p, "epyc-9755", allow_tf32=True)
    with warnings.catch_warnings(record=True) as caught:     # a CPU trace on a GPU: that warning only
        warnings.simplefilter("always")
        diagnose(p, "h100", allow_tf32=True)
    assert not any("--tf32" in str(w.message) for w in caught)


def test_cuda_trace_on_another_family_warns(tmp_path: Path) -> None:
    with gzip.open(GOLDEN_GPU, "rt") as f:
        data = json.load(f)
    data["deviceProperties"] = [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]
    p = tmp_path / "gpu.json"
    p.write_text(json.dumps(data))
    with pytest.warns(NarrowpipeWarning, match="recorded on NVIDIA H100 80GB HBM3 but is judged on tpu-v5e, a tpu"):
        diagnose(p, "tpu-v5e")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        diagnose(p, "h100")
