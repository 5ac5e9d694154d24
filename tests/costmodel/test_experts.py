"""Mixture-of-experts grouped GEMMs: how routed rows spread over experts (the expert balance), the
grouped GEMM's cost rule, and what a skewed router changes, every expected number computed by hand."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.costmodel.experts import BALANCED, ExpertBalance, active_experts, expert_rows
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.errors import NarrowpipeError
from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind, verify
from narrowpipe.models import from_config

BF16 = DType.BF16


def test_balanced_rows_are_as_even_as_integers_allow():
    assert expert_rows(42, 4, 2) == (11, 11, 10, 10)          # 42 = 4 x 10 + 2
    assert expert_rows(48, 4, 2) == (12, 12, 12, 12)
    assert expert_rows(0, 4, 2) == (0, 0, 0, 0)


def test_a_decode_step_reaches_only_top_k_times_tokens_experts():
    """One token, top-2 of 8: two experts get a row each, six are never read."""
    rows = expert_rows(2, 8, 2)
    assert rows == (1, 1, 0, 0, 0, 0, 0, 0) and active_experts(rows) == 2
    assert active_experts(expert_rows(3 * 2, 8, 2)) == 6
    assert active_experts(expert_rows(16 * 2, 8, 2)) == 8     # min(experts, top_k x tokens)


def test_zipf_shares_by_hand():
    """zipf:1 over 4 experts: shares 1, 1/2, 1/3, 1/4 over 25/12 = 48%, 24%, 16%, 12%."""
    zipf = ExpertBalance.parse("zipf:1")
    assert zipf.shares(4) == pytest.approx([0.48, 0.24, 0.16, 0.12])
    assert expert_rows(100, 4, None, zipf) == (48, 24, 16, 12)
    assert ExpertBalance.parse("zipf:0").shares(4) == pytest.approx([0.25] * 4)   # zipf:0 is balanced


def test_no_expert_takes_more_rows_than_there_are_tokens():
    """hot:0.7 of 100 rows (50 tokens, top-2): the hot expert is capped at 50 (one row per token); the
    other 50 rows spread over the 3 others, 16.7 each, rounded by largest remainder."""
    assert expert_rows(100, 4, 2, ExpertBalance.parse("hot:0.7")) == (50, 17, 17, 16)
    assert expert_rows(100, 4, None, ExpertBalance.parse("hot:0.7")) == (70, 10, 10, 10)   # top_k unknown: no cap
    assert expert_rows(16, 8, 8, ExpertBalance.parse("hot:1")) == (2,) * 8   # top_k = experts: every token everywhere


@pytest.mark.parametrize("spec", ["zipf", "hot:2", "hot:0", "zipf:-1", "bogus", "zipf:x", "balanced:1"])
def test_bad_balances_are_named_errors(spec):
    with pytest.raises(NarrowpipeError, match="expert balance"):
        ExpertBalance.parse(spec)


def _grouped(rows, experts, k, n, top_k=2, offsets=True):
    """x [rows, k] through w [experts, n, k] (stored as Hugging Face stacks experts) by group."""
    g = Graph("grouped")
    x = g.add_input("x", TensorType(BF16, (rows, k)))
    w = g.add_input("w", TensorType(BF16, (experts, n, k)), ValueKind.PARAM)
    ins = [x, w] + ([g.add_input("offsets", TensorType(DType.INT32, (experts,)))] if offsets else [])
    node = g.add_node(Op.GROUPED_DOT, ins, [TensorType(BF16, (rows, n))], {"rhs_contract": 2, "top_k": top_k})
    g.set_outputs(node.outputs)
    verify(g)
    return g, node


def test_grouped_dot_flops_and_bytes_by_hand():
    """Prefill, 64 tokens x top-2 = 128 rows over 8 experts (all reached): 2 x 128 x K x N FLOPs, reads
    the rows, all 8 experts' weights and the offsets, writes [128, N]."""
    rows, e, k, n = 128, 8, 64, 96
    g, node = _grouped(rows, e, k, n)
    c = interpret(g, {}).costs[node]
    assert c.flops == 2 * rows * k * n
    assert c.bytes_read == 2 * rows * k + 8 * 2 * n * k + 4 * e
    assert c.bytes_written == 2 * rows * n
    r = narrowpipe.analyze(g)
    assert r.flops_by_group["contraction"] == c.flops and not r.unmodeled


def test_grouped_dot_at_decode_reads_only_the_reached_experts():
    """One token, top-2: 2 rows, so 2 of 8 experts' weights are read."""
    g, node = _grouped(2, 8, 64, 96)
    c = interpret(g, {}).costs[node]
    assert c.bytes_read == 2 * 2 * 64 + 2 * (2 * 96 * 64) + 4 * 8
    assert c.flops == 2 * 2 * 64 * 96


def test_skew_changes_bytes_not_flops():
    """8 tokens x top-2 = 16 rows over 8 experts. Balanced: 2 each, all 8 read. zipf:2 puts 8 rows (the
    cap) on the hottest and the rest 4, 2, 1, 1: five experts read."""
    g, node = _grouped(16, 8, 64, 96)
    balanced = interpret(g, {}, expert_balance=BALANCED).costs[node]
    skewed = interpret(g, {}, expert_balance=ExpertBalance.parse("zipf:2")).costs[node]
    assert expert_rows(16, 8, 2, ExpertBalance.parse("zipf:2")) == (8, 4, 2, 1, 1, 0, 0, 0)
    assert skewed.flops == balanced.flops
    assert balanced.bytes_read - skewed.bytes_read == 3 * 2 * 96 * 64


def test_verifier_checks_grouped_dot_shapes():
    g = Graph("bad")
    x = g.add_input("x", TensorType(BF16, (8, 64)))
    w = g.add_input("w", TensorType(BF16, (4, 96, 32)), ValueKind.PARAM)
    g.add_node(Op.GROUPED_DOT, [x, w], [TensorType(BF16, (8, 96))], {"rhs_contract": 2})
    with pytest.raises(narrowpipe.VerificationError, match="contracting dims differ"):
        verify(g)


MIXTRAL_8X7B = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
                "num_experts_per_tok": 2}


@pytest.fixture(scope="module")
def mixtral():
    return from_config(MIXTRAL_8X7B)


def test_decode_reads_two_experts_per_token_and_a_skew_reads_fewer(mixtral):
    """Mixtral 8x7B: an expert is 3 x 4096 x 14336 bf16 weights (352 MB per layer for 8). A batch-1
    decode step reads 2 experts per layer, not 8; at batch 8 balanced routing reaches all 8 and
    zipf:2 five, so the step reads 3 experts x 32 layers less and runs faster on a GPU, same FLOPs."""
    expert = 3 * 4096 * 14336 * 2
    one = narrowpipe.analyze(mixtral, dims={"batch": 1, "seq": 1})
    # per layer, 2 routed rows in and out of each grouped GEMM: up [2, 4096] -> [2, 28672], down [2, 14336] -> [2, 4096]
    rows = 2 * 2 * (4096 + 28672 + 14336 + 4096)
    assert sum(r.bytes for r in one.ops if r.op == "grouped_dot") == 32 * (2 * expert + rows)
    balanced = narrowpipe.analyze(mixtral, "h100", dims={"batch": 8, "seq": 1}, expert_balance="balanced")
    skewed = narrowpipe.analyze(mixtral, "h100", dims={"batch": 8, "seq": 1}, expert_balance="zipf:2")
    assert skewed.flops == balanced.flops
    assert balanced.bytes - skewed.bytes == 32 * 3 * expert
    assert skewed.time_s < 0.8 * balanced.time_s
    assert any("zipf:2 routing" in n and "5 of 8 experts read" in n for n in skewed.notes)


def test_a_hot_expert_pads_more_tiles_in_a_compute_bound_prefill(mixtral):
    """Prefill of 4096 tokens: same FLOPs and bytes under any skew (every expert is reached), but a hot
    expert's rows and the cold experts' partial tiles are more tiles than an even split: the grouped
    kernels take longer on a GPU (tiles summed over experts) and on a TPU (folds per expert)."""
    for target in ("h100", "tpu-v6e"):
        balanced = narrowpipe.analyze(mixtral, target, dims={"batch": 1, "seq": 4096})
        hot = narrowpipe.analyze(mixtral, target, dims={"batch": 1, "seq": 4096}, expert_balance="hot:0.5")
        assert (hot.flops, hot.bytes) == (balanced.flops, balanced.bytes)
        assert hot.time_s > balanced.time_s
