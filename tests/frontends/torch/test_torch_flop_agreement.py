"""The torch path against torch's own counter, on real transformers architectures (tiny configs).

``flops_by_group`` contraction + convolution + attention must equal ``FlopCounterMode``'s total
exactly on the eager-attention variant; the SDPA variant must give the same total (FlopCounterMode
itself counts 0 for the fused CPU SDPA kernel, so it is compared to the eager count).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import narrowpipe  # noqa: E402


def gpt2():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=64, bos_token_id=0, eos_token_id=0))


def bert():
    return transformers.BertModel(transformers.BertConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=500))


def llama_gqa():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=8,
        num_key_value_heads=2, vocab_size=500))


def resnet50_tiny():
    return transformers.ResNetForImageClassification(transformers.ResNetConfig(
        embedding_size=16, hidden_sizes=[32, 64, 128, 256], depths=[3, 4, 6, 3], layer_type="bottleneck",
        num_labels=10))


def vit_base_tiny():
    return transformers.ViTForImageClassification(transformers.ViTConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32,
        patch_size=8, num_labels=10))


# name -> (constructor, has attention layers)
TEXT = {"gpt2": (gpt2, True), "bert": (bert, True), "llama-gqa": (llama_gqa, True)}
VISION = {"resnet50": (resnet50_tiny, False), "vit-base": (vit_base_tiny, True)}


def _inputs(name):
    if name in VISION:
        return (torch.randn(2, 3, 32, 32),), {}
    kwargs = {"use_cache": False} if name in ("gpt2", "llama-gqa") else {}
    return (torch.randint(0, 500, (2, 12)),), kwargs


def _model(name, impl):
    torch.manual_seed(0)
    make, has_attention = (TEXT | VISION)[name]
    m = make().eval()
    if has_attention:
        m.config._attn_implementation = impl
    return m


def _reference(name):
    args, kwargs = _inputs(name)
    m = _model(name, "eager")
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        m(*args, **kwargs)
    return counter.get_total_flops(), sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("name", list(TEXT) + list(VISION))
def test_matmul_like_flops_equal_flop_counter_mode_exactly(name, impl):
    expected_flops, expected_params = _reference(name)
    args, kwargs = _inputs(name)
    graph = narrowpipe.from_torch(_model(name, impl), args, kwargs)
    report = narrowpipe.analyze(graph, strict=True)
    g = report.flops_by_group
    assert g["contraction"] + g["convolution"] + g["attention"] == expected_flops
    assert report.params == expected_params
    assert report.unmodeled == []
    if impl == "sdpa" and name != "resnet50":
        assert g["attention"] > 0


def test_symbolic_seq_rebinds_to_other_lengths_exactly():
    """Exported once at seq=12 with a dynamic seq, counted at 20: equal to running at 20."""
    m = _model("llama-gqa", "eager")
    ids = torch.randint(0, 500, (2, 12))
    dyn = {"input_ids": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=64)}, "use_cache": None}
    graph = narrowpipe.from_torch(m, (), {"input_ids": ids, "use_cache": False}, dynamic_shapes=dyn)
    assert {"batch", "seq"} <= set(graph.dims)
    assert graph.dims["seq"].default == 12
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        m(torch.randint(0, 500, (3, 20)), use_cache=False)
    assert narrowpipe.analyze(graph, batch=3, seq=20).modeled_flops == counter.get_total_flops()
