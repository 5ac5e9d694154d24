"""The model builder against independent references: a torch export of the same transformers model
(GPT-2, Llama with grouped-query attention, Mixtral, BERT's encoder)
lowered by narrowpipe's torch frontend; and torch's FlopCounterMode on the eager model with real weights.

Compared exactly: contraction FLOPs, attention FLOPs and parameters, at the export's dims and after
rebinding ``batch`` and ``seq`` (the builder's dims are symbolic). Not compared: elementwise,
reduction and normalization FLOPs, because the builder emits canonical ops (one ``RMS_NORM``, one
``GELU``) where an export holds their decomposition plus mask and position bookkeeping; only a loose
bound on the grand total is checked. Mixtral is exported with transformers' default experts
(``grouped_mm_fallback`` at fp32, a grouped GEMM like the builder's); FlopCounterMode runs the eager
expert loop on real routing, which also routes ``top_k * tokens`` rows.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import narrowpipe  # noqa: E402

VOCAB = 500


def _gpt2():
    return transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=64,
                                   bos_token_id=0, eos_token_id=0)


def _llama_gqa():
    return transformers.LlamaConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                                    num_attention_heads=8, num_key_value_heads=2, vocab_size=VOCAB)


def _mixtral():
    return transformers.MixtralConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=8, num_key_value_heads=2, vocab_size=VOCAB,
                                      num_local_experts=4, num_experts_per_tok=2)


def _bert():
    return transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                                   vocab_size=VOCAB)


CONFIGS = {"gpt2": (_gpt2, transformers.GPT2LMHeadModel), "llama-gqa": (_llama_gqa, transformers.LlamaForCausalLM),
           "mixtral": (_mixtral, transformers.MixtralForCausalLM), "bert": (_bert, transformers.BertModel)}


def _cache_off(name):
    """The causal LMs are run without a KV cache; BertModel has none to turn off."""
    return {} if name == "bert" else {"use_cache": False}
BATCH, SEQ = 2, 12


def _config(name, attn):
    config = CONFIGS[name][0]()
    config._attn_implementation = attn
    if name == "mixtral" and attn == "eager":
        config._experts_implementation = "eager"
    return config


@pytest.fixture(scope="module")
def exported():
    """name -> (the narrowpipe graph of a meta-device export with symbolic batch and seq, the config)."""
    out = {}
    for name, (_, cls) in CONFIGS.items():
        config = _config(name, "sdpa")
        with torch.device("meta"):
            model = cls(config).eval()
        ids = torch.zeros(BATCH, SEQ, dtype=torch.long, device="meta")
        dyn = {"input_ids": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=64)}}
        dyn |= {k: None for k in _cache_off(name)}
        graph = narrowpipe.from_torch(model, (), {"input_ids": ids, **_cache_off(name)}, dynamic_shapes=dyn)
        out[name] = (graph, config)
    return out


def _flop_counter(name, batch, seq):
    """FlopCounterMode's total and torch's parameter count on the eager model with real (random) weights."""
    torch.manual_seed(0)
    model = CONFIGS[name][1](_config(name, "eager")).eval()
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.randint(0, VOCAB, (batch, seq)), **_cache_off(name))
    return counter.get_total_flops(), sum(p.numel() for p in model.parameters())


def _built(name, config):
    return narrowpipe.from_config(config, seq=SEQ, batch=BATCH, dtype="fp32")


@pytest.mark.parametrize("name", list(CONFIGS))
def test_contraction_attention_and_params_equal_the_lowered_export(name, exported):
    graph, config = exported[name]
    ref = narrowpipe.analyze(graph, strict=True)
    built = narrowpipe.analyze(_built(name, config), strict=True)
    assert ref.unmodeled == [] and built.unmodeled == []
    for group in ("contraction", "attention"):
        assert built.flops_by_group[group] == ref.flops_by_group[group], group
    assert built.flops_by_group["convolution"] == 0
    assert built.params == ref.params
    # the rest differs by spelling (canonical norms and activations vs their decomposition): a loose bound
    assert built.flops == pytest.approx(ref.flops, rel=0.02)


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("batch,seq", [(BATCH, SEQ), (3, 7)])
def test_matmul_flops_equal_flop_counter_mode_at_any_binding(name, batch, seq, exported):
    """Built once at (2, 12), bound to (3, 7): 42 routed rows over 4 experts is the uneven MoE split."""
    expected_flops, expected_params = _flop_counter(name, batch, seq)
    report = narrowpipe.analyze(_built(name, exported[name][1]), strict=True, batch=batch, seq=seq)
    g = report.flops_by_group
    assert g["contraction"] + g["attention"] == expected_flops
    assert report.params == expected_params


def test_export_and_builder_rebind_alike(exported):
    graph, config = exported["llama-gqa"]
    ref = narrowpipe.analyze(graph, batch=5, seq=33)
    built = narrowpipe.analyze(_built("llama-gqa", config), batch=5, seq=33)
    assert built.flops_by_group["contraction"] == ref.flops_by_group["contraction"]
    assert built.flops_by_group["attention"] == ref.flops_by_group["attention"]


@pytest.mark.parametrize("name", ["gpt2", "llama-gqa", "mixtral"])
def test_a_cached_step_equals_flop_counter_mode(name, exported):
    """Prefill 5 tokens, then count 3 more against the cache: the builder's graph with a KV cache,
    bound to past=5, seq=3, counts the same matmul FLOPs (attention reads 8 keys per query)."""
    torch.manual_seed(0)
    model = CONFIGS[name][1](_config(name, "eager")).eval()
    with torch.no_grad():
        cache = model(torch.randint(0, VOCAB, (2, 5)), use_cache=True).past_key_values
        with FlopCounterMode(display=False) as counter:
            model(torch.randint(0, VOCAB, (2, 3)), cache=cache, use_cache=True)
    graph = narrowpipe.from_config(exported[name][1], seq=1, batch=1, past=16, dtype="fp32")
    g = narrowpipe.analyze(graph, strict=True, batch=2, seq=3, past=5).flops_by_group
    assert g["contraction"] + g["attention"] == counter.get_total_flops()
