"""``diagnose`` on synthetic GPU traces in Kineto's format, with hand-computed expectations.

The events mirror what ``torch.profiler`` writes on CUDA: CPU ops with ``External id``,
``cudaLaunchKernel`` calls with a ``correlation``, kernels on a device stream naming both, and
``record_param_comms`` carrying a collective's sizes.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from narrowpipe.backends import get_target
from narrowpipe.costmodel.diagnose import diagnose
from narrowpipe.errors import NarrowpipeError
from narrowpipe.frontends.trace.read import TraceError

H100 = get_target("h100")


class _Trace:
    """Builds a Kineto-style trace: CPU ops and launches on one thread, kernels on stream 7/13."""

    def __init__(self) -> None:
        self.events: list[dict] = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}]
        self.ext = 0

    def op(self, name: str, ts: float, dur: float, dims: list, types: list, **extra) -> int:
        self.ext += 1
        args = {"External id": self.ext, "Input Dims": dims, "Input type": types,
                "Concrete Inputs": [""] * len(dims), **extra}
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 100, "tid": 100, "ts": ts,
                            "dur": dur, "args": args})
        return self.ext

    def kernel(self, name: str, ts: float, dur: float, ext: int | None, stream: int = 7,
               corr: int | None = None, launch_ts: float | None = None, cat: str = "kernel", **extra) -> None:
        corr = corr if corr is not None else 1000 + len(self.events)
        args = {"device": 0, "stream": stream, "correlation": corr, **extra}
        if ext is not None:
            args["External id"] = ext
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                            "args": args})
        if launch_ts is not None:
            self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100,
                                "tid": 100, "ts": launch_ts, "dur": 2.0, "args": {"correlation": corr}})

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps({"schemaVersion": 1, "record_shapes": 1, "traceEvents": self.events}))
        return path


def test_allreduce_longer_than_compute_is_interconnect_bound(tmp_path):
    t = _Trace()
    mm = t.op("aten::mm", 0, 20, [[4096, 4096], [4096, 4096]], ["c10::BFloat16", "c10::BFloat16"])
    t.kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 10, 200, mm)
    n = 64 << 20
    comm = t.op("record_param_comms", 30, 10, [[n]], ["c10::BFloat16"], **{
        "Collective name": "allreduce", "In msg nelems": n, "Out msg nelems": n, "Group size": 8,
        "dtype": "BFloat16"})
    t.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 220, 1000, comm,
             stream=13)
    d = diagnose(t.write(tmp_path / "ddp.json"), "h100")
    assert d.mode == "gpu" and d.label == "interconnect" and d.label_text == "interconnect-bound"
    assert d.comm_s == pytest.approx(1000e-6) and d.compute_s == pytest.approx(200e-6)
    assert d.window_s == pytest.approx(1220e-6) and d.idle_s == pytest.approx(20e-6)
    gemm = next(o for o in d.ops if o.name == "aten::mm")
    assert gemm.flops == 2 * 4096**3 and gemm.bytes == 3 * 4096 * 4096 * 2
    assert gemm.kernel.startswith("sm90_xmma_gemm") and gemm.bound == "compute"
    assert gemm.compute_utilization == pytest.approx(2 * 4096**3 / 200e-6 / H100.matrix_flops["bf16"])
    ar = next(o for o in d.ops if o.bound == "interconnect")
    assert ar.comm_bytes == 2 * 7 * (n * 2) // 8                # ring all-reduce: 2(n-1)/n x size per rank
    assert ar.link_utilization == pytest.approx(ar.comm_bytes / 1000e-6 / H100.scale_up_bandwidth)
    assert d.mfu == pytest.approx(2 * 4096**3 / (1220e-6 * H100.matrix_flops["bf16"]))


def test_big_elementwise_kernel_is_memory_bound(tmp_path):
    t = _Trace()
    add = t.op("aten::add", 0, 10, [[8192, 8192], [8192, 8192], []], ["c10::BFloat16", "c10::BFloat16", "Scalar"])
    t.kernel("vectorized_elementwise_kernel<4, CUDAFunctor_add<c10::BFloat16>>", 5, 150, add)
    d = diagnose(t.write(tmp_path / "add.json"), "h100")
    o = d.ops[0]
    assert o.bytes == 3 * 8192 * 8192 * 2 and o.flops == 8192 * 8192
    assert o.bound == "memory" and o.memory_utilization == pytest.approx(o.bytes / 150e-6 / H100.memory_bandwidth)
    assert d.label == "memory"


def test_tiny_kernels_with_gaps_are_launch_bound_and_links_through_correlation(tmp_path):
    t = _Trace()
    for i in range(10):
        ext = t.op("aten::mul", 100 * i, 30, [[256], [256]], ["float", "float"])
        # the kernel records no External id: it is found through its cudaLaunchKernel's correlation
        t.kernel("vectorized_elementwise_kernel<mul>", 100 * i + 40, 3, None, corr=500 + i,
                 launch_ts=100 * i + 10)
        assert ext
    t.kernel("mystery_kernel_without_launcher", 2000, 5, None)
    d = diagnose(t.write(tmp_path / "tiny.json"), "h100")
    assert d.label == "launch" and d.idle_fraction > 0.9
    mul = next(o for o in d.ops if o.name == "aten::mul")
    assert mul.calls == 10 and mul.time_s == pytest.approx(30e-6) and mul.bound == "overhead"
    assert [u.name for u in d.unmodeled] == ["mystery_kernel_without_launcher"]
    assert d.unmodeled[0].time_s == pytest.approx(5e-6)
    assert any("CUDA graphs" in a for a in d.advice)


def test_host_to_device_copies_count_as_input_pipeline(tmp_path):
    t = _Trace()
    ext = t.op("aten::copy_", 0, 500, [[1024, 1024], [1024, 1024], []], ["float", "float", "Scalar"])
    t.kernel("Memcpy HtoD (Pageable -> Device)", 10, 400, ext, cat="gpu_memcpy", bytes=4 << 20)
    d = diagnose(t.write(tmp_path / "h2d.json"), "h100")
    copy = d.ops[0]
    assert copy.bound == "host-copy" and copy.bytes == 4 << 20
    assert d.label == "launch" and any("pin" in a for a in copy.advice)


def test_gzipped_trace_is_read(tmp_path):
    t = _Trace()
    ext = t.op("aten::mm", 0, 20, [[64, 32], [32, 16]], ["float", "float"])
    t.kernel("gemm", 5, 10, ext)
    plain = t.write(tmp_path / "t.json")
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert diagnose(gz, "h100").ops[0].flops == 2 * 64 * 32 * 16


@pytest.mark.parametrize("content, reason", [
    (None, "no such file"),
    ("{this is not json", "is not JSON"),
    (json.dumps({"traceEvents": []}), "no CPU op or GPU kernel events"),
    (json.dumps({"foo": 1}), "traceEvents"),
    (json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5,
                                  "args": {}}]}), "record_shapes=True"),
])
def test_bad_traces_raise_narrowpipe_errors_naming_file_and_reason(tmp_path, content, reason):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(TraceError, match=reason) as err:
        diagnose(path, "h100")
    assert isinstance(err.value, NarrowpipeError)
    assert err.value.file == str(path) and "bad.json" in str(err.value)


def test_diagnosis_json_round_trips_through_json(tmp_path):
    t = _Trace()
    ext = t.op("aten::linear", 0, 20, [[8, 64], [32, 64], [32]], ["float", "float", "float"])
    t.kernel("gemm", 5, 10, ext)
    d = diagnose(t.write(tmp_path / "t.json"), "h100")
    data = json.loads(d.to_json())
    assert data["format"] == "narrowpipe.diagnosis" and data["version"] == 4
    assert data["ops"][0]["op"] == "dot+add" and data["ops"][0]["flops"] == 2 * 8 * 64 * 32 + 8 * 32
    assert set(data["time_by_bound"]) >= {"compute", "memory", "overhead", "latency", "interconnect", "idle",
                                          "unmodeled"}


def test_a_kernel_faster_than_the_peak_is_never_shown_above_100_percent(tmp_path):
    from rich.console import Console

    from narrowpipe.render.diagnosis import print_diagnosis
    t = _Trace()
    mm = t.op("aten::mm", 0, 2, [[4096, 4096], [4096, 4096]], ["c10::BFloat16", "c10::BFloat16"])
    t.kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 1, 20, mm)   # 137 TFLOP in 20 us: 7 PFLOP/s
    d = diagnose(t.write(tmp_path / "fast.json"), "h100")
    assert d.ops[0].compute_utilization > 1
    assert any("faster than h100-sxm's peaks" in n for n in d.notes)
    console = Console(record=True, width=80)
    print_diagnosis(d, console)
    text = console.export_text()
    assert ">100%" in text and "%" in text
    import re
    assert not [m for m in re.findall(r"(\d+)\.\d%", text) if int(m) > 100]   # no "700.0%"
    assert all(len(line) <= 80 for line in text.splitlines())


def _cpu_trace(path: Path, ops: list[tuple[str, float, list, list]]) -> Path:
    """A CPU-only trace: each (name, dur, dims, types) one op after the other."""
    events, ts = [], 0.0
    for name, dur, dims, types in ops:
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                       "args": {"Input Dims": dims, "Input type": types, "Concrete Inputs": [""] * len(dims)}})
        ts += dur
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_each_transcendental_is_held_against_its_own_rate(tmp_path):
    """A target that measured sqrt 4x and tanh 1/4x its default rate: each op's utilization is its
    evaluations over its own rate (sqrt read 200% against the default rate, a false alarm)."""
    import dataclasses
    base = get_target("epyc-9755")
    rates = {"default": 1e9, "sqrt": 4e9, "tanh": 0.25e9}
    chip = dataclasses.replace(base, name="rates", transcendental_flops=rates,
                               sources={**base.sources, **{f"transcendental_flops.{k}": "assumption: test"
                                                           for k in rates}})
    n = 1_000_000
    path = _cpu_trace(tmp_path / "t.json", [("aten::sqrt", 500.0, [[n]], ["float"]),
                                            ("aten::tanh", 8000.0, [[n]], ["float"])])
    d = diagnose(path, chip)
    ops = {o.name: o for o in d.ops}
    assert ops["aten::sqrt"].compute_utilization == pytest.approx(0.5, rel=0.02)   # n / 4e9 in 500 us
    assert ops["aten::tanh"].compute_utilization == pytest.approx(0.5, rel=0.02)   # n / 0.25e9 in 8 ms
    assert not any("faster than" in note for note in d.notes)


@pytest.mark.parametrize("args, reason", [
    ({"Input Dims": "oops", "Input type": 7}, "'Input Dims' is str, not a list"),
    ({"Input Dims": [[-2, 3], [3, 4]], "Input type": ["float", "float"]}, "sizes are non-negative integers"),
    ({"Input Dims": [[2, 3], 5], "Input type": ["float", "float"]}, "are not a list"),
])
def test_damaged_recorded_shapes_are_errors_naming_the_op(tmp_path, args, reason):
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1,
                                                 "dur": 5, "args": args}]}))
    with pytest.raises(TraceError, match=reason) as err:
        diagnose(path, "h100")
    assert "aten::mm" in str(err.value) and "d.json" in str(err.value)


def test_non_finite_or_zero_times_are_errors(tmp_path):
    shapes = {"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}
    nan = tmp_path / "nan.json"
    nan.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": NaN, "dur": 5, '
                   f'"args": {json.dumps(shapes)}}}]}}')
    with pytest.raises(TraceError, match="non-finite time"):
        diagnose(nan, "h100")
    zero = _cpu_trace(tmp_path / "zero.json", [("aten::mm", 0.0, shapes["Input Dims"], shapes["Input type"])])
    with pytest.raises(TraceError, match="no measured time"):
        diagnose(zero, "h100")


def test_a_collective_faster_than_its_link_is_noted_and_no_tf32_note_without_matmuls(tmp_path):
    t = _Trace()
    ext = t.op("nccl:all_reduce", 0, 5, [[1 << 26]], ["c10::BFloat16"], **{
        "In msg nelems": 1 << 26, "Out msg nelems": 1 << 26, "Group size": 8, "dtype": "BFloat16",
        "Collective name": "allreduce"})
    t.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)", 10, 300, ext)   # 235 MB of ring traffic in 300 us
    d = diagnose(t.write(tmp_path / "ar.json"), "h100")
    comm = d.ops[0]
    assert comm.bound == "interconnect" and comm.link_utilization > 1.1
    assert any("faster than h100-sxm's peaks" in n and "AllReduce" in n for n in d.notes)
    assert not any("TF32" in n for n in d.notes)
