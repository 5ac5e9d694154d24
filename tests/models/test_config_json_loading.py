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
