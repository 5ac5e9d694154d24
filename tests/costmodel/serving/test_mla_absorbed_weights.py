"""The absorbed MLA decode step reads ``W_UK^T`` and ``W_UV`` as weights laid out for it, prepared once
at load (vLLM's ``process_weights_after_loading``), not ``kv_b_proj.weight`` reshaped and transposed by
a copy kernel inside every step.

By hand (tiny DeepSeek, bf16, H=4 heads, latent R=32, DN=32 nope dims, DV=32 value dims, batch 3, one
token): the two batched matmuls of a layer's ``kv_b_proj`` read their activation ``3*4*32*2`` B and their
weight ``4*32*32*2`` B and write ``3*4*32*2`` B, 9,728 B each, and nothing else in ``kv_b_proj`` moves a
byte. The per-step transpose read and wrote the whole weight, ``2 * 4*(32+32)*32*2`` = 32,768 B more a
layer (DeepSeek-V2-Lite: 2 * 16*256*512*2 = 8.39 MB a layer, 27 layers, 226 MB of a batch-1 step)."""

from __future__ import annotations

from math import prod

import narrowpipe
from narrowpipe.costmodel.dequant_fusion import is_stored_weight
from narrowpipe.costmodel.serving import replica_for
from narrowpipe.costmodel.serving.formats import Formats
from narrowpipe.costmodel.serving.step import fused_program, interpret
from narrowpipe.ir import DType, Op
from tests.tiny_deepseek import DN, DV, LAYERS, TINY_DEEPSEEK, H, R

B = 3


def _absorbed():
    rep = replica_for(narrowpipe.from_config(TINY_DEEPSEEK), "h100")
    return rep, rep.decode_graph


def test_kv_b_proj_is_two_batched_matmuls_on_prepared_weights_with_no_weight_copy():
    rep, sg = _absorbed()
    weights = {v.name: v.shape for v in sg.graph.weights if ".kv_b_proj." in v.name}
    assert weights == {f"model.layers.{i}.self_attn.kv_b_proj.{n}": s for i in range(LAYERS)
                       for n, s in (("W_UK_T", (H, DN, R)), ("W_UV", (H, R, DV)))}
    # no op of the step moves a stored weight into another layout
    assert not [n.name for n in sg.graph.nodes if n.op is not Op.DOT and n.inputs and n.inputs[0] is not None
                and is_stored_weight(n.inputs[0]) and "kv_b_proj" in n.name]
    for past in (100, 2047):
        prog = fused_program(interpret(sg.graph, sg.bindings(B, 1, past)), rep.target, rep.options)
        kv_b = {k.name: k.cost.bytes for k in prog.kernels if k.name.startswith("model_layers_0_self_attn_kv_b_proj")}
        per_matmul = B * H * DN * 2 + H * DN * R * 2 + H * B * R * 2
        assert kv_b == {"model_layers_0_self_attn_kv_b_proj_absorb_k": per_matmul,
                        "model_layers_0_self_attn_kv_b_proj_absorb_v": B * H * R * 2 + H * R * DV * 2 + H * B * DV * 2}
        assert per_matmul == 9_728


def test_the_prepared_weights_are_kv_b_projs_parameters_and_a_weight_format_quantizes_them():
    """Same parameters as transformers' ``kv_b_proj.weight`` ``[H*(DN+DV), R]`` (the decompressed graph
    holds that one tensor), and ``--weights fp8`` retypes them as it does every linear layer's."""
    _, sg = _absorbed()
    built = narrowpipe.from_config(TINY_DEEPSEEK)

    def params(graph) -> int:
        return sum(prod(v.shape) for v in graph.weights)
    assert params(sg.graph) == params(built)
    assert {v.name: v.shape for v in built.weights if ".kv_b_proj." in v.name} == \
        {f"model.layers.{i}.self_attn.kv_b_proj.weight": (H * (DN + DV), R) for i in range(LAYERS)}
    fp8 = Formats.of(weights="fp8_e4m3").apply(sg.graph)
    dtypes = {v.name.rsplit(".", 1)[-1]: v.type.dtype for v in fp8.weights
              if v.name.startswith("model.layers.0.self_attn.kv_b_proj.")}
    assert dtypes == {"W_UK_T": DType.FP8_E4M3, "W_UV": DType.FP8_E4M3}
