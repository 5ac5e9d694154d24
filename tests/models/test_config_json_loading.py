"""A Hugging Face ``config.json`` is a model file too: ``load`` (and so every CLI command) builds it
with the model builder, and its parameter count equals transformers' own model of that config."""

from __future__ import annotations

import json

import narrowpipe

LLAMA_1B = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
            "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
            "max_position_embeddings": 131072, "tie_word_embeddings": True, "rms_norm_eps": 1e-5}


def test_config_json_loads_through_the_builder_with_transformers_param_count(tmp_path):
    import torch
    import transformers
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_1B))
    graph = narrowpipe.load(path)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA_1B))
    expected = sum(p.numel() for p in model.parameters())
    assert narrowpipe.analyze(graph, dims={"batch": 1, "seq": 16}).params == expected == 1_235_814_400


def test_a_saved_graph_json_is_not_taken_for_a_config(tmp_path):
    g = narrowpipe.transformer(2, 64, 4, 100, seq=8)
    path = tmp_path / "graph.json"
    g.save(path)
    assert len(narrowpipe.load(path).nodes) == len(g.nodes)


def test_rotary_base_and_scaling_reach_the_spec_from_either_transformers_layout():
    """transformers 4's rope_theta/rope_scaling and transformers 5's rope_parameters both give the spec's
    rope_theta (launch settings need it: Megatron's --rotary-base defaults to 10,000); no key means
    transformers' default base, and the plain 'default' type is no scaling."""
    from narrowpipe.costmodel.serving.recognise import spec_from_graph
    llama31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
    small = {**LLAMA_1B, "num_hidden_layers": 2}
    v4 = spec_from_graph(narrowpipe.from_config({**small, "rope_theta": 500000.0, "rope_scaling": llama31}))
    v5 = spec_from_graph(narrowpipe.from_config({**small, "rope_parameters": {**llama31, "rope_theta": 500000.0}}))
    plain = spec_from_graph(narrowpipe.from_config({**small, "rope_parameters": {"rope_type": "default",
                                                                                 "rope_theta": 1e6}}))
    none = spec_from_graph(narrowpipe.from_config(small))
    assert v4 is not None and v5 is not None and plain is not None and none is not None
    assert (v4.rope_theta, v4.rope_scaling) == (v5.rope_theta, v5.rope_scaling) == (500000.0, llama31)
    assert (plain.rope_theta, plain.rope_scaling) == (1e6, None)
    assert (none.rope_theta, none.rope_scaling) == (10000.0, None)
