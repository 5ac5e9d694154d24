"""Chrome/Perfetto traces of predicted schedules: they parse, hold one slice per launched kernel, and
their times agree with the schedule (no overlap on a track, nothing after the run ends)."""

from __future__ import annotations

import json

import pytest

import narrowpipe
from narrowpipe.cli import main
from narrowpipe.models.examples import load_example
from narrowpipe.render.trace import KERNEL_CATEGORY, TraceBuilder, comparison_trace, report_trace


@pytest.fixture(scope="module")
def comparison():
    return narrowpipe.compare(load_example("gpt2"), ["h100", "groq-lpu", "xeon-6980p"], dims={"seq": 128})


def _names(events, kind):
    return {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == kind}


def _threads(events):
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}


def test_trace_has_one_slice_per_kernel_with_consistent_times(comparison, tmp_path):
    path = tmp_path / "t.json"
    comparison_trace(comparison).write(path)
    data = json.loads(path.read_text())                 # plain JSON: chrome://tracing and Perfetto read it
    events = data["traceEvents"]
    assert data["otherData"]["format"] == "narrowpipe.trace"
    processes, threads = _names(events, "process_name"), _threads(events)
    assert set(threads.values()) <= {"run", "compute", "memory", "communication", "pipeline"}
    for report in comparison.reports:
        target, total_us = report.target, report.time_s * 1e6
        pids = {pid for pid, name in processes.items() if name.startswith(f"{target}: device")}
        assert len(pids) == report.timing.devices
        kernels = [e for e in events if e["ph"] == "X" and e["pid"] in pids and e["cat"].startswith(KERNEL_CATEGORY)]
        assert len(kernels) == report.timing.kernels == len(report.timeline)
        assert {e["name"] for e in kernels} == {k.name for k in report.timeline}
        spans = [e for e in events if e["ph"] == "X" and e["pid"] in pids]
        _fits_the_run(spans, total_us)
        run = [e for e in events if e.get("cat") == "run" and processes[e["pid"]] == f"{target}: run"]
        assert len(run) == 1 and run[0]["dur"] == pytest.approx(total_us)


def _fits_the_run(spans, total_us):
    """Every slice inside the run, and none overlapping another on its track."""
    for e in spans:
        assert e["dur"] >= 0 and e["ts"] >= 0 and e["ts"] + e["dur"] <= total_us * (1 + 1e-9)
    for track in {(e["pid"], e["tid"]) for e in spans}:
        lane = sorted((e for e in spans if (e["pid"], e["tid"]) == track), key=lambda e: e["ts"])
        for a, b in zip(lane, lane[1:]):
            assert b["ts"] >= a["ts"] + a["dur"] - 1e-6 * total_us     # no overlap within a track


@pytest.mark.slow
def test_a_wafer_pipeline_trace_ends_at_the_predicted_time_with_every_microbatch():
    """Llama-3-70B prefill of 2,048 tokens on four WSE-3s: 32 microbatches, each pass re-reading the
    chip's weights. The trace drew one pass per chip and ended at 1.60 ms of the 2.69 ms predicted; it
    now ends with the run, and its slices add up to the chips' busy time: the first pass kernel by
    kernel, the other passes (their weight re-reads in the arguments) and the fill latencies."""
    r = narrowpipe.analyze(load_example("llama-3-70b"), "cerebras-wse3")
    plan, total_us = r.timing.plan, r.time_s * 1e6
    assert plan["chips"] == 4 and plan["inputs"] == 2048 and plan["microbatches"] == 32 and not plan["weight_streaming"]
    events = report_trace(r).to_dict()["traceEvents"]
    devices = {pid for pid, name in _names(events, "process_name").items() if ": device" in name}
    spans = [e for e in events if e["ph"] == "X" and e["pid"] in devices]
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(total_us, rel=1e-9)
    _fits_the_run(spans, total_us)
    passes = [e for e in spans if e["cat"] == "passes"]
    assert len(passes) == 4 and all(e["name"] == "microbatches 2-32" and e["args"]["passes"] == 31 for e in passes)
    for e in passes:
        assert e["args"]["busy_us"] == pytest.approx(31 * e["args"]["pass_us"])
        assert e["dur"] == pytest.approx(30 * e["args"]["every_us"] + e["args"]["pass_us"])
    rereads = sum(e["args"]["weight_rereads_us"] for e in passes)
    assert rereads == pytest.approx(sum(k.reread_s for k in r.timeline) * 1e6) and rereads > 0
    drawn = sum(e["dur"] for e in spans if e["cat"] in ("fill", "transfer") or e["cat"].startswith(KERNEL_CATEGORY))
    drawn += sum(e["args"]["busy_us"] for e in passes)
    assert drawn == pytest.approx(sum(k.time_s for k in r.timeline) * 1e6, rel=1e-9)


def test_a_tensor_parallel_kernel_is_a_shard_on_every_device():
    r = narrowpipe.analyze(load_example("llama-3-8b"), "sambanova-sn40l", dims={"seq": 128})
    events = report_trace(r).to_dict()["traceEvents"]
    devices = {pid for pid, name in _names(events, "process_name").items() if ": device" in name}
    assert len(devices) == r.timing.devices == 16
    (q,) = [k for k in r.timeline if k.scope == "model.layers.0.self_attn.q_proj"]
    shards = [e for e in events if e["ph"] == "X" and e["name"] == q.name and e["cat"].startswith(KERNEL_CATEGORY)]
    assert {e["pid"] for e in shards} == devices and {e["ts"] for e in shards} == {q.start_s * 1e6}
    assert {e["args"]["flops"] for e in shards} == {2 * 128 * 4096 * 4096 / 16}    # one shard's FLOPs, by hand
    spans = [e for e in events if e["ph"] == "X" and e["pid"] in devices]
    _fits_the_run(spans, r.time_s * 1e6)


def test_one_device_slices_run_end_to_end(comparison):
    h100 = comparison["h100"]
    events = report_trace(h100).to_dict()["traceEvents"]
    kernels = sorted((e for e in events if e.get("cat", "").startswith(KERNEL_CATEGORY)), key=lambda e: e["ts"])
    assert kernels[0]["ts"] == 0.0
    for a, b in zip(kernels, kernels[1:]):
        assert b["ts"] == pytest.approx(a["ts"] + a["dur"], rel=1e-9, abs=1e-9)
    assert kernels[-1]["ts"] + kernels[-1]["dur"] == pytest.approx(h100.time_s * 1e6, rel=1e-9)
    first = kernels[0]["args"]
    assert {"bound", "flops", "bytes", "compute_us", "memory_us", "overhead_us"} <= set(first)


def test_chip_to_chip_transfers_sit_on_the_communication_track(comparison):
    groq = comparison["groq-lpu"]
    events = report_trace(groq).to_dict()["traceEvents"]
    threads = _threads(events)
    hops = [e for e in events if e.get("cat") == "transfer"]
    assert len(hops) == groq.timing.devices - 1 > 0
    by_name = {e["name"]: e for e in events if e.get("cat", "").startswith(KERNEL_CATEGORY)}
    for hop in hops:
        assert threads[(hop["pid"], hop["tid"])] == "communication"
        kernel = by_name[hop["args"]["after"]]
        assert hop["ts"] == pytest.approx(kernel["ts"] + kernel["dur"]) and hop["pid"] == kernel["pid"]


def test_the_builder_takes_new_tracks_from_other_schedules():
    """What a planner's pipeline schedule will do: its own processes and tracks beside a report's."""
    b = TraceBuilder()
    stage = b.track(b.process("stage 0"), "microbatches")
    b.span(stage, "fwd mb0", 0.0, 1e-3, cat="pipeline")
    b.instant(stage, "bubble", 1e-3)
    b.counter(1, "memory", 0.0, {"bytes": 1e9})
    assert b.track(1, "microbatches") == stage            # the same track on a second ask
    events = b.to_dict()["traceEvents"]
    assert [e["ph"] for e in events if e["ph"] != "M"] == ["X", "i", "C"]
    assert events[-3]["dur"] == pytest.approx(1000.0)    # microseconds
    with pytest.raises(ValueError):
        b.span(stage, "bad", 0.0, -1.0)


def test_cli_writes_traces_and_refuses_one_without_a_schedule(tmp_path, capsys):
    out = tmp_path / "deep" / "a.json"
    assert main(["analyze", "gpt2", "--target", "h100", "--set", "seq=32", "--trace", str(out), "--top", "1"]) == 0
    assert len([e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X"]) > 100
    assert main(["analyze", "gpt2", "--trace", str(tmp_path / "b.json")]) == 2
    assert "--trace needs a predicted schedule" in capsys.readouterr().err
    assert not (tmp_path / "b.json").exists()
    assert main(["compare", "gpt2", "--targets", "h100", "--set", "seq=8,16", "--trace", str(tmp_path / "c.json")]) == 2
    assert "take one point" in capsys.readouterr().err


def test_renderers_name_what_they_take_when_given_a_graph(tmp_path):
    from narrowpipe.errors import NarrowpipeError
    from narrowpipe.render.html import write_html
    from narrowpipe.render.trace import write_trace
    g = narrowpipe.transformer(1, 64, 2, 100, seq=8)
    for write in (write_trace, write_html):
        with pytest.raises(NarrowpipeError, match="takes a Report .* got a Graph"):
            write(tmp_path / "x.out", g)
    from narrowpipe.render.roofline import plot_roofline
    with pytest.raises(NarrowpipeError, match="roofline draws a Report"):
        plot_roofline(g)
