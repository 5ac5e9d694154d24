"""Decode attention on systolic chips: with one query row per K/V head, the arrays pass one key per
cycle per contraction; where the chip lists its vector cores' rate (Gaudi 3's TPCs), the dot
products run there when that is faster, as Intel's published decode rates require."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution.common import memory_time


def _decode_attention(target: str):
    # Llama-2-7B's attention (MHA: one query row per K/V head), batch 64 at a 4,096-token cache
    g = narrowpipe.transformer(layers=1, hidden=4096, heads=32, vocab=32000, ffn=11008, seq=1, past=4096)
    r = narrowpipe.analyze(g, target, dims={"batch": 64})
    (k,) = [k for k in r.timeline if k.kind == "attention"]
    return k


def test_gaudi3_decode_attention_runs_its_dot_products_on_the_vector_cores_and_is_memory_bound():
    k = _decode_attention("gaudi3")
    t = get_target("gaudi3")
    flops = 2 * 2 * 64 * 32 * 4097 * 128                     # QK^T and PV over past + 1 keys
    assert k.flops == flops
    dots = flops / t.vector_flops["bf16"]                     # 28.7 TFLOP/s (HC24-G3)
    assert dots <= k.compute_s <= 1.1 * dots                  # plus the exps on the same cores
    # on the MME (8 arrays at 1.6 GHz, one key a cycle per contraction) it took 2.6x its HBM time
    assert k.bound == "memory" and k.memory_s == pytest.approx(memory_time(t, k.bytes), rel=1e-9)
    # Intel's Llama 2 7B fp8 2048/2048 batch 75 at 2,734 tok/s: a decode step under 27 ms, less than
    # the MME's attention alone (49.8 ms); the HBM time is a lower bound it must stay under
    assert k.compute_s < k.memory_s


def test_a_chip_without_a_listed_vector_rate_keeps_the_arrays():
    """TPU v5e lists no VPU rate: an assumed fraction of the matrix rate must not pick the unit."""
    k = _decode_attention("tpu-v5e")
    assert k.unit == "MXU + VPU"
