"""The model builder on its own: hand-computed formulas, published parameter counts, the IR's
invariants (verifier, roles, scopes), and that it needs no torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

import narrowpipe
from narrowpipe.errors import NarrowpipeError
from narrowpipe.ir import CAUSAL, DimRole, Op, from_json, to_json, verify
from narrowpipe.models import from_config, transformer


def _dots(graph, scope):
    return [n for n in graph.nodes if n.op is Op.DOT and n.source.scope == scope]


def test_dense_gqa_flops_equal_the_hand_formula_at_any_binding():
    L, H, Hq, Hk, V, F = 3, 96, 6, 2, 1000, 256
    d = H // Hq
    g = transformer(L, H, Hq, V, seq=64, ffn=F, kv_heads=Hk, gated_mlp=True)
    for b, s in ((1, 64), (4, 17), (2, 1)):
        t = b * s
        per_layer = 2 * t * (H * Hq * d + 2 * H * Hk * d + Hq * d * H + 3 * H * F)
        r = narrowpipe.analyze(g, strict=True, batch=b, seq=s)
        assert r.flops_by_group["contraction"] == L * per_layer + 2 * t * H * V
        assert r.flops_by_group["attention"] == L * 4 * b * Hq * s * s * d


def test_moe_expert_gemms_route_top_k_rows_per_token_whatever_the_split():
    """Experts are grouped GEMMs over the top_k * tokens routed rows: the total is exact at any binding
    (even splits or not), and they hold every expert's weights once."""
    L, H, V, F, E, K = 2, 64, 300, 96, 8, 2
    g = transformer(L, H, 4, V, seq=16, ffn=F, gated_mlp=True, experts=E, top_k=K)
    for b, s in ((1, 16), (3, 7), (1, 1), (5, 13)):
        t = b * s
        attn_proj = 2 * t * 4 * H * H
        experts = 2 * t * K * (2 * F * H + F * H)
        router = 2 * t * H * E
        r = narrowpipe.analyze(g, strict=True, batch=b, seq=s)
        assert r.flops_by_group["contraction"] == L * (attn_proj + experts + router) + 2 * t * H * V
    bindings = {"batch": 3, "seq": 7}
    layer0 = [n for n in g.nodes if n.op is Op.GROUPED_DOT and n.source.scope == "model.layers.0.mlp.experts"]
    assert len(layer0) == 2 and all(n.attrs["top_k"] == K for n in layer0)
    weights = sum(n.inputs[1].type.numel(bindings) for n in layer0)
    assert weights == E * (2 * F * H + H * F)


def test_a_kv_cache_adds_a_kv_length_dim_and_attention_over_past_plus_seq():
    L, H, Hq, Hk, V = 2, 64, 8, 2, 100
    d = H // Hq
    cached = transformer(L, H, Hq, V, seq=1, kv_heads=Hk, past=100, gated_mlp=True)
    plain = transformer(L, H, Hq, V, seq=1, kv_heads=Hk, gated_mlp=True)
    assert cached.dims_with_role(DimRole.KV_LENGTH) == ["past"]
    assert [v.name for v in cached.inputs][:3] == ["input_ids", "past_key_values.0.key", "past_key_values.0.value"]
    assert str(cached.outputs[1].type) == "bf16[batch, 2, past + seq, 8]" and len(cached.outputs) == 1 + 2 * L
    for b, s, p in ((1, 1, 100), (4, 1, 4095), (2, 16, 0)):
        r = narrowpipe.analyze(cached, strict=True, batch=b, seq=s, past=p)
        assert r.flops_by_group["attention"] == L * 4 * b * Hq * s * (p + s) * d
        base = narrowpipe.analyze(plain, batch=b, seq=s)
        assert r.flops_by_group["contraction"] == base.flops_by_group["contraction"]
    assert cached.param_count() == plain.param_count()


def test_published_parameter_counts():
    llama3_8b = from_config({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                             "vocab_size": 128256, "max_position_embeddings": 8192})
    assert llama3_8b.param_count() == 8_030_261_248
    mixtral_8x7b = from_config({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                                "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                                "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2})
    assert mixtral_8x7b.param_count() == 46_702_792_704
    gpt2 = from_config({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257,
                        "n_positions": 1024})
    assert gpt2.param_count() == 124_439_808
    bert = from_config({"model_type": "bert", "num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
                        "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512})
    assert bert.param_count() == 109_482_240   # bert-base-uncased as BertModel


def test_tied_embeddings_are_one_weight_read_twice_and_counted_once():
    untied = transformer(2, 64, 4, 500, seq=8)
    tied = transformer(2, 64, 4, 500, seq=8, tie_embeddings=True)
    assert untied.param_count() - tied.param_count() == 500 * 64
    table = next(v for v in tied.weights if v.name == "model.embed_tokens.weight")
    assert {u.node.op for u in table.uses} == {Op.GATHER, Op.DOT}


def test_dims_are_symbolic_with_roles_and_seq_is_the_default_binding():
    g = transformer(1, 64, 4, 100, seq=77, batch=3)
    assert g.dims_with_role(DimRole.BATCH) == ["batch"]
    assert g.dims_with_role(DimRole.SEQUENCE) == ["seq"]
    assert g.default_bindings() == {"batch": 3, "seq": 77}
    assert g.outputs[0].type.symbols == {"batch", "seq"}


def test_scopes_follow_hugging_face_module_paths():
    g = transformer(2, 64, 4, 100, seq=8, gated_mlp=True)
    for scope in ("model.layers.1.mlp.down_proj", "model.layers.0.self_attn.q_proj", "lm_head"):
        assert len(_dots(g, scope)) == 1, scope
    att = [n for n in g.nodes if n.op is Op.ATTENTION]
    assert len(att) == 2 and all(n.attrs[CAUSAL] and n.attrs["layout"] == "bhsd" for n in att)
    assert att[1].source.scope == "model.layers.1.self_attn"
    assert any(v.name == "model.layers.1.mlp.gate_proj.weight" for v in g.weights)


@pytest.mark.parametrize("kwargs", [
    {}, {"gated_mlp": True, "kv_heads": 1}, {"experts": 4, "top_k": 1, "gated_mlp": True},
    {"experts": 3, "top_k": 2}, {"parallel_block": True, "norm": "layer", "positions": "learned", "max_positions": 32},
    {"tie_embeddings": True, "attn_bias": True, "out_bias": True, "mlp_bias": True, "positions": "none"},
    {"encoder": True, "type_vocab": 2, "norm": "layer", "positions": "learned", "max_positions": 32},
    {"past": 9, "kv_heads": 2, "experts": 4, "top_k": 2, "gated_mlp": True},
])
def test_every_variant_verifies_costs_fully_and_round_trips_json(kwargs):
    g = verify(transformer(2, 32, 4, 50, seq=16, **kwargs))
    report = narrowpipe.analyze(g, strict=True, batch=2, seq=5)
    assert report.unmodeled == [] and report.flops > 0
    again = from_json(to_json(g))
    assert narrowpipe.analyze(again, batch=2, seq=5).flops == report.flops
    assert again.param_count() == g.param_count()


def test_an_encoder_is_bidirectional_and_ends_in_hidden_states_and_a_pooled_vector():
    g = transformer(2, 32, 4, 50, seq=8, encoder=True, norm="layer", positions="learned", max_positions=16)
    assert not any(n.attrs[CAUSAL] for n in g.nodes if n.op is Op.ATTENTION)
    assert [str(v.type) for v in g.outputs] == ["bf16[batch, seq, 32]", "bf16[batch, 32]"]
    assert not any(n.source.scope == "lm_head" for n in g.nodes)


def test_parallel_block_has_one_norm_per_layer():
    seq = transformer(2, 32, 4, 50, seq=4)
    par = transformer(2, 32, 4, 50, seq=4, parallel_block=True)
    assert seq.param_count() - par.param_count() == 2 * 32


def test_bad_architectures_are_refused_with_a_reason():
    with pytest.raises(NarrowpipeError, match="multiple of kv_heads"):
        transformer(1, 64, 8, 100, kv_heads=3)
    with pytest.raises(NarrowpipeError, match="top_k"):
        transformer(1, 64, 8, 100, experts=4)
    with pytest.raises(NarrowpipeError, match="attends both ways"):
        transformer(1, 64, 8, 100, encoder=True, causal=True)
    with pytest.raises(NarrowpipeError, match="no KV cache"):
        transformer(1, 64, 8, 100, encoder=True, past=4)
    with pytest.raises(NarrowpipeError, match="max_positions"):
        transformer(1, 64, 8, 100, seq=8, past=60, positions="learned", max_positions=64)
    with pytest.raises(NarrowpipeError, match="not supported"):
        from_config({"model_type": "mamba"})
    with pytest.raises(NarrowpipeError, match="lacks"):
        from_config({"model_type": "llama", "hidden_size": 64})


def test_building_needs_no_torch():
    code = ("import sys, narrowpipe; g = narrowpipe.transformer(2, 64, 4, 100, experts=4, top_k=2); "
            "narrowpipe.analyze(g, 'h100'); assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("target", ["h100", "tpu-v5e", "groq-lpu", "epyc-9755"])
def test_moe_times_on_every_family_when_an_expert_group_is_empty(target):
    """At seq=2048 the 4096 routed rows split evenly over 4 experts: the 'q + 1' group is empty."""
    g = transformer(2, 64, 4, 100, seq=2048, experts=4, top_k=2)
    report = narrowpipe.analyze(g, target)
    assert report.time_s > 0 and report.flops_by_group["contraction"] > 0
