"""A decode step's activations are those of the step at its context, so ``serve`` (with ``--mla-decode
as-built``) and ``analyze --mode decode`` give one answer for one deployment.

The step built as transformers runs latent attention expands the whole cache through ``kv_b_proj``
every step; its activations were read at ``past = 0`` (one token's worth), so DeepSeek-V2-Lite at 4,096
tokens and batch 356 "fit" with 0.074 GB of activations where the step holds 23.9 GB. By hand (tiny
DeepSeek, bf16, H=4, DN=32, DV=32, DR=16, hidden 256, batch B, a cache of P tokens): the peak is at the
per-head transpose of ``kv_b_proj``'s output, where that output ``[B, 1, P+1, H*(DN+DV)]`` and its
transposed copy are both live (2 x B (P+1) H (DN+DV) x 2 B), beside the residual stream ``[B, 1, 256]``,
the query ``[B, H, 1, DN+DR]`` and the rotary tables (2 x DR x 2 B); the cache itself is counted apart."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.costmodel.serving import serve
from tests.tiny_deepseek import DN, DR, DV, HIDDEN, TINY_DEEPSEEK, H


def as_built_peak(batch: int, past: int) -> int:
    expanded = batch * (past + 1) * H * (DN + DV) * 2
    return 2 * expanded + batch * HIDDEN * 2 + batch * H * (DN + DR) * 2 + 2 * DR * 2


@pytest.mark.parametrize("batch, context", [(3, 100), (3, 1000), (1, 2000)])
def test_as_built_decode_holds_the_expanded_cache_by_hand(batch, context):
    g = narrowpipe.from_config(TINY_DEEPSEEK)
    r = serve(g, "h100", mode="decode", batch=batch, context=context, mla_decode="as-built", with_crossover=False)
    assert r.decode is not None
    # the step on a cache of ``context`` tokens; the budget's is that step (it fills the cache to context + 1)
    assert r.decode.activation_bytes == r.memory.activations == as_built_peak(batch, context)


def test_absorbed_and_plain_attention_decode_hold_nothing_that_grows_with_the_context():
    """Absorbed MLA attends the latent in place and a plain attention's step holds one token's tensors:
    their activations are the same at any context (the fix moves neither)."""
    g = narrowpipe.from_config(TINY_DEEPSEEK)
    gqa = narrowpipe.transformer(layers=2, hidden=256, heads=4, vocab=512, kv_heads=2, ffn=1024, gated_mlp=True,
                                 seq=1, past=10)
    for model in (g, gqa):
        acts = {serve(model, "h100", mode="decode", batch=3, context=c, with_crossover=False).memory.activations
                for c in (100, 3000)}
        assert len(acts) == 1


def test_serve_and_analyze_count_the_same_as_built_step():
    """One deployment, one answer: the liveness walk ``analyze`` runs on the same step counts the cache
    inputs too (P tokens; the in-place appends add no storage); less that cache, it is serve's term."""
    from narrowpipe.costmodel.interpreter import interpret
    from narrowpipe.costmodel.serving import replica_for
    rep = replica_for(narrowpipe.from_config(TINY_DEEPSEEK), "h100", mla_decode="as-built")
    batch, past = 3, 500
    sg = rep.decode_graph
    table = interpret(sg.graph, sg.bindings(batch, 1, past))
    r = serve(rep, mode="decode", batch=batch, context=past, with_crossover=False)
    assert r.decode is not None and r.decode.activation_bytes == as_built_peak(batch, past)
    assert table.peak_activation_bytes == as_built_peak(batch, past) + sg.cache.resident_bytes(batch, past)
