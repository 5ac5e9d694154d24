"""Fresh pages on a CPU: the large buffers an eager op allocates are mapped anew and pay a page
fault per page; hand-computed on tiny graphs (no timing)."""

from __future__ import annotations

import dataclasses

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.costmodel.analyze import analyze
from narrowpipe.costmodel.execution.fresh_pages import fresh_bytes
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.kernels import fuse
from narrowpipe.ir import DType, Graph, Op, Source, TensorType, ValueKind

MIB = 2**20
FRESH_BW = 2.5e9          # bytes/s of fresh pages (the development host measures ~2.5 GB/s)


def _epyc(bandwidth: float | None = FRESH_BW) -> narrowpipe.backends.Target:
    epyc = get_target("epyc-9755")
    if bandwidth is None:
        return epyc
    return dataclasses.replace(epyc, fresh_page_bandwidth=bandwidth,
                               sources={**epyc.sources, "fresh_page_bandwidth": "assumption: test"})


def relu_graph(elements: int, source_op: str = "aten.relu.default") -> Graph:
    g = Graph("relu")
    x = g.add_input("x", TensorType(DType.FP32, (elements,)))
    g.set_outputs(g.add_node(Op.RELU, [x], [TensorType(DType.FP32, (elements,))],
                             source=Source(op=source_op)).outputs)
    return g


def conv_graph(c: int, hw: int, k: int, r: int, stride: int = 1, groups: int = 1) -> Graph:
    g = Graph("conv")
    x = g.add_input("x", TensorType(DType.FP32, (8, c, hw, hw)))
    w = g.add_input("w", TensorType(DType.FP32, (k, c // groups, r, r)), ValueKind.PARAM)
    out = (hw + 2 * (r // 2) - r) // stride + 1
    g.set_outputs(g.add_node(Op.CONV, [x, w], [TensorType(DType.FP32, (8, k, out, out))],
                             {"stride": (stride, stride), "padding": (r // 2, r // 2), "dilation": (1, 1),
                              "groups": groups}).outputs)
    return g


def _fresh(graph: Graph, threshold: float = 32 * MIB) -> int:
    table = interpret(graph, {})
    (kernel,) = [k for k in fuse(table, "none") if not k.is_free]
    return fresh_bytes(kernel, table, threshold)


def test_only_outputs_at_or_over_the_mmap_threshold_are_fresh():
    assert _fresh(relu_graph(10 * MIB)) == 40 * MIB            # 40 MiB fp32 output: mapped anew
    assert _fresh(relu_graph(8 * MIB)) == 32 * MIB             # exactly the threshold: mmap too
    assert _fresh(relu_graph(8 * MIB - 1)) == 0                # under it: from the heap, mapped
    assert _fresh(relu_graph(10 * MIB, "aten.relu_.default")) == 0     # in place: no new buffer


def test_a_blocked_layout_conv_also_copies_its_input_and_output_but_a_1x1_stride_1_one_does_not():
    # 8 x 96 x 112 x 112 fp32 = 36.75 MiB in; 8 x 8 x 112 x 112 = 3.06 MiB out
    assert _fresh(conv_graph(96, 112, 8, 3)) == 8 * 96 * 112 * 112 * 4                # input reorder only
    assert _fresh(conv_graph(96, 112, 8, 1)) == 0                                     # GEMM on NCHW
    big_out = 8 * 96 * 112 * 112 * 4
    assert _fresh(conv_graph(8, 112, 96, 3)) == 2 * big_out                           # output + its reorder
    assert _fresh(conv_graph(8, 112, 96, 1)) == big_out                               # the output alone
    dw_in = 8 * 96 * 113 * 113 * 4
    assert _fresh(conv_graph(96, 113, 96, 3, stride=2, groups=96)) == dw_in          # depthwise s2


def test_the_kernel_pays_the_fresh_bytes_at_the_measured_rate_on_top_of_its_roofline():
    g = relu_graph(10 * MIB)
    with_pages = analyze(g, _epyc(), eager_overhead=False)
    without = analyze(g, _epyc(None), eager_overhead=False)
    assert with_pages.time_s - without.time_s == pytest.approx(40 * MIB / FRESH_BW)
    assert with_pages.ops[0].bound == "overhead"               # 17 ms of faults against ~0.1 ms of streaming
    small = relu_graph(MIB)
    assert analyze(small, _epyc(), eager_overhead=False).time_s == analyze(small, _epyc(None),
                                                                          eager_overhead=False).time_s


def test_the_catalog_cpus_state_the_threshold_and_do_not_model_the_rate():
    for name in ("epyc-9755", "xeon-6980p"):
        t = get_target(name)
        assert t.fresh_page_threshold == 32 * MIB and "glibc" in t.source("fresh_page_threshold")
        assert t.fresh_page_bandwidth is None
