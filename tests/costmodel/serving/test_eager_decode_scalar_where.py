"""Eager decode steps whose mask step is a two-operand ``WHERE`` (aten's ``where.ScalarOther`` and
``masked_fill``: the fill is a scalar attribute, not an operand): MPT and a 2-layer Gemma-3 with a
sliding and a full layer. The eager-attention matcher read such a node's third operand and
``serve`` failed with a bare IndexError.

Checked against the same graph's ``analyze`` (FLOPs equal; the step time within 2 %: serving writes
the new keys into the cache in place) and the KV bytes per token by hand from the config.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import narrowpipe  # noqa: E402
from narrowpipe.costmodel.serving import serving_graph  # noqa: E402
from narrowpipe.frontends import export_decode_step  # noqa: E402
from narrowpipe.ir import Op  # noqa: E402


def _mpt():
    return transformers.MptForCausalLM(transformers.MptConfig(vocab_size=500, d_model=64, n_layers=2, n_heads=4,
                                                              expansion_ratio=2))


def _gemma3():
    cfg = transformers.Gemma3TextConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                        num_key_value_heads=2, head_dim=16, num_hidden_layers=2, sliding_window=4,
                                        layer_types=["sliding_attention", "full_attention"])
    cfg._attn_implementation = "eager"
    return transformers.Gemma3ForCausalLM(cfg)


#: KV bytes per token by hand: layers x (K + V) x kv heads x head dim x 4 B (fp32)
CASES = {"mpt": (_mpt, 2 * 2 * 4 * 16 * 4), "gemma3-2layer": (_gemma3, 2 * 2 * 2 * 16 * 4)}


@pytest.mark.parametrize("name", list(CASES))
def test_serve_decodes_an_eager_step_with_a_scalar_where_mask(name):
    make, kv_hand = CASES[name]
    torch.manual_seed(0)
    g = export_decode_step(make().eval(), batch=2, past=16)
    assert any(n.op is Op.WHERE and len(n.inputs) == 2 for n in g.nodes)
    r = narrowpipe.serve(g, "h100", mode="decode", batch=2, context=64, with_crossover=False)
    a = narrowpipe.analyze(g, "h100", dims={"batch": 2, "past": 64})
    assert r.kv_bytes_per_token == serving_graph(g).cache.bytes_per_token == kv_hand
    assert r.decode is not None and r.decode.flops == a.flops
    assert r.tpot_s == pytest.approx(a.time_s, rel=0.02)
