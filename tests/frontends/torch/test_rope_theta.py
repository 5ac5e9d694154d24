"""The rotary base lives in the values of a model's ``rotary_emb.inv_freq`` buffer, which the IR does not
keep: the frontend reads it off the export (launch settings need it; Megatron's default is 10,000)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import narrowpipe  # noqa: E402
from narrowpipe.costmodel.serving.recognise import spec_from_graph  # noqa: E402
from narrowpipe.frontends.torch.frontend import rope_theta_of  # noqa: E402

LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}


def _llama(theta: float, scaling: dict | None = None, hidden: int = 64) -> torch.nn.Module:
    cfg = transformers.LlamaConfig(hidden_size=hidden, intermediate_size=128, num_attention_heads=4,
                                   num_key_value_heads=2, num_hidden_layers=1, vocab_size=128, rope_theta=theta,
                                   rope_scaling=dict(scaling) if scaling else None,
                                   max_position_embeddings=16384, use_cache=False)
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("theta", [10000.0, 500000.0, 1e6])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_base_is_read_back_from_inv_freq_in_any_format_and_under_llama_3_1_scaling(theta, dtype):
    for scaling in (None, LLAMA31):
        model = _llama(theta, scaling, hidden=512).to(dtype)      # head_dim 128, as Llama-3's
        assert rope_theta_of(dict(model.named_buffers())) == theta
    with torch.device("meta"):
        assert rope_theta_of(dict(_llama(theta).named_buffers())) is None      # no values: unknown


def test_an_export_gives_the_spec_its_rope_theta():
    graph = narrowpipe.from_torch(_llama(500000.0), (torch.randint(0, 128, (2, 16)),))
    spec = spec_from_graph(graph)
    assert spec is not None and graph.meta["rope_theta"] == spec.rope_theta == 500000.0
