"""Serving a latent-attention (DeepSeek MLA) model decodes in the absorbed form serving engines run
(vLLM's and SGLang's MLA decode), prefills as built (decompressed), and says which form it timed.

The FLOPs a decode step saves by absorbing are written by hand from the two formulations
(narrowpipe.models.mla's module doc): decompressed, every step expands the whole cache of ``n = past +
1`` tokens through ``kv_b_proj`` (``2 n r H (dn + dv)``) and attends with head dims ``dn + dr`` and
``dv``; absorbed, the query and output pass ``W_UK`` and ``W_UV`` once (``2 H dn r + 2 H r dv``) and
attention's head dims are the latent's (``r + dr`` and ``r``). Everything else is the same graph."""

from __future__ import annotations

import json

import pytest

import narrowpipe
from narrowpipe.cli import main
from narrowpipe.costmodel.serving import serve
from tests.tiny_deepseek import DN, DR, DV, LAYERS, TINY_DEEPSEEK, H, R


def decompressed_minus_absorbed(past: int) -> int:
    """Per token: FLOPs the decompressed decode step spends beyond the absorbed one."""
    n = past + 1
    decompressed = 2 * n * R * H * (DN + DV) + 2 * H * n * (DN + DR) + 2 * H * n * DV
    absorbed = 2 * H * DN * R + 2 * H * R * DV + 2 * H * n * (R + DR) + 2 * H * n * R
    return LAYERS * (decompressed - absorbed)


@pytest.mark.parametrize("past, batch", [(100, 3), (1000, 1)])
def test_decode_is_timed_absorbed_by_default_and_saves_the_hand_counted_flops(past, batch):
    g = narrowpipe.from_config(TINY_DEEPSEEK)
    absorbed = serve(g, "h100", mode="decode", batch=batch, context=past)
    built = serve(g, "h100", mode="decode", batch=batch, context=past, mla_decode="as-built")
    assert absorbed.decode is not None and built.decode is not None
    per_token = absorbed.decode.flops / batch
    assert built.decode.flops / batch - per_token == decompressed_minus_absorbed(past)
    # the same as serving a graph built absorbed (from_config(..., mla_absorb=True))
    twin = serve(narrowpipe.from_config(TINY_DEEPSEEK, mla_absorb=True), "h100", mode="decode", batch=batch,
                 context=past)
    assert twin.decode is not None and twin.decode.flops == absorbed.decode.flops
    assert any("decode timed in the absorbed form" in n for n in absorbed.notes)
    assert any("decode timed decompressed, as built" in n for n in built.notes)


def test_prefill_stays_decompressed_while_decode_absorbs():
    g = narrowpipe.from_config(TINY_DEEPSEEK)
    runs = {m: serve(g, "h100", mode="generate", batch=2, input_len=64, output_len=4, mla_decode=m)
            for m in ("absorbed", "as-built")}
    pre = {m: r.prefill for m, r in runs.items()}
    dec = {m: r.decode for m, r in runs.items()}
    assert pre["absorbed"] is not None and pre["as-built"] is not None
    assert pre["absorbed"].flops == pre["as-built"].flops
    assert dec["absorbed"] is not None and dec["as-built"] is not None
    # the last decode step holds 64 + 2 tokens in its cache, 2 sequences
    assert dec["as-built"].flops - dec["absorbed"].flops == 2 * decompressed_minus_absorbed(66)


def test_tensor_parallel_shards_decode_absorbed_too():
    g = narrowpipe.from_config(TINY_DEEPSEEK)
    absorbed = serve(g, "h100", mode="decode", batch=4, context=500, tp=2)
    built = serve(g, "h100", mode="decode", batch=4, context=500, tp=2, mla_decode="as-built")
    assert absorbed.decode is not None and built.decode is not None
    # each device holds H / 2 heads: the saving is the same in total over the two devices
    assert built.decode.flops - absorbed.decode.flops == 4 * decompressed_minus_absorbed(500)


def test_a_model_without_latent_attention_is_unchanged_and_unnoted():
    g = narrowpipe.transformer(2, 256, 4, 1000, seq=8)
    a = serve(g, "h100", mode="decode", batch=2, context=100)
    b = serve(g, "h100", mode="decode", batch=2, context=100, mla_decode="as-built")
    assert a.tpot_s == b.tpot_s and not any("latent attention" in n for n in a.notes)


def test_an_unknown_mla_decode_form_is_refused():
    with pytest.raises(narrowpipe.NarrowpipeError, match="mla_decode must be one of absorbed, as-built"):
        serve(narrowpipe.from_config(TINY_DEEPSEEK), "h100", mode="decode", mla_decode="latent")


def test_cli_serve_and_sweep_time_decode_absorbed_and_say_so(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_DEEPSEEK))
    out = {}
    for form in ("absorbed", "as-built"):
        assert main(["serve", str(path), "--target", "h100", "--mode", "decode", "--batch", "2", "--context", "300",
                     "--mla-decode", form, "--json", str(tmp_path / f"{form}.json")]) == 0
        out[form] = json.loads((tmp_path / f"{form}.json").read_text())
    text = capsys.readouterr().out
    assert "decode timed in the absorbed form" in " ".join(text.split())
    diff = out["as-built"]["decode"]["flops"] - out["absorbed"]["decode"]["flops"]
    assert diff == 2 * decompressed_minus_absorbed(300)
    sweep = {}
    for form in ("absorbed", "as-built"):
        assert main(["serve-sweep", str(path), "--target", "h100", "--batches", "1", "--context", "300",
                     "--mla-decode", form, "--json", str(tmp_path / "sweep.json")]) == 0
        sweep[form] = json.loads((tmp_path / "sweep.json").read_text())["points"][0]["decode"]["flops"]
    assert sweep["as-built"] - sweep["absorbed"] == decompressed_minus_absorbed(300)


def test_analyze_mode_decode_says_it_times_the_built_form_and_where_the_absorbed_one_is(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_DEEPSEEK))
    assert main(["analyze", str(path), "--target", "h100", "--mode", "decode", "--context", "300"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "latent attention (MLA) timed decompressed, as built" in text and "narrowpipe serve" in text


def test_absorbed_decode_streams_the_shared_latent_cache_once_and_copies_none_of_it():
    """FlashMLA's layout: one cache tensor of ``[latent | k_rot]`` rows, V its first ``R`` columns. By hand
    (bf16, H heads): the attention kernel reads q ``B*H*(R+DR)*2``, the cache once ``B*(past+1)*(R+DR)*2``,
    and writes ``B*H*R*2``; before the fix it also read V (``B*(past+1)*R*2``) and a ``k_cat`` copy moved
    the whole cache twice more. Every other kernel's bytes are the same at any cache length."""
    from narrowpipe.costmodel.serving import replica_for
    from narrowpipe.costmodel.serving.step import fused_program, interpret
    rep = replica_for(narrowpipe.from_config(TINY_DEEPSEEK), "h100")
    sg = rep.decode_graph
    batch, others = 3, set()
    for past in (100, 2047):
        prog = fused_program(interpret(sg.graph, sg.bindings(batch, 1, past)), rep.target, rep.options)
        layer = [k for k in prog.kernels if k.name.startswith("model_layers_0_self_attn_")]
        attention = [k for k in layer if k.kind == "attention"]
        assert len(attention) == 1
        cache_once = batch * (past + 1) * (R + DR) * 2
        assert attention[0].cost.bytes == batch * H * (R + DR) * 2 + cache_once + batch * H * R * 2
        others.add(sum(k.cost.bytes for k in layer if k.kind != "attention"))
    assert len(others) == 1
    # the cache holds R + DR values per token and layer, as before, in one tensor per layer
    assert sg.cache.bytes_per_token == rep.source.cache.bytes_per_token == LAYERS * (R + DR) * 2
    assert len(sg.cache.tensors) == LAYERS


def test_an_attention_declaring_a_v_wider_than_its_k_a_prefix_is_refused():
    from narrowpipe.costmodel.interpreter import interpret
    from narrowpipe.errors import ShapeError
    from narrowpipe.ir import V_IN_K, DType, Graph, Op, TensorType
    g = Graph("bad")
    q = g.add_input("q", TensorType(DType.BF16, (1, 2, 1, 8)))
    k = g.add_input("k", TensorType(DType.BF16, (1, 1, 4, 8)))
    v = g.add_input("v", TensorType(DType.BF16, (1, 1, 4, 16)))
    n = g.add_node(Op.ATTENTION, [q, k, v], [TensorType(DType.BF16, (1, 2, 1, 16))],
                   {"layout": "bhsd", V_IN_K: True})
    g.set_outputs(n.outputs)
    with pytest.raises(ShapeError, match="cannot be a prefix of K"):
        interpret(g, {})


def test_tensor_parallel_decode_of_a_model_with_several_leading_dense_layers():
    """DeepSeek-V3's layout (dense layers first, then experts) at TP2: each device replicates the
    latent cache, 3 x (R + DR) x 2 B per token (the stage split once rebuilt the spec with one layer,
    which refused dense_layers (0, 1))."""
    config = dict(TINY_DEEPSEEK, num_hidden_layers=3, first_k_dense_replace=2)
    r = serve(narrowpipe.from_config(config), "h200", mode="decode", batch=8, context=256, tp=2, with_crossover=False)
    assert r.kv_bytes_per_token == 3 * (R + DR) * 2 and r.tpot_s is not None and r.tpot_s > 0


def test_the_tp_note_gives_latent_attention_one_shared_latent_not_config_kv_heads():
    """TINY_DEEPSEEK lists 4 KV heads; its cache is one latent of R + DR values a token that every head
    reads, whole on each TP2 device (the note said "2 KV heads", as DeepSeek-V3's TP8 said 16)."""
    from narrowpipe.costmodel.serving import replica_for

    rep = replica_for(narrowpipe.from_config(TINY_DEEPSEEK), "h100", tp=2)
    note = next(n for n in rep.notes if n.startswith("TP2: each device"))
    assert f"(2 heads, one latent KV of {R} + {DR} values a token shared by the heads (whole on every device)" in note
    assert "KV heads" not in note
