"""The block as the training runtime runs it (QA, plan report items 1 and 2), checked by hand:
Megatron-Core's fused SwiGLU saves its input, its attention writes the projection's layout and its
fused RMS norm saves its input, so a Llama layer keeps Korthikanti et al. 2022's 34 sbh/t under
selective recomputation and sequence parallelism; and Megatron pads the vocabulary to a multiple of
128 x tp and splits it, where a vocabulary tp does not divide was left whole on every device."""

from __future__ import annotations

import dataclasses

import pytest

import narrowpipe
from narrowpipe import Parallel
from narrowpipe.costmodel.planner.planner import Planner
from narrowpipe.costmodel.planner.runtime import RUNTIMES
from narrowpipe.costmodel.planner.runtime_form import apply_runtime_form
from narrowpipe.costmodel.planner.vocab_pad import padded_vocab
from narrowpipe.costmodel.training import build_training_graph
from narrowpipe.ir import Op

CORE = RUNTIMES["megatron-core"]
EAGER = dataclasses.replace(CORE, name="eager", attention_layout="bhsd", fused_glu=False, fused_norm=False)


@pytest.fixture(scope="module")
def llama8b() -> narrowpipe.Graph:
    return narrowpipe.load_model("llama-3-8b")


def test_a_llama_3_8b_stage_keeps_34_sbh_over_t_per_layer_and_microbatch_in_flight(llama8b):
    """QA repro (tp2 pp2 mb1, selective, seq 4096): per layer, by hand in bytes per token (2-byte
    values, s=4096, h=4096, t=2): norm input 2h, QKV input 2h, Q 2h + K 0.5h + V 0.5h (8 KV heads),
    flash output 2h, norm input 2h, fc1 input 2h, fc1 output 14h (gate and up), fc2 input 7h = 34h,
    over t = 2: 34 x 4096 x 4096 / 2 = 285,212,672 B; stage 0 holds 17 layers x 2 microbatches in
    flight = 9.70 GB (it read 13.41 GB: 47.0 h/t, SiLU's output, a copy of the attention output and
    the norm's fp32 steps kept as eager torch keeps them)."""
    plan = narrowpipe.plan(llama8b, "dgx-h100", 8, global_batch=64, seq=4096, top=0,
                           parallel={"tp": 2, "pp": 2, "interleave": 1, "microbatch": 1, "recompute": "selective",
                                     "zero": 0})
    per_layer = 34 * 4096 * 4096 // 2
    assert per_layer == 285_212_672
    stage0 = next(s for s in plan.stages if s["device"] == 0)
    assert len(stage0["layers"]) == 17
    assert stage0["memory"]["activations"] == 17 * 2 * per_layer


def test_an_exported_rms_norm_runs_as_one_norm_reading_its_input_and_weight(llama8b):
    planner = Planner(llama8b, "dgx-h100", 8, global_batch=8, seq=1024)
    layer = planner.blocks.layers[0].graph
    fused = apply_runtime_form(layer, CORE)
    norms = [n for n in fused.nodes if n.op is Op.RMS_NORM]
    assert len(norms) == 2 and not any(n.op is Op.RSQRT for n in fused.nodes)
    assert norms[0].inputs[0] is fused.inputs[0]                     # the layer's input, not an fp32 copy
    assert [w.source_name for n in norms for w in n.inputs[1:]] == [
        "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight"]
    assert norms[0].attrs["eps"] == pytest.approx(1e-5) and norms[0].outputs[0].dtype.value == "bf16"
    assert sum(n.op is Op.RSQRT for n in apply_runtime_form(layer, EAGER).nodes) == 2   # eager keeps the steps


def test_the_fused_swiglu_saves_its_input_and_computes_silu_again_in_its_backward():
    """The gated product's backward reads SiLU(gate) computed again in the backward phase from the
    saved gate, so SiLU's forward output is read by nothing after the forward; the backward does one
    SiLU more than eager torch's (gate x ffn elements of one elementwise op, on top of the same
    silu_backward and product gradients)."""
    g = narrowpipe.transformer(2, 64, 4, 128, ffn=224, kv_heads=2, gated_mlp=True, seq=16)
    layer = Planner(g, "dgx-h100", 1, global_batch=1).blocks.layers[0].graph
    fused = build_training_graph(apply_runtime_form(layer, CORE))
    eager = build_training_graph(apply_runtime_form(layer, EAGER))

    def silus(train: narrowpipe.Graph, phase: str) -> list[narrowpipe.ir.Node]:
        return [n for n in train.nodes if n.op is Op.SILU and n.attrs.get("phase") == phase
                and n.attrs.get("role") != "grad"]

    forward = silus(fused, "forward")[0]
    assert {u.node.attrs.get("phase") for u in forward.outputs[0].uses} == {"forward"}
    again = silus(fused, "backward")
    assert len(again) == 1 and again[0].inputs[0] is forward.inputs[0]
    assert not silus(eager, "backward")
    eager_silu = silus(eager, "forward")[0]
    assert "backward" in {u.node.attrs.get("phase") for u in eager_silu.outputs[0].uses}


def test_the_attention_writes_the_projections_layout_so_its_output_is_saved_once():
    """The builder's layer transposes the attention output ([b, h, s, d] -> [b, s, h, d]) before
    o_proj; Megatron-Core's attention writes [s, b, h, d] itself: one 2h tensor read by the
    projection's and the attention's backward, not two (eager: 2h more per layer)."""
    h, s = 1024, 512
    g = narrowpipe.transformer(2, h, 8, 32000, ffn=4 * h, seq=s)
    par = Parallel(tp=1, pp=1, dp=1, microbatch=1, global_batch=1)
    core = Planner(g, "dgx-h100", 1, global_batch=1).costs(par)[0][0]
    bhsd = dataclasses.replace(CORE, name="bhsd", attention_layout="bhsd")
    copied = Planner(g, "dgx-h100", 1, global_batch=1, runtime=bhsd).costs(par)[0][0]
    assert copied.saved_bytes - core.saved_bytes == 2 * s * h


def test_megatron_pads_the_vocabulary_to_128_tp_and_splits_it():
    assert padded_vocab(50257, 128, 1) == 50304 and padded_vocab(50257, 128, 2) == 50432
    assert padded_vocab(128256, 128, 4) == 128512 and padded_vocab(51200, 128, 8) == 51200


def test_gpt2_at_tp2_holds_half_the_padded_embedding_not_all_of_it():
    """QA repro: ``plan gpt2 --fix tp=2,pp=1,microbatch=4,recompute=none,zero=1`` held the whole
    50,257 x 768 embedding on each device (327.8 MB of fp32 weights). By hand, elements per device
    at tp=2: the tied embedding padded to 50,432 rows and halved, 19,365,888; positions 786,432
    (1,024 rows, fewer than the 4,096 tokens gathered: whole); per layer 3,546,240 (c_attn and c_fc
    with their biases halved, both projections halved with whole biases, two layer norms); the
    final norm 1,536: 62,708,736 x 4 B = 250,834,944 B."""
    plan = narrowpipe.plan("gpt2", "dgx-h100", 8, global_batch=64, seq=1024, top=0,
                           parallel={"tp": 2, "pp": 1, "microbatch": 4, "recompute": "none", "zero": 1})
    per_layer = (768 * 2304 + 2304) // 2 + (768 * 768 // 2 + 768) + (768 * 3072 + 3072) // 2 + \
        (3072 * 768 // 2 + 768) + 4 * 768
    assert per_layer == 3_546_240
    elements = 50432 * 768 // 2 + 1024 * 768 + 12 * per_layer + 2 * 768
    assert plan.memory_per_device["weights"] == 4 * elements == 250_834_944
    assert any("50,257 padded to 50,432" in n for n in plan.notes)


def test_the_padded_head_runs_as_a_model_of_the_padded_vocabulary_would():
    """A 1,000-word model at tp=2 pads to 1,024 rows (a multiple of 256): each device's head holds 512
    rows, and its step executes exactly what a 1,024-word model's does (same FLOPs in every phase,
    same per-device parameters), while model FLOPs (MFU) keep the model's own 1,000 words."""
    h, s = 256, 128
    par = Parallel(tp=2, pp=1, dp=1, microbatch=1, global_batch=2, sequence_parallel=True)

    def planner(v: int) -> Planner:
        return Planner(narrowpipe.transformer(2, h, 4, v, ffn=4 * h, seq=s), "dgx-h100", 2, global_batch=2)

    padded, exact = planner(1000), planner(1024)
    for a, b in zip(padded.costs(par)[1:], exact.costs(par)[1:]):
        assert a is not None and b is not None
        assert a.flops == b.flops and a.params == b.params
    head = padded.costs(par)[2]
    assert head is not None and ("lm_head.weight", 512 * h, 2 * 512 * h) in head.weights
    assert padded.model_flops(2)[1:] == exact.model_flops(2)[1:]          # executed: the padded rows run
    assert padded.model_flops(2)[0] < exact.model_flops(2)[0]             # model FLOPs: 1,000 words
    assert padded.model_flops(2)[0] == padded.model_flops(1)[0]
