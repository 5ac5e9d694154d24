"""The builder's attention and expert variants on their own, without torch: hand-computed FLOPs of
latent attention (both formulations) and of shared experts, cache bytes by hand (the latent cache, the
window-capped one), parameter counts of published models, config readers' layer rules, refusals."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.serving.kvcache import find_kv_cache
from narrowpipe.errors import NarrowpipeError
from narrowpipe.ir import WINDOW, DimRole, Op, from_json, to_json, verify
from narrowpipe.models import from_config, transformer

# DeepSeek-V3's config.json (huggingface.co/deepseek-ai/DeepSeek-V3)
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432,
               "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
               "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
               "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
               "v_head_dim": 128, "qk_nope_head_dim": 128, "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8,
               "first_k_dense_replace": 3, "norm_topk_prob": True, "max_position_embeddings": 163840,
               "rms_norm_eps": 1e-6, "rope_theta": 10000, "tie_word_embeddings": False,
               "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                                "original_max_position_embeddings": 4096, "type": "yarn"}}

# a tiny MLA model: hidden, heads, q rank, latent rank, nope, rope and value head dims, dense ffn, vocab
HD, NH, QR, R, DN, DR, DV, FF, VOC = 64, 4, 32, 16, 8, 8, 16, 96, 300
MLA = dict(kv_lora_rank=R, q_lora_rank=QR, qk_nope_head_dim=DN, qk_rope_head_dim=DR, v_head_dim=DV)


def _mla(**kw):
    return transformer(2, HD, NH, VOC, seq=8, ffn=FF, gated_mlp=True, **MLA, **kw)


def _projections(t, kv_rows):
    """One MLA layer's contraction FLOPs outside attention: q low-rank pair, kv_a, kv_b over ``kv_rows``, o."""
    return 2 * t * (HD * QR + QR * NH * (DN + DR) + HD * (R + DR) + NH * DV * HD) + 2 * kv_rows * R * NH * (DN + DV)


def test_latent_attention_expands_every_cached_latent_as_transformers_does():
    """Decompressed MLA: kv_b_proj runs over past + seq latents, attention over q/k heads of nope+rope dims
    and values of v dims; the same graph at past=0 is the prefill."""
    g = _mla(past=4)
    mlp = 2 * 3 * HD * FF
    for b, s, p in ((1, 1, 100), (2, 5, 0), (3, 2, 7)):
        t = b * s
        r = narrowpipe.analyze(g, strict=True, batch=b, seq=s, past=p)
        assert r.flops_by_group["contraction"] == 2 * (_projections(t, b * (p + s)) + t * mlp) + 2 * t * HD * VOC
        assert r.flops_by_group["attention"] == 2 * 2 * b * NH * s * (p + s) * ((DN + DR) + DV)


def test_absorbed_latent_attention_attends_the_latent_with_one_kv_head():
    """Absorbed MLA: no per-token expansion; q_nope @ W_UK and o @ W_UV per head, then attention over
    keys of R + DR and values of R dims; same parameters, the same cache bytes held as serving engines hold
    them: one tensor of [latent | k_rot] rows per layer, whose first R columns are V."""
    g, plain = _mla(past=4, mla_absorb=True), _mla(past=4)
    assert g.param_count() == plain.param_count()
    assert str(g.inputs[1].type) == f"bf16[batch, 1, past, {R + DR}]" and str(plain.inputs[1].type).endswith(f"{R}]")
    assert str(plain.inputs[2].type).endswith(f"{DR}]") and g.inputs[2].name.endswith("1.key")
    mlp = 2 * 3 * HD * FF
    for b, s, p in ((1, 1, 100), (2, 5, 0)):
        t = b * s
        outside = 2 * t * (HD * QR + QR * NH * (DN + DR) + HD * (R + DR) + NH * DV * HD)
        absorb = 2 * t * NH * (DN * R + R * DV)
        r = narrowpipe.analyze(g, strict=True, batch=b, seq=s, past=p)
        assert r.flops_by_group["contraction"] == 2 * (outside + absorb + t * mlp) + 2 * t * HD * VOC
        assert r.flops_by_group["attention"] == 2 * 2 * b * NH * s * (p + s) * ((R + DR) + R)
    att = next(n for n in g.nodes if n.op is Op.ATTENTION)
    assert att.attrs["scale"] == pytest.approx((DN + DR) ** -0.5) and att.inputs[1].shape[1] == 1


def test_deepseek_v3_decode_reads_a_latent_cache_of_576_values_per_token_and_layer():
    """61 layers x (512 latent + 64 rotary key) x 2 bytes (bf16) = 70,272 B per token, found by the serving
    model through the KV_LENGTH dim; a multi-head cache of the same heads would hold 61 x 128 x (192 + 128)."""
    g = from_config(DEEPSEEK_V3, seq=1, past=4096)
    assert g.dims_with_role(DimRole.KV_LENGTH) == ["past"]
    cache = find_kv_cache(g)
    assert cache is not None and len(cache.tensors) == 2 * 61
    assert cache.bytes_per_token == 61 * (512 + 64) * 2 == 70_272
    assert cache.resident_bytes(8, 4096) == 8 * 4096 * 70_272
    by_hand = sum(v.type.numel({"batch": 1, "past": 1}) * 2 for v in g.inputs if v.name.startswith("past_key_values"))
    assert by_hand == 70_272


def test_published_parameter_counts_of_the_new_families():
    """Each equals transformers' model of the same config on the meta device (and the published size)."""
    assert from_config(DEEPSEEK_V3).param_count() == 671_026_404_352          # "671B total" (V3 report)
    qwen15_moe = {"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
                  "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "num_hidden_layers": 24,
                  "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 151936, "num_experts": 60,
                  "num_experts_per_tok": 4, "max_position_embeddings": 8192}
    assert from_config(qwen15_moe).param_count() == 14_315_784_192           # Qwen1.5-MoE-A2.7B: "14.3B"
    v2_lite = {"model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944,
               "moe_intermediate_size": 1408, "num_hidden_layers": 27, "num_attention_heads": 16,
               "vocab_size": 102400, "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128,
               "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 64, "n_shared_experts": 2,
               "num_experts_per_tok": 6, "first_k_dense_replace": 1, "topk_method": "greedy"}
    assert from_config(v2_lite).param_count() == 15_706_484_224              # DeepSeek-V2-Lite: "15.7B"
    gemma2_9b = {"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42,
                 "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000,
                 "sliding_window": 4096, "max_position_embeddings": 8192}
    assert from_config(gemma2_9b).param_count() == 9_241_705_984
    gemma3_1b = {"model_type": "gemma3_text", "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26,
                 "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144,
                 "sliding_window": 512, "max_position_embeddings": 32768}
    assert from_config(gemma3_1b).param_count() == 999_885_952
    qwen3_30b_a3b = {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
                     "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32,
                     "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936, "num_experts": 128,
                     "num_experts_per_tok": 8, "norm_topk_prob": True, "max_position_embeddings": 40960}
    assert from_config(qwen3_30b_a3b).param_count() == 30_532_122_624       # Qwen3-30B-A3B: "30.5B"


def test_shared_experts_dense_layers_and_the_gate_by_hand():
    """Qwen2-MoE's layout: layer 1 dense (ffn 96), the others route top-2 of 8 experts (ffn 48) beside a
    shared expert (ffn 80) behind a one-output sigmoid gate."""
    L, E, K, Fe, Fs = 3, 8, 2, 48, 80
    g = transformer(L, HD, 4, VOC, seq=8, ffn=FF, gated_mlp=True, experts=E, top_k=K, expert_ffn=Fe, shared_ffn=Fs,
                    shared_gate=True, dense_layers=[1])
    attn = 2 * 4 * HD * HD
    for b, s in ((1, 8), (3, 7)):
        t = b * s
        moe_layer = attn + 2 * HD * E + 2 * K * 3 * Fe * HD + 2 * 3 * Fs * HD + 2 * HD
        dense_layer = attn + 2 * 3 * FF * HD
        r = narrowpipe.analyze(g, strict=True, batch=b, seq=s)
        assert r.flops_by_group["contraction"] == t * (2 * moe_layer + dense_layer) + 2 * t * HD * VOC
    per_moe_layer = HD * E + E * 3 * Fe * HD + 3 * Fs * HD + HD
    assert g.param_count() == transformer(L, HD, 4, VOC, seq=8, ffn=FF, gated_mlp=True).param_count() \
        - 2 * 3 * FF * HD + 2 * per_moe_layer
    assert {n.source.scope for n in g.nodes if n.op is Op.SIGMOID} == {"model.layers.0.mlp.shared_expert_gate",
                                                                       "model.layers.2.mlp.shared_expert_gate"}


def test_deepseek_routing_scales_weights_and_keeps_the_router_in_fp32():
    g = transformer(2, HD, 4, VOC, seq=8, ffn=FF, gated_mlp=True, experts=8, top_k=2, router="sigmoid",
                    expert_groups=(4, 2), routed_scale=2.5, router_fp32=True, shared_ffn=48)
    router = next(v for v in g.weights if v.name == "model.layers.0.mlp.gate.weight")
    assert router.type.dtype.value == "fp32"
    scale = [n for n in g.nodes if n.name.endswith("routed_scale")]
    assert len(scale) == 2 and scale[0].attrs["scalar"] == 2.5
    bias = next(v for v in g.weights if v.name == "model.layers.0.mlp.gate.e_score_correction_bias")
    assert bias.kind.value == "buffer"            # steers the choice; not a parameter, as in transformers


def test_a_window_caps_the_cache_and_the_keys_a_decode_step_reads():
    """Mistral-style W=4096 on every layer: the cache holds at most W - 1 = 4095 tokens (transformers'
    sliding layers), so at 10,000 tokens of context a step attends 4096 keys and the cache stops growing."""
    L, Hq, Hk, d = 2, 8, 2, 16
    g = transformer(L, 128, Hq, VOC, seq=1, kv_heads=Hk, gated_mlp=True, sliding_window=4096, past=10_000)
    assert g.dims["past_window"].default == 4095 and g.dims["past_window"].max == 4095
    assert g.meta["kv_windows"] == {f"past_key_values.{i}.{p}": 4095 for i in range(L) for p in ("key", "value")}
    assert all(n.attrs[WINDOW] == 4096 for n in g.nodes if n.op is Op.ATTENTION)
    r = narrowpipe.analyze(g, strict=True, batch=2, seq=1, past=10_000, past_window=4095)
    assert r.flops_by_group["attention"] == L * 4 * 2 * Hq * 1 * 4096 * d
    cache = find_kv_cache(g)
    assert cache is not None
    per_token = L * 2 * Hk * d * 2
    assert cache.bytes_per_token == per_token
    assert cache.resident_bytes(3, 10_000) == 3 * 4095 * per_token
    assert cache.resident_bytes(3, 100) == 3 * 100 * per_token


def test_alternating_windows_cap_only_the_local_layers():
    """Gemma-2: even layers local (window 4096), odd ones global; a cache of 8,192 tokens holds 4,095 on
    the local layers and 8,192 on the global ones."""
    g = from_config({"model_type": "gemma2", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": VOC,
                     "sliding_window": 4096}, seq=1, past=8192)
    assert g.meta["spec"]["sliding_layers"] == [0, 2] and g.meta["spec"]["attn_softcap"] == 50.0
    windows = [n.attrs.get(WINDOW) for n in g.nodes if n.op is Op.ATTENTION]
    assert windows == [4096, None, 4096, None]
    lengths = {v.name: str(v.shape[2]) for v in g.inputs if v.name.endswith(".key")}
    assert lengths == {"past_key_values.0.key": "past_window", "past_key_values.1.key": "past",
                       "past_key_values.2.key": "past_window", "past_key_values.3.key": "past"}
    cache = find_kv_cache(g)
    assert cache is not None
    layer = 2 * 2 * 32 * 2          # keys and values, 2 KV heads of 32, bf16
    assert cache.resident_bytes(1, 8192) == 2 * layer * 4095 + 2 * layer * 8192


def test_config_readers_follow_transformers_layer_rules_without_layer_types():
    """A config.json that predates ``layer_types``: each family's own rule decides the windowed layers."""
    base = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": VOC, "sliding_window": 16}
    qwen2 = from_config(base | {"model_type": "qwen2", "use_sliding_window": True, "max_window_layers": 1}, seq=8)
    assert qwen2.meta["spec"]["sliding_layers"] == [1, 2, 3]
    assert from_config(base | {"model_type": "qwen2"}, seq=8).meta["spec"]["sliding_window"] is None
    qmoe = base | {"model_type": "qwen2_moe", "use_sliding_window": True, "max_window_layers": 3,
                   "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48, "num_experts": 4,
                   "num_experts_per_tok": 2, "decoder_sparse_step": 2}
    spec = from_config(qmoe, seq=8).meta["spec"]
    assert spec["sliding_layers"] == [0, 2] and spec["dense_layers"] == [0, 2] and spec["shared_gate"]
    gemma3 = base | {"model_type": "gemma3_text", "head_dim": 16, "sliding_window_pattern": 3}
    assert from_config(gemma3, seq=8).meta["spec"]["sliding_layers"] == [0, 1, 3]
    mistral = from_config(base | {"model_type": "mistral", "sliding_window": None}, seq=8)
    assert mistral.meta["spec"]["sliding_window"] is None


@pytest.mark.parametrize("kwargs", [
    dict(MLA, past=3), dict(MLA, past=3, mla_absorb=True), dict(MLA, q_lora_rank=None),
    {"sliding_window": 4, "sliding_layers": [1], "past": 6, "local_rope": True, "qk_norm": True, "kv_heads": 2},
    {"sandwich_norm": True, "embed_scale": True, "attn_softcap": 50.0, "logit_softcap": 30.0, "attn_scale": 0.1},
    {"experts": 4, "top_k": 2, "shared_ffn": 48, "shared_gate": True, "dense_layers": [0], "expert_ffn": 32},
    {"experts": 8, "top_k": 2, "router": "sigmoid", "expert_groups": [4, 2], "routed_scale": 2.5, "router_fp32": True},
    {"experts": 8, "top_k": 2, "expert_groups": (2, 1), "moe_renormalize": False},
])
def test_every_new_variant_verifies_costs_fully_and_round_trips_json(kwargs):
    g = verify(transformer(2, 64, 4, 50, seq=16, gated_mlp=True, **kwargs))
    dims = {"batch": 2, "seq": 5, **({"past": 6} if "past" in kwargs else {})}
    dims |= {"past_window": 3} if "past_window" in g.dims else {}
    report = narrowpipe.analyze(g, strict=True, dims=dims)
    assert report.unmodeled == [] and report.flops > 0
    again = from_json(to_json(g))
    assert narrowpipe.analyze(again, dims=dims).flops == report.flops
    assert again.param_count() == g.param_count()
    assert interpret(again, dims).costs   # the JSON graph's meta (lists for tuples) still interprets


@pytest.mark.parametrize("kwargs,match", [
    ({"no_such": 1}, "unknown argument"),
    ({"sliding_layers": [0]}, "needs a sliding_window"),
    ({"sliding_window": 1}, "at least 2"),
    ({"sliding_window": 8, "sliding_layers": [5]}, "are not layers"),
    (dict(MLA, kv_heads=2), "kv_heads == heads"),
    (dict(MLA, sliding_window=8), "not modelled with latent attention"),
    ({"q_lora_rank": 8}, "latent attention"),
    ({"shared_ffn": 32}, "need experts"),
    ({"experts": 4, "top_k": 2, "shared_gate": True}, "give shared_ffn"),
    ({"experts": 6, "top_k": 2, "expert_groups": (4, 2)}, "split 6 experts evenly"),
    ({"experts": 8, "top_k": 4, "expert_groups": (4, 1)}, "at least top_k"),
    ({"experts": 8, "top_k": 2, "router": "argmax"}, "router must be"),
    ({"experts": 4, "top_k": 2, "dense_layers": [2]}, "are not layers"),
    ({"sliding_window": 8, "attention": "eager"}, "eager attention builds a causal mask only"),
    (dict(MLA, attention="eager"), "latent attention is built fused"),
])
def test_bad_variants_are_refused_with_a_reason(kwargs, match):
    with pytest.raises(NarrowpipeError, match=match):
        transformer(2, 64, 4, 50, seq=8, gated_mlp=True, **kwargs)


def test_a_bidirectional_gemma_is_refused():
    with pytest.raises(NarrowpipeError, match="bidirectional"):
        from_config({"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "vocab_size": VOC, "use_bidirectional_attention": True})


def test_absorbed_attention_costs_less_than_expanding_a_long_cache():
    """At 32k tokens of context the decompressed step's kv_b_proj dominates; absorbing removes it: the
    per-step FLOPs of one DeepSeek-V3 attention layer by node, from the interpreter."""
    g = from_config(DEEPSEEK_V3, seq=1, past=32768)
    absorbed = transformer(1, 7168, 128, 1000, seq=1, past=32768, kv_lora_rank=512, q_lora_rank=1536,
                           qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, gated_mlp=True, ffn=18432,
                           mla_absorb=True)
    dims = {"batch": 1, "seq": 1, "past": 32767}
    costs = interpret(g, dims).costs
    kv_b = next(n for n in g.nodes if n.source.scope == "model.layers.0.self_attn.kv_b_proj" and n.op is Op.DOT)
    assert costs[kv_b].flops == 2 * 32768 * 512 * 128 * (128 + 128)
    table = interpret(absorbed, dims).costs
    att = sum(table[n].flops for n in absorbed.nodes if n.source.scope.startswith("model.layers.0.self_attn.kv_b")
              or n.op is Op.ATTENTION)
    assert att == 2 * 128 * (128 * 512 + 512 * 128) + 2 * 128 * 32768 * (576 + 512)
    assert att < costs[kv_b].flops / 100


def test_training_dropouts_reach_latent_attention_and_dense_layers_among_experts():
    """``dropout=p``: one mask after the embeddings, and per layer one on the attention output and one on
    the MLP's, whichever block the layer has (MLA; experts or a dense layer); the attention
    probabilities' dropout is the fused node's attribute."""
    g = _mla(dropout=0.1, experts=4, top_k=2, expert_ffn=32, dense_layers=[0])
    masks = [n for n in g.nodes if n.op is Op.RANDOM]
    assert len(masks) == 1 + 2 * 2
    assert {n.attrs["dropout"] for n in g.nodes if n.op is Op.ATTENTION} == {0.1}


def test_eager_attention_keeps_the_family_scale_softcap_and_value_width():
    """Eager attention with Gemma-2's scale and soft-cap and a value head wider than q/k: QK^T and PV by
    hand, 2*b*h*s*s*(d + dv), equal to what the fused node of the same spec costs."""
    kw = dict(seq=8, head_dim=16, v_head_dim=24, attn_scale=0.1, attn_softcap=50.0)
    eager, fused = (transformer(1, 64, 4, 50, attention=a, **kw) for a in ("eager", "fused"))
    dims = {"batch": 2, "seq": 8}
    costs = interpret(eager, dims).costs
    by_name = {n.name.removeprefix("model_layers_0_self_attn_"): n for n in eager.nodes}
    assert costs[by_name["scores"]].flops == 2 * 2 * 4 * 8 * 8 * 16
    assert costs[by_name["context"]].flops == 2 * 2 * 4 * 8 * 8 * 24
    attn = next(n for n in fused.nodes if n.op is Op.ATTENTION)
    assert interpret(fused, dims).costs[attn].flops == 2 * 2 * 4 * 8 * 8 * (16 + 24)
    assert by_name["scale"].attrs["scalar"] == 0.1 == attn.attrs["scale"]
    assert by_name["softcap_div"].attrs["scalar"] == 50.0 and by_name["softcap_tanh"].op is Op.TANH
