"""The roofline plot: a point per kernel at the hand-computable place, the chip's ceilings, labels,
and a PNG that is not blank."""

from __future__ import annotations

import numpy as np
import pytest

import narrowpipe
from narrowpipe.errors import NarrowpipeError
from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind
from narrowpipe.models.examples import load_example
from narrowpipe.render.roofline import plot_roofline, plotted_kernels, roofline_figure


def _points(fig):
    ax = fig.axes[0]
    return [tuple(xy) for c in ax.collections if str(c.get_gid()).startswith("kernels")
            for xy in c.get_offsets()]


@pytest.fixture(scope="module")
def gpt2_h100():
    return narrowpipe.analyze(load_example("gpt2"), "h100", dims={"seq": 64})


def test_a_gemm_is_one_point_at_its_intensity_and_achieved_rate():
    m, n, k = 1024, 2048, 512
    g = Graph("gemm")
    a = g.add_input("a", TensorType(DType.BF16, (m, k)))
    w = g.add_input("w", TensorType(DType.BF16, (k, n)), ValueKind.PARAM)
    g.set_outputs(g.add_node(Op.DOT, [a, w], [TensorType(DType.BF16, (m, n))],
                             {"lhs_contract": (1,), "rhs_contract": (0,)}).outputs)
    r = narrowpipe.analyze(g, "h100")
    (x, y), = _points(roofline_figure(r))
    flops, nbytes = 2 * m * n * k, 2 * (m * k + k * n + m * n)       # by hand: bf16, each operand once
    assert x == pytest.approx(flops / nbytes) and y == pytest.approx(flops / r.time_s)


def test_every_kernel_with_work_is_a_point_and_the_rest_are_counted(gpt2_h100, tmp_path):
    r = gpt2_h100
    png = tmp_path / "roof.png"
    fig = plot_roofline(r, png)
    points = _points(fig)
    timed = [k for k in r.timeline if k.time_s > 0]
    with_work = [k for k in timed if k.flops and k.bytes]
    # 104 kernels: each of the 12 layers' tanh GELU (two kernels unfused) is c_fc's epilogue
    assert len(points) == len(with_work) == 92 and len(timed) == r.timing.kernels == 104
    # points are on the useful FLOPs: the lesser of the executed (a causal attention's skipped
    # blocks out) and the model's count (a GEMM's tile padding is no needed work)
    useful = [min(k.executed_flops or k.flops, k.flops) for k in with_work]
    expected = sorted((f / k.bytes, f / k.time_s) for f, k in zip(useful, with_work))
    assert np.allclose(sorted(points), expected, rtol=1e-12)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any("not drawn: 12 moving bytes, no FLOPs (" in t for t in texts)
    shown, off = plotted_kernels(r)
    assert len(shown) + len(off) == len(timed)
    # the report's top bottlenecks are labelled, heaviest first
    labels = [t.get_text() for t in fig.axes[0].texts if t.get_gid() == "bottleneck"]
    assert labels[0].startswith(f"#1 {r.timing.top[0].label}") and len(labels) == len(r.timing.top)
    # the PNG has a drawing in it: many colours, varied pixels
    import matplotlib.image
    pixels = matplotlib.image.imread(png)
    assert pixels.shape[0] > 500 and pixels.shape[1] > 800
    assert pixels[..., :3].std() > 0.05
    assert len({tuple(p) for p in pixels[::7, ::7, :3].reshape(-1, 3).round(2).tolist()}) > 20


def test_ceilings_are_one_line_per_roof_and_per_memory_level(gpt2_h100):
    fig = roofline_figure(gpt2_h100)
    lines = [ln for ln in fig.axes[0].lines if ln.get_gid() == "ceiling"]
    c = gpt2_h100.ceilings
    roofs = {x.value for x in c.compute}               # equal peaks (fp8/int8) share one line
    assert len(lines) == len(roofs) + len({x.value for x in c.memory})
    tops = {ln.get_ydata()[-1] for ln in lines}
    assert 989e12 in tops and 67e12 in tops            # H100 SXM dense bf16 and fp32 vector peaks


def test_svg_and_bad_inputs(gpt2_h100, tmp_path):
    svg = tmp_path / "r.svg"
    plot_roofline(gpt2_h100, svg)
    assert svg.read_text().lstrip().startswith("<?xml") and "<svg" in svg.read_text()[:2000]
    with pytest.raises(NarrowpipeError, match="png or .svg"):
        plot_roofline(gpt2_h100, tmp_path / "r.jpg")
    with pytest.raises(NarrowpipeError, match="timed report"):
        plot_roofline(narrowpipe.analyze(load_example("gpt2"), dims={"seq": 8}))


def test_an_emulated_precision_gets_its_own_roof_and_the_achievable_line():
    r = narrowpipe.analyze(load_example("gpt2"), "tpu-v5e", dims={"seq": 32},   # fp32 on bf16-only MXUs
                           fp32_matmul="highest")
    lines = {ln.get_gid(): ln for ln in roofline_figure(r).axes[0].lines if ln.get_gid() != "ceiling"}
    emulated = 197e12 / 6              # v5e: 197 TFLOP/s bf16 (Google Cloud docs), fp32 as six bf16 passes (XLA)
    assert lines["run-ceiling"].get_ydata()[0] == pytest.approx(emulated)
    assert lines["achievable"].get_ydata()[-1] == pytest.approx(emulated * r.ceilings.matmul_efficiency)
    assert "fp32 as 6x bf16" in lines["achievable"].get_label()
    # by default (JAX's, PyTorch/XLA's) one bf16 pass: the bf16 roof itself, and the label says so
    r = narrowpipe.analyze(load_example("gpt2"), "tpu-v5e", dims={"seq": 32})
    lines = {ln.get_gid(): ln for ln in roofline_figure(r).axes[0].lines if ln.get_gid() != "ceiling"}
    assert "run-ceiling" not in lines and "fp32 as 1x bf16" in lines["achievable"].get_label()
    assert lines["achievable"].get_ydata()[-1] == pytest.approx(197e12 * r.ceilings.matmul_efficiency)


def test_a_tensor_parallel_kernel_is_one_devices_shard_under_one_devices_roof():
    """SambaNova's SN40L splits every kernel over the 16 sockets of a node: a point is one socket's
    shard (its FLOPs and bytes over its time) against one socket's roofs. It was the whole kernel's
    FLOPs over one socket's time, 16x too high: above the roof the title calls per device."""
    r = narrowpipe.analyze(load_example("llama-3-8b"), "sambanova-sn40l", dims={"seq": 128})
    points = _points(roofline_figure(r))
    roof = max(c.value for c in r.ceilings.compute)        # SN40L: 638 TFLOP/s bf16 per socket
    assert roof == 638e12 and max(y for _, y in points) <= roof
    (q,) = [k for k in r.timeline if k.scope == "model.layers.0.self_attn.q_proj"]
    flops = 2 * 128 * 4096 * 4096 / 16                    # by hand: one socket's share of [128, 4096] x [4096, 4096]
    nbytes = 2 * (128 * 4096 + 4096 * 4096 + 128 * 4096) / 16
    assert (flops / nbytes, flops / q.kernel_s) in [pytest.approx(p, rel=1e-12) for p in points]


def test_bottleneck_labels_do_not_cover_each_other_or_the_roofs_labels():
    """Groq: the top kernels sit a few points apart in height, and their labels were drawn over each other."""
    from matplotlib.text import Text
    g = narrowpipe.transformer(4, 256, 4, 1000, seq=1024)
    fig = roofline_figure(narrowpipe.analyze(g, "groq-lpu", dims={"batch": 2}))
    renderer = fig.canvas.get_renderer()
    texts = fig.axes[0].texts
    labels = [t for t in texts if t.get_gid() == "bottleneck"]
    assert len(labels) >= 3
    boxes = [Text.get_window_extent(t, renderer) for t in texts]
    for label in labels:
        mine = Text.get_window_extent(label, renderer)
        assert sum(mine.overlaps(b) for b in boxes) == 1, label.get_text()   # itself only


def test_a_causal_attention_is_plotted_and_utilized_on_the_flops_it_executes():
    """QA: llama-3-8b's SDPA at seq 8192 on an H100 sat at 1.2 PFLOP/s, above the 989 TFLOP/s roof,
    its utilization clamped to 100%: the model's full count over a time that skips the blocks above
    the diagonal. By hand: 64 query blocks of 128 rows run (64 + 1) / (2 * 64) of the blocks; the
    32 heads x 64 query blocks = 2048 work items fill ceil(2048 / 132) = 16 waves of the H100's 132
    SMs; the last wave's idle slots are not executed work (they were counted once: 2112 / 2048)."""
    b, h, s, d = 1, 32, 8192, 128
    g = Graph("sdpa")
    q, k, v = (g.add_input(n, TensorType(DType.BF16, (b, h, s, d))) for n in "qkv")
    g.set_outputs(g.add_node(Op.ATTENTION, [q, k, v], [TensorType(DType.BF16, (b, h, s, d))],
                             {"causal": True}).outputs)
    r = narrowpipe.analyze(g, "h100")
    (kern,) = [x for x in r.timeline if x.op == "attention"]
    full = 4 * s * s * d * h                                  # FlopCounterMode's count: kept
    executed = full * 65 / 128
    assert kern.flops == full and kern.executed_flops == pytest.approx(executed, rel=1e-12)
    peak = r.timing.peak_flops
    assert peak == pytest.approx(989e12, rel=1e-3)               # H100 SXM dense bf16
    assert full / kern.kernel_s > peak                        # the old point: above the roof
    (x, y), = _points(roofline_figure(r))
    assert y == pytest.approx(executed / kern.kernel_s) and y < peak
    assert x == pytest.approx(executed / kern.bytes)
    assert kern.utilization == pytest.approx(executed / (kern.time_s * r.timing.peak_flops)) and kern.utilization < 1
    op = next(o for o in r.ops if o.op == "attention")
    assert op.utilization == pytest.approx(kern.utilization)


@pytest.mark.parametrize("chip", ["groq-lpu", "cerebras-wse3"])
def test_the_legend_covers_no_label(chip):
    """QA93: the legend, fixed in the upper left, covered Groq's 'on-chip = memory 80 TB/s' and
    Cerebras' '21 PB/s' slope labels (steep slopes through that corner) and Cerebras' #1-#3 callouts."""
    from matplotlib.text import Text
    fig = roofline_figure(narrowpipe.analyze(load_example("gpt2"), chip))
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    labels = [t for t in ax.texts if t.get_gid() in ("slope-label", "roof-label", "bottleneck")]
    assert any(t.get_gid() == "slope-label" and "on-chip" in t.get_text() for t in labels)
    for t in labels:
        assert not legend.overlaps(Text.get_window_extent(t, renderer)), t.get_text()
        if t.get_gid() == "bottleneck":        # its arrow too
            assert not legend.overlaps(t.get_window_extent(renderer)), t.get_text()


def test_a_pipelined_points_time_is_its_utilizations_plus_the_weight_rereads():
    """The README's statement of the one basis the two differ on (QA93: Groq's points ~3% apart from
    utilization x peak). By hand, for a compute-bound kernel run in m microbatches: utilization =
    useful / (t1 x peak), t1 = compute + overhead of one pass over the batch; the point is useful /
    kernel_s, and kernel_s = t1 + reread_s (passes 2..m read the stage's weights again). So
    point x kernel_s = utilization x peak x (kernel_s - reread_s), and the point sits below."""
    r = narrowpipe.analyze(load_example("gpt2"), "groq-lpu")
    shown, _ = plotted_kernels(r)
    # on the matrix units: r.timing.peak_flops is theirs (an elementwise kernel that rides its producer's
    # stream, with no launch latency, is compute-bound on the vector units, against their peak)
    pipelined = [k for k in shown if k.bound == "compute" and k.passes > 1 and k.unit == "matrix units"]
    assert len([k for k in pipelined if k.reread_s > 0]) >= 48       # GPT-2's 4 x 12 layer matmuls at least
    for k in pipelined:
        point = k.device_useful_flops / k.kernel_s
        assert k.compute_s + k.overhead_s == pytest.approx(k.kernel_s - k.reread_s, rel=1e-9)
        assert point == pytest.approx(k.utilization * r.timing.peak_flops * (k.kernel_s - k.reread_s) / k.kernel_s,
                                      rel=1e-9)
        if k.reread_s > 0 and k.op == "dot":                            # the README's 3.7%
            assert 0.95 < point / (k.utilization * r.timing.peak_flops) < 0.97
