"""Sliding-window attention timed with the key blocks a FlashAttention-style kernel given the window
runs (``window_size``): per query block only the key blocks that meet some of its queries' windows.
References are hand counts of blocks and a brute force over the transformers sliding-window mask
(key ``j`` visible to query ``i`` iff ``j <= i`` and ``i - j < W``), never the tool's own numbers."""

from __future__ import annotations

import dataclasses
from math import ceil

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.backends.defaults import CPU_ATTENTION_KV_BLOCK
from narrowpipe.costmodel.execution.common import attention_block_fraction, causal_fraction
from narrowpipe.costmodel.timeline import ScheduledKernel
from narrowpipe.ir import WINDOW, DType, Graph, Op, TensorType, problems
from narrowpipe.models import transformer

# Mistral-7B's attention (32 query heads, 8 KV heads, head dim 128), the QA's prefill of 32,000 tokens
S, W = 32_000, 4096
#: Hand count with 128 x 128 blocks: query block m (rows 128m .. 128m + 127) needs keys from
#: 128m - 4095 = 128(m - 32) + 1 (key block m - 32) to 128m + 127 (block m): 33 blocks from m = 32 on,
#: m + 1 below; 250 query blocks: 528 + 218 x 33 = 7,722 of 250 x 250. Causal: 250 x 251 / 2 = 31,375.
WINDOW_BLOCKS, CAUSAL_BLOCKS = 528 + 218 * 33, 250 * 251 // 2
#: The QA's ratio of query-key pairs: (W(W+1)/2 + (S-W)W) / (S(S+1)/2) = 122.7M / 512.0M.
PAIR_RATIO = (W * (W + 1) // 2 + (S - W) * W) / (S * (S + 1) // 2)


def _brute(window: int, sq: int, sk: int, bq: int, bk: int) -> float:
    """Blocks holding at least one visible (query, key) pair, queries the last ``sq`` positions."""
    nq, nk, off = ceil(sq / bq), ceil(sk / bk), sk - sq
    run = sum(any(0 <= i + off - j < window for i in range(qb * bq, min((qb + 1) * bq, sq))
                  for j in range(kb * bk, min((kb + 1) * bk, sk)))
              for qb in range(nq) for kb in range(nk))
    return run / (nq * nk)


def test_the_block_count_of_the_qa_prefill_is_the_hand_count():
    assert attention_block_fraction(True, W, S, S, 128, 128) == WINDOW_BLOCKS / 250 ** 2
    assert attention_block_fraction(True, None, S, S, 128, 128) == CAUSAL_BLOCKS / 250 ** 2
    assert WINDOW_BLOCKS / CAUSAL_BLOCKS == pytest.approx(0.2461, abs=1e-4)   # the pairs' 0.2397, rounded up
    assert PAIR_RATIO == pytest.approx(0.2397, abs=1e-4)


@pytest.mark.parametrize("window,sq,sk,bq,bk", [(5, 37, 37, 8, 8), (16, 40, 40, 8, 16), (9, 12, 50, 4, 8),
                                                (3, 1, 30, 16, 8), (20, 64, 64, 16, 16), (7, 13, 13, 16, 4)])
def test_a_binding_window_runs_exactly_the_blocks_its_mask_reaches(window: int, sq: int, sk: int, bq: int,
                                                                   bk: int) -> None:
    assert attention_block_fraction(True, window, sq, sk, bq, bk) == pytest.approx(_brute(window, sq, sk, bq, bk))


def test_a_window_reaching_every_key_is_plain_causal_attention():
    for window in (1024, 1025, 100_000):
        assert attention_block_fraction(True, window, 1024, 1024, 128, 128) == causal_fraction(True, 1024, 1024, 128)
    # a decode step handed the window's keys (the capped cache: W - 1 past + the new token)
    assert attention_block_fraction(True, W, 1, W, 16, 128) == 1.0
    # an uncapped cache of 8,192 keys: the query at 8,191 sees 4,096 .. 8,191, key blocks 32..63 of 64
    assert attention_block_fraction(True, W, 1, 8192, 16, 128) == 0.5


def _attention_kernel(report: narrowpipe.Report, op: str = "attention") -> ScheduledKernel:
    (k,) = [k for k in report.timeline if k.op == op]
    return k


def _mistral_layer(seq: int, window: int | None, **kw: object) -> Graph:
    return transformer(1, 4096, 32, 1000, seq=seq, kv_heads=8, gated_mlp=True, sliding_window=window, **kw)


def test_h100_prefill_of_32000_tokens_times_the_window_blocks_only():
    """The QA's Mistral-7B prefill: the windowed attention executes 7,722 / 31,375 of the causal
    kernel's work (exactly: same grid, waves and tiles); its time falls by that ratio plus the fixed
    prologue of one key-block iteration per query block (126.5 -> 31.9 iterations: 0.252), near the
    pair ratio 0.240. The FLOP count stays torch's (the keys handed, as FlopCounterMode counts SDPA)."""
    windowed, causal = (narrowpipe.analyze(_mistral_layer(S, w), "h100", seq=S) for w in (W, None))
    kw, kc = _attention_kernel(windowed), _attention_kernel(causal)
    assert kw.flops == kc.flops == 4 * 32 * S * S * 128
    assert kw.executed_flops / kc.executed_flops == pytest.approx(WINDOW_BLOCKS / CAUSAL_BLOCKS, rel=1e-9)
    launch = get_target("h100").launch_overhead
    prologue = (250 * WINDOW_BLOCKS / 250 ** 2 + 1) / (250 * CAUSAL_BLOCKS / 250 ** 2 + 1)
    assert (kw.time_s - launch) / (kc.time_s - launch) == pytest.approx(prologue, rel=1e-6)
    assert abs(kw.time_s / kc.time_s - PAIR_RATIO) < 0.015


@pytest.mark.parametrize("target", ["h100", "tpu-v5e"])
def test_a_window_at_least_the_sequence_changes_nothing(target: str) -> None:
    times = [_attention_kernel(narrowpipe.analyze(_mistral_layer(2048, w), target, seq=2048)).time_s
             for w in (2048, 8192, None)]
    assert times[0] == times[1] == times[2]


def test_tpu_prefill_skips_the_key_tiles_outside_the_window():
    """v5e's 128-wide MXU tiles are the blocks: the same hand count as the GPU's 128 x 128."""
    assert get_target("tpu-v5e").mxu_dim == 128
    windowed, causal = (narrowpipe.analyze(_mistral_layer(S, w), "tpu-v5e", seq=S) for w in (W, None))
    kw, kc = _attention_kernel(windowed), _attention_kernel(causal)
    assert kw.executed_flops / kc.executed_flops == pytest.approx(WINDOW_BLOCKS / CAUSAL_BLOCKS, rel=1e-9)
    assert kw.compute_s / kc.compute_s == pytest.approx(WINDOW_BLOCKS / CAUSAL_BLOCKS, rel=1e-9)


def test_the_attention_backward_skips_the_same_blocks():
    """Training at 8,192 tokens, W = 1,024, 128 x 128 blocks: query block m needs key blocks m - 8 .. m
    (9 from m = 8 on, m + 1 below): 36 + 56 x 9 = 540; causal 64 x 65 / 2 = 2,080."""
    from narrowpipe.costmodel.training import build_training_graph
    runs = [narrowpipe.analyze(build_training_graph(_mistral_layer(8192, w)), "h100", seq=8192) for w in (1024, None)]
    fwd = [_attention_kernel(r) for r in runs]
    bwd = [_attention_kernel(r, "attention_backward") for r in runs]
    for pair in (fwd, bwd):
        assert pair[0].flops == pair[1].flops
        assert pair[0].executed_flops / pair[1].executed_flops == pytest.approx(540 / 2080, rel=1e-9)


def test_cpu_fused_attention_skips_the_512_key_blocks_outside_the_window():
    """8,192 tokens in CPU_ATTENTION_KV_BLOCK = 512 blocks, W = 1,024: block m needs keys from
    512m - 1023 (block m - 2) to block m: 3 blocks from m = 2 on, 1 and 2 below: 45 of 256;
    causal 16 x 17 / 2 = 136."""
    assert CPU_ATTENTION_KV_BLOCK == 512
    epyc = get_target("epyc-9755")
    cpu = dataclasses.replace(epyc, attention_curve=((128.0, 0.4), (1024.0, 0.5)),
                              sources={**epyc.sources, "attention_curve": "assumption: test"})

    def graph(window: int | None) -> Graph:
        g = Graph("sdpa")
        q, k, v = (g.add_input(n, TensorType(DType.FP32, (1, 4, 8192, 64))) for n in "qkv")
        attrs = {"causal": True, **({WINDOW: window} if window else {})}
        g.set_outputs(g.add_node(Op.ATTENTION, [q, k, v], [TensorType(DType.FP32, (1, 4, 8192, 64))], attrs).outputs)
        return g
    compute = [narrowpipe.analyze(graph(w), cpu, eager_overhead=False).timeline[0].compute_s for w in (1024, None)]
    assert compute[0] / compute[1] == pytest.approx(45 / 136, rel=1e-9)


def test_the_verifier_refuses_a_window_that_is_not_a_positive_count():
    g = Graph("attn")
    q = g.add_input("q", TensorType(DType.BF16, (1, 4, 16, 64)))
    g.add_node(Op.ATTENTION, [q, q, q], [TensorType(DType.BF16, (1, 4, 16, 64))], {"causal": True, WINDOW: 0},
               name="local_attn")
    assert any("window 0 is not a positive whole number" in p and "local_attn" in p for p in problems(g))
