"""Training memory per device against hand computations and published formulas.

* Mixed-precision Adam: 2 (bf16 weight) + 2 (bf16 gradient) + 12 (fp32 master, momentum, variance)
  = 16 bytes per parameter unsharded; ZeRO-1/2/3 over ``dp`` divide the states, then the gradients,
  then the weights (Rajbhandari et al., SC'20, figure 1: ZeRO-3 with dp=8 is 2 bytes per parameter).
* Activations kept for the backward of one GPT layer in 16-bit with dropout (Korthikanti et al.,
  "Reducing Activation Recomputation in Large Transformer Models", 2022, section 4):
  ``34 s b h + 5 a s^2 b`` bytes without recomputation, ``34 s b h`` with selective recomputation,
  ``2 s b h`` (the layer input) with full recomputation. One layer's share is the difference between
  the same model with two layers and with one, which cancels the embedding and the head.
"""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.costmodel.training import TERMS, training_memory

S, B, H, A = 128, 2, 64, 4


def _gpt(layers, **kw):
    """Megatron's GPT layer: layer norms, biases, GELU MLP of 4h, dropout, eager attention, bf16."""
    return narrowpipe.transformer(layers=layers, hidden=H, heads=A, vocab=100, seq=S, batch=B, norm="layer",
                                  positions="learned", max_positions=512, attn_bias=True, out_bias=True,
                                  mlp_bias=True, dropout=0.1, attention="eager", **kw)


@pytest.mark.parametrize("recompute,per_layer", [
    ("none", 34 * S * B * H + 5 * A * S * S * B),
    ("selective", 34 * S * B * H),
    ("full", 2 * S * B * H),
])
def test_saved_activations_of_a_layer_match_korthikanti(recompute, per_layer):
    one, two = (training_memory(_gpt(n), recompute=recompute) for n in (1, 2))
    assert two.activations - one.activations == per_layer
    assert two.activations_by_layer["model.layers.1"] == per_layer


def test_fused_attention_keeps_no_seq_squared_tensor():
    """FlashAttention-style attention recomputes its scores: no 5as^2b term, so selective
    recomputation saves nothing more than no recomputation. Without dropout the layer keeps
    Korthikanti's 34sbh less the two 1-byte dropout masks (2sbh), plus the attention output the
    fused backward reads besides the o_proj input's transposed copy (2sbh): 34sbh."""
    g = narrowpipe.transformer(layers=2, hidden=H, heads=A, vocab=100, seq=S, batch=B)
    fused = [training_memory(g, recompute=r) for r in ("none", "selective")]
    assert fused[0].activations == fused[1].activations
    assert fused[0].activations_by_layer["model.layers.1"] == 34 * S * B * H


def _no_buffer_model():
    """Learned positions, untied head: every weight is a trainable bf16 parameter (no fp32 buffers)."""
    return narrowpipe.transformer(layers=2, hidden=64, heads=4, vocab=104, seq=32, positions="learned",
                                  max_positions=64)


@pytest.mark.parametrize("zero,dp,per_param", [
    (0, 1, 16), (0, 8, 16), (1, 8, 2 + 2 + 12 / 8), (2, 8, 2 + (2 + 12) / 8), (3, 8, 16 / 8)])
def test_adam_mixed_precision_bytes_per_parameter(zero, dp, per_param):
    g = _no_buffer_model()
    n = g.param_count()
    assert n % 8 == 0
    m = training_memory(g, optimizer="adam", zero=zero, dp=dp)
    assert m.params == n and m.config["param_dtype"] == "bf16"
    assert m.weights + m.gradients + m.optimizer_states == per_param * n


def test_fp32_parameters_need_no_master_copy_and_sgd_no_states():
    g = _no_buffer_model()
    n = g.param_count()
    m = training_memory(g, param_dtype="fp32")
    assert (m.weights, m.gradients, m.optimizer_states) == (4 * n, 4 * n, 8 * n)
    m = training_memory(g, param_dtype="fp32", optimizer="sgd")
    assert m.optimizer_states == 0
    m = training_memory(g, grad_dtype="fp32")               # Megatron's fp32 main gradients
    assert (m.weights, m.gradients, m.optimizer_states) == (2 * n, 4 * n, 12 * n)


def test_tensor_and_pipeline_parallelism_split_the_terms():
    g = _gpt(4)
    base = training_memory(g)
    m = training_memory(g, tp=2, pp=2)
    assert m.optimizer_states == -(-base.optimizer_states // 4)
    assert m.activations == -(-base.activations // 2)         # 1F1B: pp microbatches of L/pp layers
    inter = training_memory(g, tp=2, pp=2, interleave=2)
    assert inter.activations == -(-int(base.activations * (1 + 1 / 4)) // 2)


def test_microbatch_and_dims_rebind_the_activations():
    g = _gpt(2)
    one = training_memory(g, microbatch=1)
    four = training_memory(g, microbatch=4)
    layer = "model.layers.0"   # the whole total also holds batch-free tensors (the causal mask)
    assert four.activations_by_layer[layer] == 4 * one.activations_by_layer[layer] and four.weights == one.weights
    assert four.config["dims"]["batch"] == 4
    longer = training_memory(g, microbatch=1, dims={"seq": 256}, recompute="full")
    assert longer.activations_by_layer["model.layers.0"] == 2 * 256 * 1 * H


def test_overflow_names_the_term_and_the_bytes_over():
    g = narrowpipe.transformer(layers=32, hidden=4096, heads=32, vocab=128256, ffn=14336, kv_heads=8,
                               gated_mlp=True, seq=4096)   # Llama-3-8B sizes
    m = training_memory(g, microbatch=1)
    cap = 80e9
    over = m.overflow(cap)
    assert over[0][0] == "optimizer_states"
    assert over[0][1] == m.weights + m.gradients + m.optimizer_states - cap
    assert [t for t, _ in over] == ["optimizer_states", "activations", "temporary"]
    assert sum(b for _, b in over) == m.total - cap
    text = m.explain(cap)
    assert "optimizer states" in text and "zero>=1" in text
    assert m.overflow("h100") == m.overflow(narrowpipe.get_target("h100").memory_capacity)
    sharded = training_memory(g, microbatch=1, zero=3, dp=8, recompute="full")
    assert sharded.fits("h100") and sharded.overflow("h100") == [] and sharded.explain("h100").startswith("fits")
    assert set(sharded.terms()) == set(TERMS)


def test_the_advice_leaves_out_what_the_configuration_already_does():
    """Optimizer states over the capacity under ZeRO-3 over dp=8: more devices, not 'zero>=1'."""
    g = narrowpipe.transformer(layers=32, hidden=4096, heads=32, vocab=32000, ffn=14336, kv_heads=8,
                               gated_mlp=True, experts=8, top_k=2, seq=4096)     # Mixtral-8x7B sizes
    m = training_memory(g, microbatch=1, zero=3, dp=8, recompute="full")
    assert m.overflow("h100")[0][0] == "optimizer_states"
    text = m.explain("h100")
    assert "zero>=1" not in text and "a larger dp than 8, already sharded by zero=3" in text


def test_weights_alone_overflowing_say_so():
    g = narrowpipe.transformer(layers=80, hidden=8192, heads=64, vocab=128256, ffn=28672, kv_heads=8,
                               gated_mlp=True, seq=2048)   # Llama-3-70B sizes: 141 GB of bf16 weights
    m = training_memory(g, microbatch=1)
    term, over = m.overflow(80e9)[0]
    assert term == "weights" and over == m.weights - 80e9
    assert "weights alone exceed" in m.explain(80e9)


def test_bad_parallel_options_are_named():
    g = _no_buffer_model()
    for kw, word in ((dict(zero=4), "zero"), (dict(tp=0), "tp"), (dict(optimizer="lamb"), "optimizer"),
                     (dict(recompute="half"), "recompute")):
        with pytest.raises(narrowpipe.NarrowpipeError, match=word):
            training_memory(g, **kw)
