"""The plan states its MFU without causal attention's masked half too (MaxText's convention).

Model FLOPs count causal attention in full (PaLM's and Megatron's convention), while the kernels skip
the masked half: Llama-3-8B at seq 8192 on 64 v5p read 91.7% MFU, which a TPU user reading MaxText
(causal attention halved since July 2025) takes as 10 points too high. The reference is a hand
count: causal attention over ``s`` positions shows each query ``i`` keys ``0..i``, s(s+1)/2 of the
s^2 pairs its FLOPs count, so (s-1)/(2s) of them are masked; 4 s^2 d per layer, three times the
forward's for a training step.
"""

from __future__ import annotations

import re

import pytest

import narrowpipe
from narrowpipe.costmodel.planner.planner import masked_fraction


def _note(plan: narrowpipe.Plan) -> str:
    (note,) = [n for n in plan.notes if n.startswith("MFU counts causal attention in full")]
    return note


def test_the_masked_share_and_the_halved_mfu_match_a_hand_count():
    layers, d, s, batch = 2, 512, 256, 8
    g = narrowpipe.transformer(layers, d, 8, 1000, ffn=1024, seq=s, name="tiny")
    plan = narrowpipe.plan(g, "h100", 8, global_batch=batch, seq=s, top=0)
    masked = 3 * layers * 4 * s * s * d * (s - 1) / (2 * s) * batch
    share = masked / plan.model_flops_per_step
    note = _note(plan)
    assert f"without the {share:.1%} of them" in note
    halved = float(re.search(r"it reads ([0-9.]+)%", note).group(1)) / 100
    assert halved == pytest.approx(plan.mfu * (1 - share), abs=6e-4)


def test_a_window_and_a_cache_offset_mask_what_a_hand_count_says():
    """Four queries after four cached keys, window 3: query i (position 4 + i) sees keys i+2..i+4,
    3 of 8 each, so 20 of the 32 pairs are masked; without the window it sees keys 0..4+i, 26 of the
    32 pairs, 6 masked; a bidirectional attention masks none."""
    from narrowpipe.ir import DType, Graph, Op, TensorType
    g = Graph("attn")
    q = g.add_input("q", TensorType(DType.BF16, (1, 1, 4, 8)))
    k = g.add_input("k", TensorType(DType.BF16, (1, 1, 8, 8)))
    v = g.add_input("v", TensorType(DType.BF16, (1, 1, 8, 8)))
    shapes = {q: (1, 1, 4, 8), k: (1, 1, 8, 8), v: (1, 1, 8, 8)}
    windowed = g.add_node(Op.ATTENTION, [q, k, v], [TensorType(DType.BF16, (1, 1, 4, 8))],
                          {"causal": True, "window": 3})
    plain = g.add_node(Op.ATTENTION, [q, k, v], [TensorType(DType.BF16, (1, 1, 4, 8))], {"causal": True})
    open_ = g.add_node(Op.ATTENTION, [q, k, v], [TensorType(DType.BF16, (1, 1, 4, 8))], {})
    assert masked_fraction(windowed, shapes) == pytest.approx(20 / 32)
    assert masked_fraction(plain, shapes) == pytest.approx(1 - (5 + 6 + 7 + 8) / 32)
    assert masked_fraction(open_, shapes) == 0.0


def test_no_note_without_causal_attention():
    g = narrowpipe.transformer(2, 512, 8, 1000, ffn=1024, seq=256, name="tiny", causal=False)
    plan = narrowpipe.plan(g, "h100", 8, global_batch=8, seq=256, top=0)
    assert plan.mfu > 0 and not [n for n in plan.notes if n.startswith("MFU counts causal attention")]
