"""A depthwise convolution on the CPU is oneDNN's reorder + ``jit_dw`` + reorder path: a set-up cost
per call, a cost per input + output element and one per output tap, each measured by ``calibrate``.
The time is checked against the same three terms counted by hand for MobileNet- and ConvNeXt-like
layers, and the fit against measurements generated from known terms."""

from __future__ import annotations

import dataclasses

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.calibration.depthwise_sweep import DEPTHWISE_SHAPES, depthwise_terms, depthwise_times
from narrowpipe.calibration.sweeps import Measurement
from narrowpipe.ir import DType, Graph, Op, TensorType

CALL, ELEMENT, TAP = 40e-6, 0.09e-9, 0.005e-9


def _cpu(**fields: object) -> narrowpipe.backends.Target:
    epyc = get_target("epyc-9755")
    sources = {**epyc.sources, **{k: "assumption: test" for k in fields}}
    return dataclasses.replace(epyc, sources=sources, **fields)


def dw_graph(c: int, size: int, k: int, stride: int, batch: int = 1) -> Graph:
    out = (size + 2 * (k // 2) - k) // stride + 1
    g = Graph("dw")
    x = g.add_input("x", TensorType(DType.FP32, (batch, c, size, size)))
    w = g.add_input("w", TensorType(DType.FP32, (c, 1, k, k)))
    y = g.add_node(Op.CONV, [x, w], [TensorType(DType.FP32, (batch, c, out, out))],
                   {"stride": (stride, stride), "padding": (k // 2, k // 2), "dilation": (1, 1), "groups": c})
    g.set_outputs(y.outputs)
    return g


@pytest.mark.parametrize(("c", "size", "k", "stride", "batch"), [
    (96, 112, 3, 2, 1),     # MobileNetV2's widest stride-2 layer: 1,204,224 in, 301,056 out
    (960, 7, 3, 1, 1),      # its last stage: set-up dominates
    (96, 56, 7, 1, 8),      # ConvNeXt-T's first 7x7 layer at batch 8: 49 taps per output
])
def test_time_is_setup_plus_elements_plus_taps_by_hand(c, size, k, stride, batch):
    fields = {"depthwise_call_time": CALL, "depthwise_element_time": ELEMENT, "depthwise_tap_time": TAP}
    target = _cpu(**fields)
    r = narrowpipe.analyze(dw_graph(c, size, k, stride, batch), target, eager_overhead=False)
    out = (size + 2 * (k // 2) - k) // stride + 1
    elements = batch * c * (size * size + out * out)
    taps = batch * c * out * out * k * k
    compute = elements * ELEMENT + taps * TAP
    (kt,) = r.timeline
    assert kt.compute_s == pytest.approx(compute)
    assert kt.overhead_s == pytest.approx(target.launch_overhead + CALL)
    assert r.time_s == pytest.approx(max(compute, kt.memory_s) + target.launch_overhead + CALL)


def test_a_7x7_layer_costs_more_than_a_3x3_one_of_the_same_input():
    target = _cpu(depthwise_call_time=CALL, depthwise_element_time=ELEMENT, depthwise_tap_time=TAP)
    t3 = narrowpipe.analyze(dw_graph(96, 56, 3, 1), target, eager_overhead=False).time_s
    t7 = narrowpipe.analyze(dw_graph(96, 56, 7, 1), target, eager_overhead=False).time_s
    assert t7 - t3 == pytest.approx(96 * 56 * 56 * (49 - 9) * TAP)


def test_without_the_fitted_terms_the_per_op_rate_still_applies():
    epyc = get_target("epyc-9755")
    per_op = dataclasses.replace(epyc, vector_op_flops={"conv_depthwise": 2e9},
                                 sources={**epyc.sources, "vector_op_flops.conv_depthwise": "assumption: test"})
    r = narrowpipe.analyze(dw_graph(64, 56, 3, 1), per_op, eager_overhead=False)
    assert r.timeline[0].compute_s == pytest.approx(64 * 56 * 56 / 2e9)


def test_the_fit_recovers_known_terms_from_the_swept_shapes():
    ms = [Measurement("dispatch", "fp32", (1,), 1, 8, 1e-6)]
    for c, px, k, s in DEPTHWISE_SHAPES:
        elements, taps = depthwise_terms(c, px, k, s)
        seconds = 1e-6 + CALL + ELEMENT * elements + TAP * taps
        ms.append(Measurement("depthwise", "fp32", (c, px, k, s), taps, elements, seconds))
    call, element, tap = depthwise_times(ms)
    assert call == pytest.approx(CALL, rel=1e-6)       # the dispatch taken out
    assert element == pytest.approx(ELEMENT, rel=1e-6)
    assert tap == pytest.approx(TAP, rel=1e-6)
    assert depthwise_times(ms[:4]) is None


def test_a_term_fitted_negative_is_dropped():
    ms = []
    for c, px, k, s in DEPTHWISE_SHAPES:
        elements, taps = depthwise_terms(c, px, k, s)
        ms.append(Measurement("depthwise", "fp32", (c, px, k, s), taps, elements, CALL + ELEMENT * elements
                              - 0.001e-9 * taps))
    call, element, tap = depthwise_times(ms)
    assert tap == 0.0 and call > 0 and element > 0


def test_terms_by_hand_for_a_stride_two_layer():
    # 64 channels, 56x56, 3x3, stride 2, padding 1: 28x28 outputs
    assert depthwise_terms(64, 56, 3, 2) == (64 * 56 * 56 + 64 * 28 * 28, 64 * 28 * 28 * 9)
