"""A training step laid out in space keeps each layer's forward, backward and optimizer on its chips.

QA: Llama-3-8B, batch 1 x 2,048 tokens, on WSE-3s took 102 ms over 4 wafers, 99% of it on the
150 GB/s wafer-to-wafer link: laid out in program order, the forward (with every weight) filled wafer
0, the backward wafer 1 and the fp32 Adam states wafers 1-3, so saved activations and gradients
crossed the link (43 ms in one kernel). Its note called the 96.4 GB of optimizer states and 16.1 GB
of gradients "activations and KV cache (118 GB)" and so turned weight streaming down. The compute
floor is 6 x 8.03e9 x 2,048 FLOPs = 98.7 TFLOP at 87.5 PFLOP/s a wafer; ``plan`` on 4 wafers: 4.66 ms.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution import TimingOptions
from narrowpipe.costmodel.execution.dataflow_train import training_footprint
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.timing import fused_program
from narrowpipe.costmodel.training import build_training_graph, training_memory
from narrowpipe.models.examples import load_example
from narrowpipe.render.training import memory_table

# Llama-3-8B by hand (config: vocab 128,256, hidden 4,096, 32 layers, 8 KV heads of 128, MLP 14,336, bf16)
VOCAB_MATRIX = 128256 * 4096 * 2                                     # the embedding, and the head
LAYER = (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336 + 2 * 4096) * 2
WEIGHTS = 2 * VOCAB_MATRIX + 32 * LAYER + 4096 * 2                   # 16,060,522,752 B
PARAMS = WEIGHTS // 2                                                # 8,030,261,376 (rotary buffers aside)
WSE3 = 44e9
LINK = 1.2e12 / 8                                                    # 150 GB/s wafer to wafer (and to MemoryX)
RESIDUAL = 2048 * 4096 * 2                                           # one token-stream tensor at batch 1


@pytest.fixture(scope="module")
def step():
    return build_training_graph(load_example("llama-3-8b"))


@pytest.fixture(scope="module")
def program(step):
    table = interpret(step, {"batch": 1, "seq": 2048})
    return fused_program(table, get_target("cerebras-wse3"), TimingOptions())


@pytest.fixture(scope="module")
def report(step):
    return narrowpipe.analyze(step, "cerebras-wse3", dims={"batch": 1, "seq": 2048})


def test_the_footprint_terms_are_weights_gradients_adam_states_and_activations(program):
    fp = training_footprint(program)
    assert fp.weights == pytest.approx(WEIGHTS, abs=256)             # the export's rotary buffers
    assert fp.gradients == pytest.approx(WEIGHTS, abs=256)           # one bf16 gradient per parameter
    assert fp.optimizer_states == pytest.approx(12 * PARAMS, abs=1024)   # fp32 master, exp_avg, exp_avg_sq
    assert fp.optimizer_states == pytest.approx(96.36e9, rel=1e-3)
    assert 13.7e9 < fp.activations < 15e9                            # saved 13.8 GB + the backward's temporaries
    assert math.ceil(fp.total / WSE3) == 4


def test_each_parameter_its_gradient_and_its_update_share_a_chip(program, report):
    """The backward of a layer runs where its forward ran, and a parameter's update where it lives."""
    chip_of = report.timing.plan["chip_of_kernel"]
    kernels = program.kernels
    checked = 0
    for p in program.table.graph.weights:
        readers = {chip_of[k.name] for k in kernels if p in k.inputs}
        updates = {chip_of[k.name] for k in kernels if k.name.startswith(f"{p.name}_adam")}
        if updates:
            assert len(readers | updates) == 1, (p.name, readers, updates)
            checked += 1
    assert checked == 291
    layer_chip = {}
    for k in kernels:
        scope = k.anchor.source.scope
        if scope.startswith("model.layers.") and "attn" in scope:
            layer = scope.split(".")[2]
            layer_chip.setdefault(layer, set()).add(chip_of[k.name])
    assert all(len(c) == 1 for c in layer_chip.values())              # forward and backward of a layer together


def test_each_chip_holds_a_quarter_of_the_layers_weights(report):
    weights = report.timing.plan["chip_weight_bytes"]
    assert sum(weights) == pytest.approx(WEIGHTS, abs=256)
    # a quarter each, give or take a layer (the embedding's and the head's 1.05 GB at the ends)
    assert all(abs(w - WEIGHTS / 4) <= LAYER for w in weights), weights
    assert max(report.timing.plan["chip_bytes"]) <= WSE3


def test_only_the_token_stream_crosses_the_wafers(report):
    """Forward and backward each cross the 3 boundaries with the residual stream (and, where a cut
    falls inside a layer, the normed copy of it): between 6 and 12 such hops, no saved activation."""
    hop = RESIDUAL / LINK + 5e-6
    comm = sum(k.comm_s for k in report.timeline)
    assert 6 * hop * 0.99 <= comm <= 12 * hop * 1.01
    assert report.time_s < 6e-3                                       # was 102 ms
    # one microbatch: the wafers run in turn, so the step is at least the FLOPs at one wafer's rate
    assert report.time_s > report.flops / (125e15 * 0.7)


def test_one_wafer_streams_weights_in_twice_and_gradients_out_once(step):
    """On one wafer (max_chips=1) MemoryX holds the weights, gradients and Adam states and runs the
    update; the wafer reads every weight in the forward, every matmul weight again in the backward
    (the embedding's backward is a scatter, reading none) and sends every gradient out."""
    one = dataclasses.replace(get_target("cerebras-wse3"), max_chips=1)
    r = narrowpipe.analyze(step, one, dims={"batch": 1, "seq": 2048})
    assert r.timing.plan["weight_streaming"] and r.timing.fits
    streamed = WEIGHTS + (WEIGHTS - VOCAB_MATRIX) + WEIGHTS
    assert r.time_s == pytest.approx(streamed / LINK, rel=0.02)       # 47.1 GB / 150 GB/s = 314 ms
    assert r.timing.narrowest == "external memory"


def test_the_memory_table_says_how_the_chips_hold_what_one_device_cannot(step):
    """Batch 8: the run fits on 6 wafers (243 GB), one device would need all of it: both said."""
    r = narrowpipe.analyze(step, "cerebras-wse3", dims={"batch": 8, "seq": 2048})
    assert r.timing.fits and r.timing.devices == math.ceil(r.timing.memory_required / WSE3) == 6
    mem = training_memory(load_example("llama-3-8b"), dims={"batch": 8, "seq": 2048})
    assert mem.total == pytest.approx(r.timing.memory_required, rel=0.02)
    caption = str(memory_table(mem, WSE3, r.timing).caption)
    assert caption.startswith("fits on 6 chips") and "on one device: does not fit" in caption
