"""The GPU's fused attention kernel against FlashAttention's published rates."""

from __future__ import annotations

import narrowpipe
from narrowpipe.models import transformer


def test_long_causal_attention_on_h100_runs_at_flashattention3_rates():
    """FA3 (arXiv:2407.08608, Fig. 5): FP16 forward attention, head dim 128, 16k tokens with the causal
    mask, 616 TFLOP/s on an H100 SXM, under the 648 of the unmasked bar (0.655 of 989, the catalog's
    plateau); causal FLOPs counted as half of the full S x S product."""
    g = transformer(layers=1, hidden=2048, heads=16, vocab=1000, seq=16384)
    r = narrowpipe.analyze(g, "h100", seq=16384)
    (attn,) = [op for op in r.ops if op.op == "attention"]
    executed = attn.flops / 2 / attn.time_s
    assert 0.6 * 989e12 < executed <= 0.655 * 989e12 * 1.001


def test_attention_backward_runs_five_matmuls_per_tile_against_the_forwards_two():
    """FlashAttention-2's backward recomputes QK^T and runs dV, dP, dQ and dK: with d = dv, 2.5x the
    forward's matmul work per tile (rules.py counts 2.5x the FLOPs), so on a compute-bound shape the
    kernel takes 2.5x the forward's time, on the GPU's tiles and on the TPU's systolic folds alike."""
    from narrowpipe.costmodel.training import build_training_graph
    step = build_training_graph(transformer(layers=1, hidden=2048, heads=16, vocab=1000, seq=8192))
    for target in ("h100", "tpu-v5e"):
        r = narrowpipe.analyze(step, target, seq=8192)
        (fwd,) = [op for op in r.ops if op.op == "attention"]
        (bwd,) = [op for op in r.ops if op.op == "attention_backward"]
        assert bwd.flops == 2.5 * fwd.flops
        launch = narrowpipe.get_target(target).launch_overhead
        ratio = (bwd.time_s - launch) / (fwd.time_s - launch)
        assert 2.4 < ratio < 2.6, (target, ratio)
