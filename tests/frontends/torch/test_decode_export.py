"""Acceptance: a transformers causal LM exported as a decode step (static cache, or cache inputs) and
the same model's ``narrowpipe.transformer`` twin give the same decode FLOPs and KV bytes."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import narrowpipe  # noqa: E402
from narrowpipe.costmodel.analyze import build_report  # noqa: E402
from narrowpipe.costmodel.interpreter import interpret  # noqa: E402
from narrowpipe.costmodel.serving import serving_graph  # noqa: E402
from narrowpipe.frontends import export_decode_step  # noqa: E402
from narrowpipe.ir import DimRole, ValueKind  # noqa: E402

CFG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
           vocab_size=256, max_position_embeddings=512)


@pytest.fixture(scope="module")
def model():
    with torch.device("meta"):
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**CFG)).eval()


def _twin():
    g = narrowpipe.transformer(layers=2, hidden=64, heads=4, vocab=256, ffn=128, kv_heads=2, gated_mlp=True,
                               seq=1, past=0, dtype="fp32")
    return serving_graph(g)


def _heavy(sg, dims):
    r = build_report(interpret(sg.graph, dims))
    return r.flops_by_group["contraction"], r.flops_by_group["attention"], r.params


def test_static_cache_export_is_a_decode_step_with_its_buffers_as_the_kv_cache(model):
    g = export_decode_step(model, batch=2, past=127, static=True)        # a 128-token StaticCache
    caches = [v for v in g.inputs if v.name in {e["name"] for e in g.meta["kv_cache"]}]
    assert len(caches) == 4 and all(v.kind is ValueKind.INPUT for v in caches)   # state, not weights
    sg = serving_graph(g)
    assert sg.cache.is_static and (sg.cache.static_batch, sg.cache.static_length) == (2, 128)
    twin = _twin()
    # the static cache's attention reads all 128 slots: the twin's 127 cached tokens and the new one
    assert _heavy(sg, {}) == _heavy(twin, {"batch": 2, "seq": 1, "past": 127})
    assert sg.cache.bytes_per_token == twin.cache.bytes_per_token == 2 * 2 * 2 * 16 * 4
    assert sg.cache.resident_bytes(2, 128) == twin.cache.resident_bytes(2, 128)
    with pytest.raises(narrowpipe.NarrowpipeError, match="static KV cache"):
        sg.bindings(4, 1, 127)


def test_cache_input_export_keeps_batch_and_context_symbolic(model):
    g = export_decode_step(model, batch=2, past=7)
    assert g.dims_with_role(DimRole.KV_LENGTH) == ["past"] and g.dims_with_role(DimRole.BATCH) == ["batch"]
    sg = serving_graph(g)
    twin = _twin()
    assert sg.cache.bytes_per_token == twin.cache.bytes_per_token
    for batch, past in ((1, 100), (8, 4000)):
        dims = {"batch": batch, "past": past}
        assert _heavy(sg, dims) == _heavy(twin, {**dims, "seq": 1})


def test_sliding_window_layers_decode_with_their_window_as_transformers_does():
    """Gemma3's local layers keep ``W - 1`` = 7 tokens (``DynamicSlidingWindowLayer``): at past=30 the
    step attends 8 keys there and 31 in the global layers. Before, every layer's cache was ``past``
    long: 217600 FLOPs against transformers' 205824 (2 layers x 23 keys x 256), KV bytes 30720."""
    from torch.utils.flop_counter import FlopCounterMode
    cfg = transformers.Gemma3TextConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=8,
                                        sliding_window_pattern=2)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    m = transformers.Gemma3ForCausalLM(cfg).eval()
    g = export_decode_step(m, batch=2, past=16)
    batch, past = 2, 30
    with torch.no_grad():
        cache = m(input_ids=torch.randint(3, 300, (batch, past)), use_cache=True).past_key_values
        with FlopCounterMode(display=False) as counter:
            m(input_ids=torch.randint(3, 300, (batch, 1)), past_key_values=cache, use_cache=True)
    r = narrowpipe.analyze(g, dims={"batch": batch, "past": past})
    assert r.flops_by_group["contraction"] + r.flops_by_group["attention"] == counter.get_total_flops() == 205824
    held = sum(layer.keys.numel() + layer.values.numel() for layer in cache.layers) * 4   # [7, 31, 7, 31] tokens
    assert serving_graph(g).cache.resident_bytes(batch, past + 1) == held == 19456


_DEEPSEEK = dict(vocab_size=512, hidden_size=128, intermediate_size=256, moe_intermediate_size=64, num_hidden_layers=3,
                 first_k_dense_replace=1, num_attention_heads=8, num_key_value_heads=8, n_routed_experts=8,
                 n_shared_experts=1, num_experts_per_tok=2, kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32,
                 v_head_dim=32, max_position_embeddings=2048)


@pytest.mark.slow
@pytest.mark.parametrize("family, extra", [("DeepseekV2", {"q_lora_rank": None}),
                                           ("DeepseekV3", {"q_lora_rank": 96, "n_group": 2, "topk_group": 1})])
def test_deepseek_decode_step_exports_with_the_latent_cache_transformers_holds(family, extra):
    """transformers 5's DeepSeek attention caches the normed latent ([batch, 1, past, kv_lora_rank]) as
    keys and the rotary key ([batch, 1, past, qk_rope_head_dim]) as values, expanding them through
    ``kv_b_proj`` every step. The cache was built with ``num_key_value_heads`` heads of one ``head_dim``
    and torch.export failed on the first ``cat`` ("Expected 8 in dimension 1 but got 1"). By hand from
    the config: 3 layers x (64 + 16) values x 4 B (fp32) = 960 B per token, against the 3 x 2 x 8 x 48 x 4
    = 9216 B of a per-head cache."""
    cfg = getattr(transformers, f"{family}Config")(**_DEEPSEEK, **extra)
    with torch.device("meta"):
        m = getattr(transformers, f"{family}ForCausalLM")(cfg).eval()
    g = export_decode_step(m, batch=2, past=16)
    sg = serving_graph(g)
    assert sg.cache.bytes_per_token == 3 * (64 + 16) * 4 == 960
    assert g.dims_with_role(DimRole.KV_LENGTH) == ["past"]
    assert sg.cache.resident_bytes(4, 100) == 4 * 100 * 960


def test_a_model_whose_layers_hold_no_keys_and_values_is_refused_naming_the_layer():
    """Qwen3-Next's linear-attention layers keep recurrent and convolutional state, not keys and values:
    no DynamicCache of per-layer K/V describes them, so the export says which layer and why."""
    from narrowpipe.frontends.torch.decode_export import cache_layer_shapes
    cfg = transformers.Qwen3NextConfig(num_hidden_layers=4, hidden_size=64, num_attention_heads=4,
                                       num_key_value_heads=2)
    with pytest.raises(narrowpipe.NarrowpipeError, match="layer 0 of .* 'linear_attention' layer.*recurrent"):
        cache_layer_shapes(torch.nn.Linear(2, 2), cfg)
