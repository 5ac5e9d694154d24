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


def test_sliding_window_layers_hold_at_most_their_window():
    """Mistral 7B v0.1: a 4,096-token window, so past 4k the cache stops growing and decode reads no more."""
    g = narrowpipe.transformer(layers=2, hidden=256, heads=4, vocab=500, kv_heads=2, gated_mlp=True, seq=1,
                               past=16, sliding_window=64)
    sg = serving_graph(g)
    per_token = 2 * 2 * 2 * 64 * 2
    assert sg.cache.bytes_per_token == per_token
    assert sg.cache.resident_bytes(3, 1000) == 3 * 64 * per_token
    assert sg.bindings(3, 1, 1000)["past_window"] == 64 and sg.bindings(3, 1, 10)["past_window"] == 10
    from narrowpipe.costmodel.interpreter import interpret
    from narrowpipe.ir import Op
    attn = [n for n in sg.graph.nodes if n.op is Op.ATTENTION]
    far, near = (interpret(sg.graph, sg.bindings(1, 1, p)) for p in (5000, 100))
    assert far.costs[attn[0]].flops == near.costs[attn[0]].flops == 2 * 4 * 65 * 64 * 2   # 64 cached + the new one


def test_mistral_config_reads_its_window():
    from narrowpipe.models import from_config
    g = from_config({"model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
                     "num_key_value_heads": 2, "vocab_size": 500, "intermediate_size": 512,
                     "sliding_window": 4096}, past=8)
    assert g.meta["spec"]["sliding_window"] == 4096 and g.dims["past_window"].default == 8


def test_a_latent_cache_costs_its_latent_width_per_token():
    """MLA (DeepSeek-V2): one compressed vector per token and layer, [batch, past, 512 + 64]."""
    from narrowpipe.ir import DimRole, DimSpec, DType, Graph, TensorType
    from narrowpipe.ir.dims import Sym
    g = Graph("mla")
    g.declare_dim(DimSpec("batch", 1, role=DimRole.BATCH))
    g.declare_dim(DimSpec("past", 0, role=DimRole.KV_LENGTH))
    for i in range(3):
        g.add_input(f"past_key_values.{i}.latent", TensorType(DType.BF16, (Sym("batch"), Sym("past"), 576)))
    cache = find_kv_cache(g)
    assert cache.bytes_per_token == 3 * 576 * 2
    assert [t.batch_axis for t in cache.tensors] == [0, 0, 0] and cache.tensors[0].length_axis == 1
