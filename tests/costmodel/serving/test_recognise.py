"""Prefill-only exports are recognised and rebuilt with a KV cache, or refused with a reason."""

import pytest

import narrowpipe
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.serving.prepare import serving_graph
from narrowpipe.costmodel.serving.recognise import check_twin, spec_from_graph
from narrowpipe.models.examples import load_example


def test_bundled_llama_export_is_recognised_as_llama_3_8b():
    g = load_example("llama-3-8b")
    spec = spec_from_graph(g)
    assert (spec.layers, spec.hidden, spec.heads, spec.kv_heads, spec.head_dim, spec.ffn, spec.vocab) == \
        (32, 4096, 32, 8, 128, 14336, 128256)
    assert spec.gated_mlp and spec.activation == "silu" and not spec.tie_embeddings
    sg = serving_graph(g)
    assert "recognised" in sg.origin
    twin = serving_graph(narrowpipe.transformer(layers=32, hidden=4096, heads=32, vocab=128256, ffn=14336,
                                                kv_heads=8, gated_mlp=True, past=0, seq=1))
    dims = {"batch": 4, "seq": 1, "past": 1000}
    a, b = interpret(sg.graph, dims).total(), interpret(twin.graph, dims).total()
    assert a.flops == b.flops


def test_bundled_gpt2_export_is_recognised_with_tied_embeddings_and_learned_positions():
    g = load_example("gpt2")
    spec = spec_from_graph(g)
    assert (spec.layers, spec.hidden, spec.heads, spec.vocab, spec.max_positions) == (12, 768, 12, 50257, 1024)
    assert spec.tie_embeddings and spec.positions == "learned" and spec.norm == "layer"
    # serving_graph checks the rebuild at a 16-token prompt before its rewrites (it raises on a
    # mismatch); after them the head runs on each prompt's last token, so the served graph is compared
    # with the export at one token, where the head is the same
    assert check_twin(g, serving_graph(g).graph, seq=1) is None


def test_a_model_that_is_no_causal_lm_is_refused_with_the_reason():
    with pytest.raises(narrowpipe.NarrowpipeError, match="no KV cache"):
        serving_graph(load_example("resnet50"))
