"""The KV cache is read from the graph: bytes per token from its cache tensors, whatever the attention."""

import pytest

import narrowpipe
from narrowpipe.costmodel.serving.kvcache import find_kv_cache
from narrowpipe.costmodel.serving.prepare import serving_graph


def _llama(kv_heads: int, **kw):
    return narrowpipe.transformer(layers=4, hidden=512, heads=8, vocab=1000, ffn=1024, kv_heads=kv_heads,
                                  gated_mlp=True, seq=1, past=16, **kw)


@pytest.mark.parametrize("kv_heads", [8, 2, 1])     # multi-head, grouped-query, multi-query
def test_bytes_per_token_are_layers_x_2_x_kv_heads_x_head_dim_x_dtype(kv_heads):
    cache = find_kv_cache(_llama(kv_heads))
    assert cache is not None and cache.length_dim == "past"
    assert cache.bytes_per_token == 4 * 2 * kv_heads * 64 * 2          # bf16
    assert cache.resident_bytes(batch=3, context=100) == 3 * 100 * cache.bytes_per_token


def test_cache_dtype_and_head_dim_come_from_the_tensors():
    cache = find_kv_cache(_llama(2, head_dim=128, dtype="fp32"))
    assert cache.bytes_per_token == 4 * 2 * 2 * 128 * 4


def test_a_prefill_only_graph_has_no_cache_until_rebuilt():
    g = narrowpipe.transformer(layers=2, hidden=256, heads=4, vocab=500, seq=32)
    assert find_kv_cache(g) is None
    sg = serving_graph(g)
    assert "rebuilt" in sg.origin
    assert sg.cache.bytes_per_token == 2 * 2 * 4 * 64 * 2


def test_kv_format_changes_the_bytes_per_token():
    sg = serving_graph(_llama(2), narrowpipe.costmodel.serving.formats.Formats.of(kv="fp8_e4m3"))
    assert sg.cache.bytes_per_token == 4 * 2 * 2 * 64 * 1
    assert any("fp8_e4m3" in n for n in sg.notes)
