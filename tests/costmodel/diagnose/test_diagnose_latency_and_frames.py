"""Long slow calls are latency-bound, not launch-bound; the run's advice follows what filled its
bucket; the "another machine?" note needs evidence; autograd frames over views are dispatch.

QA: five 16 ms ``torch.sort`` calls on a host calibrated on this machine were labelled "input/CPU-launch
bound" with "no op runs 0% of the window: the time is Python, dispatch or the input pipeline" and a note
asking whether the trace was recorded on the host; a GPU run made of one HtoD copy was told "the GPU is
idle 0%: CUDA graphs ..."; ``evaluate_function: ViewBackward0`` over a reshape was "UNMODELED: work
unknown". Synthetic CPU traces (one thread, microseconds) with hand-computed expectations.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from narrowpipe.backends import get_target
from narrowpipe.costmodel.diagnose import LONG_CALL_LAUNCHES, diagnose
from tests.costmodel.diagnose.test_diagnose_gpu_synthetic import _Trace as _GpuTrace

EPYC = get_target("epyc-9755")
SORT_BYTES = 64 * 4096 * (4 + 4 + 8)     # fp32 values read and written, int64 indices written


class _CpuTrace:
    """CPU ops on one thread; nesting comes from time containment, as the profiler writes it."""

    def __init__(self) -> None:
        self.events: list[dict] = []

    def op(self, name: str, ts: float, dur: float, dims: list | None = None, types: list | None = None,
           concrete: list | None = None) -> None:
        args = {}
        if dims is not None:
            args = {"Input Dims": dims, "Input type": types or ["float"] * len(dims),
                    "Concrete Inputs": concrete or [""] * len(dims)}
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                            "args": args})

    def sorts(self, n: int = 5, dur: float = 16_000.0, gap: float = 10.0, start: float = 0.0) -> float:
        for i in range(n):
            self.op("aten::sort", start + i * (dur + gap), dur, [[64, 4096], [], []], ["float", "Scalar", "Scalar"],
                    ["", "-1", "False"])
        return start + n * (dur + gap)

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps({"traceEvents": self.events}))
        return path


def test_slow_single_calls_are_latency_bound_not_launch_bound(tmp_path):
    t = _CpuTrace()
    t.sorts()                              # 5 x 16 ms, 10 us apart: the host is idle 40 us of 80.04 ms
    d = diagnose(t.write(tmp_path / "sort.json"), EPYC)
    sort = d.ops[0]
    assert sort.bound == "latency" and sort.calls == 5 and sort.bytes == 5 * SORT_BYTES
    assert 16e-3 > LONG_CALL_LAUNCHES * EPYC.launch_overhead and sort.compute_utilization < 0.05
    assert d.label == "latency" and d.label_text.startswith("latency-bound")
    assert d.time_by_bound["latency"] == pytest.approx(80e-3) and d.time_by_bound["overhead"] == 0.0
    assert d.reasons[0].startswith("largest bucket: latency 80 ms (every bucket: launch 0.04 ms, latency 80 ms")
    assert d.advice[0].startswith("long calls far below both peaks take 80 ms (aten::sort)")
    assert not any("no op runs" in a or "idle" in a or "dispatch or the input" in a for a in d.advice)
    assert not any("recorded on" in n for n in d.notes)      # slow calls alone are no evidence
    assert "launch" not in sort.advice[0] and "another machine" not in sort.advice[0]


def test_short_calls_with_gaps_stay_launch_bound_with_idle_advice(tmp_path):
    t = _CpuTrace()
    for i in range(20):                    # 20 x 5 us adds, 50 us apart: idle 45 of each 50 us
        t.op("aten::add", 50.0 * i, 5.0, [[8], [8], []], ["float", "float", "Scalar"], ["", "", "1"])
    d = diagnose(t.write(tmp_path / "adds.json"), EPYC)
    assert d.ops[0].bound == "overhead" and d.label == "launch"
    assert d.advice[0].startswith("no op runs 90% of the window")   # 19 x 45 us of 955 us


def test_a_run_of_host_copies_gets_copy_advice_not_cuda_graphs(tmp_path):
    t = _GpuTrace()
    ext = t.op("aten::copy_", 0, 500, [[1024, 1024], [1024, 1024], []], ["float", "float", "Scalar"])
    t.kernel("Memcpy HtoD (Pageable -> Device)", 10, 400, ext, cat="gpu_memcpy", bytes=4 << 20)
    d = diagnose(t.write(tmp_path / "h2d.json"), "h100")
    # window 0..500 us: the copy 400 us, the device idle 100 us (below a quarter of the bucket)
    assert d.label == "launch" and d.time_by_bound["host-copy"] == pytest.approx(400e-6)
    assert d.advice[0].startswith("host<->device copies take 80% of the window: pin host memory")
    assert not any("CUDA graphs" in a or "idle" in a for a in d.advice)


def _matmul_next_to_sorts(tmp_path: Path, name: str, mm_us: float) -> Path:
    t = _CpuTrace()
    end = t.sorts()
    t.op("aten::mm", end, mm_us, [[1024, 1024], [1024, 1024]])
    return t.write(tmp_path / name)


def test_the_other_machine_note_needs_matmuls_slower_than_the_model(tmp_path):
    probe = diagnose(_matmul_next_to_sorts(tmp_path, "probe.json", 1000.0), EPYC)
    predicted = next(o for o in probe.ops if o.name == "aten::mm").predicted_s * 1e6
    assert predicted > LONG_CALL_LAUNCHES * EPYC.launch_overhead * 1e6     # big enough to be evidence
    near = diagnose(_matmul_next_to_sorts(tmp_path, "near.json", 1.5 * predicted), EPYC)
    assert not any("recorded on" in n for n in near.notes)
    far = diagnose(_matmul_next_to_sorts(tmp_path, "far.json", 10 * predicted), EPYC)
    note = next(n for n in far.notes if "recorded on" in n)
    assert note.startswith("matmul-like ops ran 10x slower than epyc-9755's model predicts")
    assert "shared with other processes" in note and "preempted" in note    # QA94: a busy host reads so too


def _autograd_trace() -> _CpuTrace:
    t = _CpuTrace()
    t.op("autograd::engine::evaluate_function: ViewBackward0", 0, 30)
    t.op("ViewBackward0", 2, 25)
    t.op("aten::reshape", 4, 20, [[64, 256], []], ["float", "ScalarList"], ["", "[16, 1024]"])
    t.op("aten::_reshape_alias", 6, 10, [[64, 256], [], []], ["float", "ScalarList", "ScalarList"])
    t.op("autograd::engine::evaluate_function: AddBackward0", 40, 30)
    t.op("AddBackward0", 42, 3)
    t.op("aten::sum", 50, 15, [[64, 256], [], [], []], ["float", "ScalarList", "Scalar", ""], ["", "[0]", "True", ""])
    t.op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 80, 20)
    t.op("torch::autograd::AccumulateGrad", 82, 15)
    t.op("aten::detach", 84, 10, [[256]])
    t.op("detach", 86, 5)                  # the profiler's inner frame of a detach, no namespace, no shapes
    t.op("autograd::engine::evaluate_function: MysteryBackward0", 110, 20)
    t.op("MysteryBackward0", 112, 15)
    t.op("aten::nonzero", 114, 10, [[256]])  # no lowering: work unknown
    return t


def test_autograd_frames_over_views_or_nothing_are_dispatch(tmp_path):
    d = diagnose(_autograd_trace().write(tmp_path / "autograd.json"), EPYC)
    # own times booked as dispatch: ViewBackward0's frame 30-25 and node 25-20, the reshape read through
    # 20-10; AddBackward0's frame 30-3-15 and its empty node 3; AccumulateGrad's frame 20-15 and node 15-10
    assert d.time_by_bound["dispatch"] == pytest.approx((5 + 5 + 10 + 12 + 3 + 5 + 5) * 1e-6)
    # a frame over an op without a lowering stays unknown work, whole
    assert [(u.name, u.time_s) for u in d.unmodeled] == [
        ("autograd::engine::evaluate_function: MysteryBackward0", pytest.approx(20e-6))]
    assert {o.name for o in d.ops} == {"aten::_reshape_alias", "aten::sum", "aten::detach"}


def test_the_schema_pins_the_labels_and_bounds_a_diagnosis_writes(tmp_path):
    from narrowpipe.costmodel.diagnose import HOST_COPY, LATENCY, RUN_LABELS
    from narrowpipe.costmodel.execution.common import COMPUTE, INTERCONNECT, MEMORY, OVERHEAD
    from narrowpipe.schema import schema, validate
    defs = schema()["$defs"]
    assert defs["diagnosis"]["properties"]["label"]["enum"] == list(RUN_LABELS)
    assert set(defs["opStat"]["properties"]["bound"]["enum"]) == {COMPUTE, MEMORY, OVERHEAD, LATENCY, INTERCONNECT,
                                                                  HOST_COPY}
    pytest.importorskip("jsonschema")
    t = _CpuTrace()
    t.sorts()
    doc = diagnose(t.write(tmp_path / "sort.json"), EPYC).to_dict()
    assert doc["version"] == 4 and doc["label"] == "latency"
    validate(doc)
