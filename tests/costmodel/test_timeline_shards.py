"""A tensor-parallel layout on the timeline: every kernel is a shard on each device of the node, with one
shard's work. SambaNova's SN40L splits a decoder over the 16 sockets of a node; the timeline put every
kernel on device 0 with the whole kernel's FLOPs, so its roofline showed the node's rate against one
socket's roof (7.1 PFLOP/s for Llama-3-70B's LM head under a 638 TFLOP/s roof)."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution.common import memory_time
from narrowpipe.costmodel.execution.dataflow_tp import all_reduce_seconds
from narrowpipe.models.examples import load_example

SEQ, HIDDEN, SOCKETS = 128, 4096, 16          # Llama-3-8B's hidden size; an SN40L-16 node's sockets


@pytest.fixture(scope="module")
def sn40l():
    return narrowpipe.analyze(load_example("llama-3-8b"), "sambanova-sn40l", dims={"seq": SEQ})


def test_the_layout_is_tensor_parallel_over_the_node(sn40l):
    plan = sn40l.timing.plan
    assert plan["layout"] == "tensor_parallel" and plan["chips"] == SOCKETS == sn40l.timing.devices
    assert {(k.device, k.shards) for k in sn40l.timeline} == {(0, SOCKETS)}   # from device 0, on all 16


def test_a_sharded_matmul_does_one_sixteenth_of_the_work_on_each_device(sn40l):
    target = get_target("sambanova-sn40l")
    (q,) = [k for k in sn40l.timeline if k.scope == "model.layers.0.self_attn.q_proj"]
    flops = 2 * SEQ * HIDDEN * HIDDEN                                      # by hand: [128, 4096] x [4096, 4096]
    nbytes = 2 * (SEQ * HIDDEN + HIDDEN * HIDDEN + SEQ * HIDDEN)           # bf16 input, weight, output
    assert (q.flops, q.bytes) == (flops, nbytes)                           # the whole kernel's work
    assert (q.device_flops, q.device_bytes) == (flops / SOCKETS, nbytes / SOCKETS)
    # each device's time is its share: the memory term is 1/16 of the kernel's bytes at one socket's HBM
    assert q.memory_s == pytest.approx(memory_time(target, nbytes) / SOCKETS, rel=1e-12)
    assert q.kernel_s == pytest.approx(max(q.compute_s, q.memory_s) + q.overhead_s, rel=1e-12)
    assert q.achieved_flops_per_s == pytest.approx(flops / SOCKETS / q.kernel_s)
    assert q.achieved_flops_per_s <= target.matrix_flops["bf16"]           # under one socket's roof


def test_the_all_reduce_closing_each_block_is_the_shards_trailing_transfer(sn40l):
    target = get_target("sambanova-sn40l")
    reducing = [k for k in sn40l.timeline if k.transfer_s > 0]
    assert len(reducing) == sn40l.timing.plan["all_reduces"] == 2 * 32     # attention and MLP of 32 layers
    residual = SEQ * HIDDEN * 2                                            # the bf16 residual stream
    for k in reducing:
        assert k.transfer_s == pytest.approx(all_reduce_seconds(residual, SOCKETS, target), rel=1e-12)
        assert k.pass_transfer_s == k.transfer_s and k.comm_s == k.transfer_s
    assert sum(k.time_s for k in sn40l.timeline) == pytest.approx(sn40l.time_s, rel=1e-12)   # each device's run
