"""The timeline of a timed report: one entry per launched kernel, on its device's clock, and the
target's roofline ceilings, checked against hand computations and the targets' own figures."""

from __future__ import annotations

import json
import math

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution.common import memory_time
from narrowpipe.costmodel.execution.dataflow import hop_seconds
from narrowpipe.costmodel.report import Report
from narrowpipe.costmodel.timeline import ScheduledKernel
from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind
from narrowpipe.models.examples import load_example


def gemm_graph(m: int, n: int, k: int) -> Graph:
    g = Graph("gemm")
    a = g.add_input("a", TensorType(DType.BF16, (m, k)))
    w = g.add_input("w", TensorType(DType.BF16, (k, n)), ValueKind.PARAM)
    g.set_outputs(g.add_node(Op.DOT, [a, w], [TensorType(DType.BF16, (m, n))],
                             {"lhs_contract": (1,), "rhs_contract": (0,)}).outputs)
    return g


@pytest.fixture(scope="module")
def gpt2():
    return load_example("gpt2")


def test_one_gemm_is_one_kernel_with_its_hand_counted_work():
    r = narrowpipe.analyze(gemm_graph(512, 1024, 256), "h100")
    (k,) = r.timeline
    assert k.flops == 2 * 512 * 1024 * 256
    assert k.bytes == (512 * 256 + 256 * 1024 + 512 * 1024) * 2          # bf16 operands and result, once
    assert (k.start_s, k.time_s, k.device, k.stream, k.kind) == (0.0, r.time_s, 0, "compute", "matmul")
    assert k.time_s == pytest.approx(max(k.compute_s, k.memory_s) + k.overhead_s, rel=1e-12)
    assert k.achieved_flops_per_s == pytest.approx(k.flops / r.time_s)


def test_one_device_kernels_run_end_to_end_and_end_with_the_run(gpt2):
    r = narrowpipe.analyze(gpt2, "h100", dims={"seq": 64})
    tl = r.timeline
    assert len(tl) == r.timing.kernels                  # every launched kernel, views left out
    assert {k.device for k in tl} == {0}
    for a, b in zip(tl, tl[1:]):
        assert b.start_s == pytest.approx(a.end_s, rel=1e-12, abs=1e-18)
    assert tl[-1].end_s == pytest.approx(r.time_s, rel=1e-12)
    # a kernel's time is the time the op rows give its anchor (the rows of fused nodes hold 0)
    by_kernel: dict[str, float] = {}
    for row in r.ops:
        by_kernel[row.kernel] = by_kernel.get(row.kernel, 0.0) + (row.time_s or 0.0)
    assert all(by_kernel[k.name] == pytest.approx(k.time_s) for k in tl)
    streams = {k.stream for k in tl}
    assert streams == {"compute", "memory"}              # no collectives in one device's forward pass
    assert all((k.stream == "memory") == (k.flops == 0) for k in tl)


def test_a_pipelined_layout_runs_every_kernel_once_per_microbatch_and_ends_with_the_run(gpt2):
    """Each chip runs its kernels once per microbatch, re-reading their weights each pass: the
    timeline holds every pass, so the last one ends at the predicted total (before, each chip was
    drawn for one pass and the trace of Llama-3-70B on a WSE-3 ended at 1.60 of 2.69 ms)."""
    r = narrowpipe.analyze(gpt2, "groq-lpu", dims={"seq": 128})
    plan, tl = r.timing.plan, r.timeline
    chips, m, stages = plan["chips"], plan["microbatches"], plan["stage_seconds"]
    # causal LM: the 128 tokens stream through the chips, in the microbatch count that finishes first
    assert chips > 1 and plan["inputs"] == 128 and 1 < m <= 128
    assert {k.passes for k in tl} == {m}
    target = get_target("groq-lpu")
    (fc,) = [k for k in tl if k.scope == "transformer.h.0.mlp.c_fc"]
    fc_weights = 4 * (768 * 3072 + 3072)                  # GPT-2's c_fc weight and bias, fp32, read every pass
    assert fc.reread_s == pytest.approx((m - 1) * memory_time(target, fc_weights), rel=1e-12)
    # the whole kernel's work, not a schedule share of it: 2 x 128 x 768 x 3072 and the bias add
    # (was divided by latency / total, which put pipelined kernels' roofline points decades low)
    # (with the tanh GELU its epilogue: 7 FLOPs per element, the tanh a transcendental)
    assert fc.flops == fc.executed_flops == 2 * 128 * 768 * 3072 + 128 * 3072 + 7 * 128 * 3072
    for k in tl:
        once = k.time_s - k.passes * k.pass_s             # paid once: the launch, and a hop's latency
        hop = hop_seconds(0, target) if k.transfer_s else 0.0
        assert once == pytest.approx(k.overhead_s + hop, rel=1e-9, abs=1e-18)
    busy = [sum(k.time_s for k in tl if k.device == d) for d in range(chips)]
    rereads = [sum(k.reread_s for k in tl if k.device == d) for d in range(chips)]
    assert busy == pytest.approx([s + x for s, x in zip(stages, rereads)], rel=1e-9)   # each chip's stage, plus
    assert all(x > 0 for x in rereads)                                                 # the weights read again
    slowest = 0.0
    for d in range(chips):
        mine = [k for k in tl if k.device == d]
        for a, b in zip(mine, mine[1:]):                      # the first pass runs the kernels end to end
            assert b.start_s == pytest.approx(a.start_s + a.pass_s, rel=1e-12, abs=1e-18)
        one_pass = sum(k.pass_s for k in mine)
        slowest = max(slowest, one_pass)
        assert [k.every_s for k in mine] == pytest.approx([slowest] * len(mine), rel=1e-12)   # the slowest pace so far
    assert max(k.last_pass_end_s for k in tl) == pytest.approx(r.time_s, rel=1e-12)
    assert sum(busy) > r.time_s                               # the chips overlap: more busy time than wall time
    hops = [k for k in tl if k.transfer_s > 0]
    assert len(hops) == chips - 1                             # one transfer at every chip boundary
    assert all(k.stream != "communication" and 0 < k.pass_transfer_s <= k.pass_s for k in hops)


def test_an_op_without_a_rule_stays_on_the_timeline_untimed():
    g = Graph("m")
    x = g.add_input("x", TensorType(DType.FP32, (4, 8)))
    w = g.add_input("w", TensorType(DType.FP32, (8, 8)), ValueKind.PARAM)
    y = g.add_node(Op.DOT, [x, w], [TensorType(DType.FP32, (4, 8))], {"lhs_contract": (1,), "rhs_contract": (0,)})
    z = g.add_node(Op.UNKNOWN, y.outputs, [TensorType(DType.FP32, (4, 8))], {"source_op": "aten.mystery.default"})
    g.set_outputs(z.outputs)
    r = narrowpipe.analyze(g, "h100")
    odd = [k for k in r.timeline if not k.modeled]
    assert len(odd) == 1 and odd[0].time_s == 0.0 and len(r.timeline) == 2


def test_ceilings_are_the_target_datasheet_figures():
    c = narrowpipe.analyze(gemm_graph(8, 8, 8), "h100").ceilings
    by_field = {x.field: x.value for x in c.compute + c.memory}
    # H100 SXM5: 989 TFLOP/s dense bf16, 3.35 TB/s HBM3 (NVIDIA datasheet; backends/catalog/h100-sxm.toml)
    assert by_field["matrix_flops.bf16"] == 989e12 and by_field["memory_bandwidth"] == 3.35e12
    assert by_field["vector_flops.fp32"] == 67e12
    assert c.matmul_efficiency == get_target("h100").matmul_efficiency
    cerebras = narrowpipe.analyze(gemm_graph(8, 8, 8), "cerebras-wse3").ceilings
    levels = {x.label for x in cerebras.memory}
    assert {"on-chip", "memory", "external memory"} <= levels   # MemoryX streams the weights


def test_report_json_keeps_the_timeline_and_ceilings(gpt2):
    r = narrowpipe.analyze(gpt2, "groq-lpu", dims={"seq": 32})
    back = Report.from_dict(json.loads(r.to_json()))
    assert back.timeline == r.timeline and back.ceilings == r.ceilings
    assert narrowpipe.analyze(gpt2, dims={"seq": 32}).to_dict()["timeline"] == []
    rereads = sum(k.reread_s for k in back.timeline)        # the stages' one pass, and the weights read again
    assert math.isclose(sum(k.time_s for k in back.timeline), sum(r.timing.plan["stage_seconds"]) + rereads)
    old = {key: v for key, v in r.to_dict()["timeline"][0].items()        # a version-4 entry: one pass
           if key not in ("passes", "every_s", "pass_s", "pass_transfer_s", "reread_s", "shards")}
    first = ScheduledKernel.from_dict(old)
    assert (first.passes, first.pass_s, first.shards) == (1, first.time_s, 1)


def test_a_kernel_split_over_chips_is_drawn_piece_by_piece_and_the_run_ends_when_predicted():
    """Groq holds Llama-3-8B's 1.05 GB head on 5 chips of 230 MB: each piece is an entry on its chip
    with its share of the FLOPs, and the last pass ends at the pipelined time the model predicts."""
    from narrowpipe.models.examples import load_example
    r = narrowpipe.analyze(load_example("llama-3-8b"), "groq-lpu", dims={"batch": 1, "seq": 512})
    head = [e for e in r.timeline if e.flops and e.scope.startswith("lm_head")]
    assert len({e.device for e in head}) >= 5
    assert sum(e.flops for e in head) == pytest.approx(2 * 512 * 4096 * 128256, rel=1e-6)
    assert max(e.last_pass_end_s for e in r.timeline) == pytest.approx(r.time_s, rel=1e-9)
    assert sum(e.flops for e in r.timeline) == pytest.approx(r.flops, rel=1e-9)
