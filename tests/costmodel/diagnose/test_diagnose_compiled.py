"""torch.compile regions are work the trace records no ops for: their own time and the kernels they
launch are one unmodeled row ("torch.compile region"), never dispatch, whether or not an eager op
sits inside or beside them. Traces are minimal copies of QA's compiled_*.json; the expected times
are sums of their durations, worked out here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from narrowpipe.costmodel.diagnose import diagnose
from narrowpipe.costmodel.diagnose.charge import COMPILED_REGION, is_compiled_region


def _ev(name: str, ts: float, dur: float, cat: str = "cpu_op", **args: object) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": args}


def _mm(ts: float, dur: float) -> dict:
    return _ev("aten::mm", ts, dur, **{"Input Dims": [[65536, 64], [64, 64]], "Input type": ["float", "float"]})


def _add(ts: float, dur: float) -> dict:
    return _ev("aten::add", ts, dur, **{"Input Dims": [[2048, 2048], [2048, 2048], []],
                                         "Input type": ["float", "float", "Scalar"]})


def _write(tmp_path: Path, events: list[dict], name: str = "t.json", **top: object) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"record_shapes": 1, **top, "traceEvents": events}))
    return p


def _region(ts: float, dur: float) -> list[dict]:
    """Dynamo's frames as torch 2.x writes them (QA's compiled_eltwise.json, one call)."""
    return [_ev("TorchDynamo Cache Lookup", ts - 60, 55), _ev("Torch-Compiled Region: 0/0", ts, dur),
            _ev("Pregraph bytecode", ts + 30, 13), _ev("AOTDispatcher Runtime Wrapper Prologue", ts + 80, 20),
            _ev("## Call CompiledFxGraph fhog3ean", ts + 140, dur - 150, cat="user_annotation")]


@pytest.mark.parametrize("name", ["Torch-Compiled Region: 0/0", "Torch-Compiled Region: 12/3",
                                  "## Call CompiledFxGraph fhog3ean2t4sbun54y", "CompiledFxGraph abc"])
def test_compiled_frames_are_recognised(name: str) -> None:
    assert is_compiled_region(name)


@pytest.mark.parametrize("name", ["aten::add", "ProfilerStep#3", "autograd::engine::evaluate_function: X"])
def test_other_frames_are_not_compiled_regions(name: str) -> None:
    assert not is_compiled_region(name)


def test_a_compiled_region_beside_an_eager_add_is_unmodeled_work(tmp_path: Path) -> None:
    """Region 70,000 us holding two frames of 13 + 20 us: 69,967 us of compiled work; the add's 50 us
    is its own row. Nothing is dispatch."""
    events = _region(100, 70000) + [_add(71000, 50)]
    d = diagnose(_write(tmp_path, events), "epyc-9755")
    rows = {u.name: u for u in d.unmodeled}
    assert rows[COMPILED_REGION].time_s == pytest.approx(69967e-6)
    assert rows[COMPILED_REGION].calls == 1
    assert d.time_by_bound["dispatch"] == 0.0
    assert d.label == "unmodeled"


def test_a_compiled_region_over_an_eager_mm_is_unmodeled_work_not_dispatch(tmp_path: Path) -> None:
    """QA's compiled_mm_eltwise: the mm inside (17,230 us) is costed; the region's remaining
    56,000 - 13 - 20 - 17,230 = 38,737 us is compiled work (the fused eltwise), not dispatch, which
    called the run launch-bound."""
    events = _region(100, 56000) + [_mm(300, 17230)]
    d = diagnose(_write(tmp_path, events), "epyc-9755")
    rows = {u.name: u for u in d.unmodeled}
    assert rows[COMPILED_REGION].time_s == pytest.approx(38737e-6)
    assert d.time_by_bound["dispatch"] == 0.0
    assert d.ops[0].name == "aten::mm" and d.ops[0].time_s == pytest.approx(17230e-6)
    assert d.label != "launch"


def test_triton_kernels_under_a_region_are_its_work(tmp_path: Path) -> None:
    """A GPU trace (QA's s9_compiled_gpu plus an eager add): the Triton kernel the region launched
    (500 us) is the region's row; the add's kernel (40 us) is the add's."""
    events = [_ev("Torch-Compiled Region: 0/0", 0, 50, **{"External id": 1}),
              _ev("cuLaunchKernel", 10, 5, cat="cuda_runtime", **{"External id": 1, "correlation": 7}),
              _ev("triton_poi_fused_add_mul_sin_0", 20, 500, cat="kernel",
                  **{"External id": 1, "correlation": 7, "device": 0, "stream": 7}),
              {**_add(600, 10), "args": {**_add(600, 10)["args"], "External id": 2}},
              _ev("cudaLaunchKernel", 602, 5, cat="cuda_runtime", **{"External id": 2, "correlation": 8}),
              _ev("vectorized_elementwise_kernel", 610, 40, cat="kernel",
                  **{"External id": 2, "correlation": 8, "device": 0, "stream": 7})]
    d = diagnose(_write(tmp_path, events, deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]), "h100")
    rows = {u.name: u for u in d.unmodeled}
    assert rows[COMPILED_REGION].time_s == pytest.approx(500e-6)
    assert d.ops[0].name == "aten::add" and d.ops[0].time_s == pytest.approx(40e-6)
    assert d.time_by_bound["dispatch"] == 0.0


def test_a_fully_compiled_cpu_trace_is_diagnosed_not_refused(tmp_path: Path) -> None:
    """QA's compiled_eltwise: record_shapes=1 but no aten op (Inductor's C++ records none): the
    regions (70,000 - 33 us each, twice) are the run's unmodeled work."""
    events = _region(100, 70000) + _region(80000, 70000)
    d = diagnose(_write(tmp_path, events), "epyc-9755")
    assert {u.name: u.time_s for u in d.unmodeled}[COMPILED_REGION] == pytest.approx(2 * 69967e-6)
    assert d.label == "unmodeled" and not d.ops


def test_a_fully_compiled_gpu_trace_is_diagnosed_not_refused(tmp_path: Path) -> None:
    """QA's gpu/s9_compiled_gpu.json: one region launching one 500 us Triton kernel."""
    events = [_ev("Torch-Compiled Region: 0/0", 0, 50, **{"External id": 1}),
              _ev("cuLaunchKernel", 10, 5, cat="cuda_runtime", **{"External id": 1, "correlation": 7}),
              _ev("triton_poi_fused_add_mul_sin_0", 20, 500, cat="kernel",
                  **{"External id": 1, "correlation": 7, "device": 0, "stream": 7})]
    d = diagnose(_write(tmp_path, events, deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]), "h100")
    assert [(u.name, u.time_s) for u in d.unmodeled] == [(COMPILED_REGION, pytest.approx(500e-6))]
    assert d.label == "unmodeled"


@pytest.mark.parametrize(("top", "said"), [({}, "flag is absent"), ({"record_shapes": 0}, "flag is 0")])
def test_a_trace_truly_recorded_without_shapes_is_refused_saying_why(tmp_path: Path, top: dict, said: str) -> None:
    from narrowpipe.errors import TraceError

    p = tmp_path / "noshapes.json"
    p.write_text(json.dumps({**top, "traceEvents": [_ev("aten::mm", 0, 100), _ev("aten::add", 200, 10)]}))
    with pytest.raises(TraceError, match=f"recorded without shapes.*{said}"):
        diagnose(p, "epyc-9755")
