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
    """A window of W keys per query (the query's own included) needs W - 1 past tokens: transformers'
    ``DynamicSlidingWindowLayer.update`` (transformers/cache_utils.py) keeps ``[..., -sliding_window + 1:, :]``
    after each step and hands attention those plus the new tokens. So past W - 1 the cache stops growing,
    and a decode step reads W keys whatever the context (Mistral 7B v0.1: W = 4,096)."""
    W = 64
    g = narrowpipe.transformer(layers=2, hidden=256, heads=4, vocab=500, kv_heads=2, gated_mlp=True, seq=1,
                               past=16, sliding_window=W)
    sg = serving_graph(g)
    per_token = 2 * 2 * 2 * 64 * 2                  # layers x (k, v) x kv_heads x head_dim x bf16
    assert sg.cache.bytes_per_token == per_token
    assert sg.cache.resident_bytes(3, 1000) == 3 * (W - 1) * per_token
    assert sg.cache.resident_bytes(3, 10) == 3 * 10 * per_token
    assert sg.bindings(3, 1, 1000)["past_window"] == W - 1 and sg.bindings(3, 1, 10)["past_window"] == 10
    from narrowpipe.costmodel.interpreter import interpret
    from narrowpipe.ir import Op
    attn = [n for n in sg.graph.nodes if n.op is Op.ATTENTION]
    far, near = (interpret(sg.graph, sg.bindings(1, 1, p)) for p in (5000, 100))
    # QK^T and PV: 2 x 2 FLOPs per query head, key and head dim; W - 1 cached keys + the new one
    assert far.costs[attn[0]].flops == near.costs[attn[0]].flops == 2 * 2 * 4 * W * 64


def test_the_window_cap_is_what_transformers_sliding_cache_keeps():
    """The builder's cap, checked against transformers' own cache layer run on tensors."""
    torch = pytest.importorskip("torch")
    cache_utils = pytest.importorskip("transformers.cache_utils")
    W = 8
    layer = cache_utils.DynamicSlidingWindowLayer(sliding_window=W)
    k = torch.zeros(1, 2, 20, 4)
    layer.update(k, k)                                   # a 20-token prefill
    keys, _ = layer.update(k[:, :, :1], k[:, :, :1])     # one decode step
    g = narrowpipe.transformer(layers=1, hidden=32, heads=2, vocab=50, seq=1, past=20, sliding_window=W)
    cap = g.meta["kv_windows"]["past_key_values.0.key"]
    assert layer.keys.shape[-2] == cap == W - 1 == g.dims["past_window"].max
    assert keys.shape[-2] == W                           # what the step's attention reads


def test_windowed_and_full_layers_each_keep_their_own_cache():
    """Gemma-2's layout: local layers (windowed) alternate with global ones, whose caches keep every token."""
    W = 32
    g = narrowpipe.transformer(layers=4, hidden=128, heads=2, vocab=100, kv_heads=1, seq=1, past=8,
                               sliding_window=W, sliding_layers=[0, 2])
    cache = serving_graph(g).cache
    per_layer = 2 * 64 * 2                             # k and v, one KV head of 64, bf16
    assert cache.bytes_per_token == 4 * per_layer
    assert cache.resident_bytes(1, 1000) == 2 * 1000 * per_layer + 2 * (W - 1) * per_layer
    assert cache.length_bindings(1000) == {"past": 1000, "past_window": W - 1}


def test_a_deepseek_v2_lite_cache_holds_the_latent_per_layer():
    """DeepSeek-V2-Lite's dims (27 layers, 16 heads, kv_lora_rank 512, qk_rope_head_dim 64, qk_nope 128,
    v_head_dim 128): a token costs 27 x (512 + 64) values, 31,104 bytes in bf16, not the 27 x 16 x
    (192 + 128) x 2 = 276,480 bytes of per-head keys and values (DeepSeek-V2 paper, Table 1's
    (d_c + d_h^R) l elements per token)."""
    g = narrowpipe.transformer(layers=27, hidden=2048, heads=16, vocab=102400, ffn=10944, seq=1, past=16,
                               kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                               experts=64, top_k=6, expert_ffn=1408, shared_ffn=2 * 1408, dense_layers=[0],
                               moe_renormalize=False)
    hand = 27 * (512 + 64) * 2
    assert hand == 31_104
    sg = serving_graph(g)
    assert sg.cache.bytes_per_token == hand
    assert sg.cache.resident_bytes(4, 4096) == 4 * 4096 * hand
    fp8 = serving_graph(g, narrowpipe.costmodel.serving.formats.Formats.of(kv="fp8_e4m3"))
    assert fp8.cache.bytes_per_token == 27 * 576
    from narrowpipe.costmodel.serving.serve import replica_for
    replica = replica_for(g, "h100")
    assert replica.kv_bytes_per_token == hand
    assert replica.memory(2, 1000).kv_cache == 2 * 1000 * hand


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
