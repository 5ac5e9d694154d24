"""``recompute="dots"``: JAX's ``dots_with_no_batch_dims_saveable`` (MaxText's ``remat_policy=minimal``)
against hand counts.

What the policy keeps per layer: the outputs of the weights' matmuls (``dot_general`` without batch
dims) that the backward's recomputation reads, and the layer's input; everything else of the layer
runs again before its backward, attention included (its score and PV products have batch dims). The
last projection of the layer (fc2, the MLP's down projection) feeds only the layer's residual add,
whose backward reads nothing, so JAX's partial evaluation does not save it. In 16-bit, per layer
and token:

* Megatron's GPT layer (biases, GeLU MLP of 4h, eager attention, dropout): q/k/v ``3h`` + out ``h``
  (the second norm's input is recomputed from it) + fc1 ``4h`` = ``8h`` elements, 16 bytes, + the
  input's 2: ``18 s b h`` bytes (against Korthikanti's ``34 s b h`` selective and ``2 s b h`` full);
* a Llama layer (no biases, SwiGLU of ``f``, MHA): q, k, v, o ``4h`` + gate, up ``2f``.
"""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.costmodel.training import BACKWARD, FORWARD, RECOMPUTE, build_training_graph, training_memory
from narrowpipe.costmodel.training.recompute import layer_of_scope

S, B, H, A = 128, 2, 64, 4


def _gpt(layers):
    return narrowpipe.transformer(layers=layers, hidden=H, heads=A, vocab=100, seq=S, batch=B, norm="layer",
                                  positions="learned", max_positions=512, attn_bias=True, out_bias=True,
                                  mlp_bias=True, dropout=0.1, attention="eager")


def _llama(layers, ffn=96):
    return narrowpipe.transformer(layers=layers, hidden=H, heads=A, vocab=100, seq=S, batch=B, ffn=ffn,
                                  gated_mlp=True, activation="silu", norm="rms", dtype="bf16")


def test_gpt_layer_saves_its_weight_matmul_outputs_and_its_input():
    one, two = (training_memory(_gpt(n), recompute="dots") for n in (1, 2))
    assert two.activations - one.activations == 2 * (8 * H + H) * S * B
    assert two.activations_by_layer["model.layers.1"] == 18 * S * B * H


def test_llama_layer_saves_its_projections_and_its_input():
    ffn = 96
    one, two = (training_memory(_llama(n, ffn), recompute="dots") for n in (1, 2))
    assert two.activations - one.activations == 2 * (4 * H + 2 * ffn + H) * S * B


def test_dots_lies_between_selective_and_full():
    saved = {r: training_memory(_gpt(2), recompute=r).activations_by_layer["model.layers.1"]
             for r in ("selective", "dots", "full")}
    assert saved["full"] < saved["dots"] < saved["selective"]


def test_recomputed_flops_are_the_layers_forward_without_their_gemms():
    """3 layers, hidden 128, 8 heads (GQA 2), SwiGLU 352, seq 64, batch 2: no contraction runs again,
    attention's forward runs again once (4 b s^2 heads head_dim per layer), and every other recomputed
    FLOP is a forward FLOP of a layer node that is not a weight matmul, less the layer's last residual
    add (b s h FLOPs: nothing in the backward reads it again)."""
    layers, hidden, heads, seq, batch = 3, 128, 8, 64, 2
    g = narrowpipe.transformer(layers=layers, hidden=hidden, heads=heads, vocab=1000, ffn=352, kv_heads=2,
                               gated_mlp=True, seq=seq, batch=batch)
    report = narrowpipe.analyze(build_training_graph(g, recompute="dots"))
    rec = {grp: sum(r.flops for r in report.ops if r.phase == RECOMPUTE and r.group == grp)
           for grp in ("contraction", "attention")}
    assert rec == {"contraction": 0, "attention": layers * 4 * batch * seq * seq * hidden}
    fwd_layers_non_gemm = sum(r.flops for r in report.ops if r.phase == FORWARD and r.group != "contraction"
                              and layer_of_scope(r.scope) is not None)
    last_add = layers * batch * seq * hidden
    assert sum(r.flops for r in report.ops if r.phase == RECOMPUTE) == fwd_layers_non_gemm - last_add
    assert any(r.phase == BACKWARD for r in report.ops)


def test_unknown_policy_is_named():
    with pytest.raises(narrowpipe.NarrowpipeError, match="dots"):
        build_training_graph(_gpt(1), recompute="minimal")


def test_parallel_block_keeps_neither_branch_output():
    """MaxText's December 2023 block (one RMS norm, attention and a ReLU MLP side by side, added with
    the input; q/k norms): both branch outputs (out projection, wo) feed only the residual sum, so the
    saved bytes per token are q, k, v (``3 heads x head_dim``), wi (``mlp``) and the input (``h``)."""
    heads, hd, mlp = 4, 32, 256

    def block(layers):
        return narrowpipe.transformer(layers, H, heads, 100, seq=S, batch=B, ffn=mlp, head_dim=hd, activation="relu",
                                      parallel_block=True, qk_norm=True, tie_embeddings=True, norm="rms", dtype="bf16")
    one, two = (training_memory(block(n), recompute="dots") for n in (1, 2))
    assert two.activations - one.activations == 2 * (3 * heads * hd + mlp + H) * S * B
