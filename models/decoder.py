"""``transformer(...)``: a decoder-style language model built directly as IR, without torch.

Why: the placement planner needs graphs for configurations nobody has exported (a 400B MoE, a
hidden size under consideration), and an export of a large model costs minutes and a matching
transformers class. The builder writes the same program the torch frontend would lower, block by
block, so its FLOPs and parameter count agree with an export of the equivalent Hugging Face model
(the tests check this on GPT-2, Llama with GQA, Mixtral, BERT, Qwen2/3 and their MoEs, DeepSeek-V2/V3,
Mistral and Gemma-2/3), while the dims ``batch`` and ``seq`` stay symbolic with their roles, so one graph
serves every batch size and prompt length.

Scopes and weight names follow Hugging Face's Llama layout (``model.layers.3.mlp.down_proj``,
``model.embed_tokens.weight``, ``lm_head``) whatever the architecture (a family's own module names
inside a block: DeepSeek's ``kv_b_proj``, Gemma's ``pre_feedforward_layernorm``), so reports group rows
by layer and block the same way for every model the builder makes.

The default dtype is bf16: the planner sizes deployments, and bf16 is what such models are served in
(the torch exports in the tests are fp32, which changes bytes, never FLOPs or parameters).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..errors import NarrowpipeError
from ..ir import DimRole, DimSpec, DType, Graph, Op, Value
from ..ir.dims import Sym, dim_add
from ..ir.verifier import maybe_verify
from .blocks import Cache, attention, causal_mask, mlp, norm, rotary_tables
from .blocks import dropout as dropout_block
from .graph_builder import GraphBuilder
from .mla import mla_attention
from .moe import moe
from .spec import TransformerSpec

__all__ = ["transformer", "build", "WINDOW_DIM", "KV_WINDOWS_META"]

#: The cache-length dim of sliding-window layers (see :func:`transformer`).
WINDOW_DIM = "past_window"
#: ``graph.meta`` key naming each windowed cache input and the most tokens it holds.
KV_WINDOWS_META = "kv_windows"


def transformer(layers: int, hidden: int, heads: int, vocab: int, seq: int = 2048, *, ffn: int | None = None,
                kv_heads: int | None = None, head_dim: int | None = None, gated_mlp: bool = False,
                activation: str | None = None, experts: int | None = None, top_k: int | None = None,
                moe_renormalize: bool = True, parallel_block: bool = False, tie_embeddings: bool = False,
                norm: str = "rms", positions: str = "rotary", max_positions: int | None = None,
                attn_bias: bool = False, out_bias: bool = False, mlp_bias: bool = False,
                norm_bias: bool | None = None, causal: bool | None = None, encoder: bool = False,
                type_vocab: int = 0, past: int | None = None, sliding_window: int | None = None, eps: float = 1e-5,
                dtype: DType | str = DType.BF16, batch: int = 1, dropout: float = 0.0, attention: str = "fused",
                name: str = "transformer", **variants: Any) -> Graph:
    """A causal language model's forward pass (``input_ids [batch, seq] -> logits [batch, seq, vocab]``).

    ``seq`` and ``batch`` are the default bindings of the symbolic dims ``seq`` (role SEQUENCE)
    and ``batch`` (role BATCH). ``ffn`` defaults to ``4 * hidden``, ``kv_heads`` to ``heads``
    (multi-head; fewer is grouped-query attention), ``head_dim`` to ``hidden // heads``.
    ``gated_mlp`` makes the MLP ``down(act(gate(x)) * up(x))`` with ``activation`` SiLU by default
    (plain MLPs default to GELU). ``experts`` and ``top_k`` replace every layer's MLP by a
    mixture of experts (:mod:`narrowpipe.models.moe`: grouped GEMMs over the ``top_k * tokens`` routed
    rows, exact FLOPs; how the rows spread over experts is the analysis' ``expert_balance``).
    ``parallel_block`` runs attention and MLP on one shared norm and adds both (GPT-J, Falcon).
    ``tie_embeddings`` makes ``lm_head`` read the embedding table (one weight, counted once).
    ``positions`` is ``"rotary"``, ``"learned"`` (a ``max_positions`` x ``hidden`` table, GPT-2)
    or ``"none"``. ``norm`` is ``"rms"`` or ``"layer"``.

    ``encoder`` builds BERT's layout instead (``BertModel``): bidirectional attention, post-norm
    layers, a norm after the embeddings (plus ``type_vocab`` token-type rows, read for type 0),
    no final norm and no ``lm_head``, and a pooler (first token, dense, tanh); the outputs are the
    last hidden states and the pooled vector. ``causal`` defaults to ``not encoder``.

    ``past`` adds a KV cache: the default binding of the dim ``past`` (role KV_LENGTH), inputs
    ``past_key_values.{i}.key``/``.value`` of ``[batch, kv_heads, past, head_dim]`` per layer, and the
    updated caches as outputs after the logits; ``seq=1`` with a cache is one decode step.

    ``sliding_window=W`` makes layers attend to the last ``W`` tokens, their own included: every layer
    (Mistral 7B v0.1), or those ``sliding_layers`` names (Gemma's local layers). Their attention
    nodes carry ``window=W``, and their caches hold at most ``W - 1`` past tokens, as transformers'
    ``DynamicSlidingWindowLayer`` does, along a second KV_LENGTH dim ``past_window`` (bind it to
    ``min(past, W - 1)``; ``graph.meta["kv_windows"]`` names each windowed cache input and its cap).
    Attention FLOPs count every key a node is handed, as torch counts a masked attention.

    ``variants`` are the other :class:`~.spec.TransformerSpec` fields, for the families that need them:
    attention (``sliding_layers``, ``local_rope``, ``attn_scale``, ``attn_softcap``, ``logit_softcap``,
    ``qk_norm``, ``sandwich_norm``, ``embed_scale``: Gemma-2/3), multi-head latent attention
    (``kv_lora_rank``, ``q_lora_rank``, ``qk_rope_head_dim``, ``v_head_dim``, ``mla_absorb``, with
    ``head_dim`` or ``qk_nope_head_dim`` giving the rest of a q/k head; :mod:`narrowpipe.models.mla`:
    the cache holds the latent, ``[batch, 1, past, kv_lora_rank]`` and ``[batch, 1, past,
    qk_rope_head_dim]`` per layer) and mixtures of experts (``expert_ffn``, ``shared_ffn``,
    ``shared_gate``, ``dense_layers``, ``router``, ``expert_groups``, ``routed_scale``, ``router_fp32``;
    :mod:`narrowpipe.models.moe`).

    For training graphs: ``dropout`` adds GPT/Megatron's dropouts (a Bernoulli mask and a multiply,
    as the torch frontend lowers ``nn.Dropout``) after the embeddings, on the attention
    probabilities and on both residual branches; ``attention="eager"`` writes attention as
    ``QK^T``, scale, causal mask, softmax, (dropout,) ``PV`` (Megatron without FlashAttention) instead
    of one fused ``ATTENTION`` node. Neither changes a FLOP of the matmuls.
    """
    if "qk_nope_head_dim" in variants:
        nope = int(variants.pop("qk_nope_head_dim"))
        head_dim = nope + int(variants.get("qk_rope_head_dim", 0))
    fields = {f.name for f in dataclasses.fields(TransformerSpec)}
    unknown = sorted(set(variants) - fields)
    if unknown:
        raise NarrowpipeError(f"transformer: unknown argument(s) {', '.join(unknown)}")
    for arg, value in (("layers", layers), ("hidden", hidden), ("heads", heads), ("vocab", vocab)):
        if isinstance(value, bool) or not isinstance(value, int):     # "256" // 4 raised a TypeError
            raise NarrowpipeError(f"transformer: {arg} must be a whole number, got {value!r}")
    kv = kv_heads or heads
    spec = TransformerSpec(
        layers=layers, hidden=hidden, heads=heads, vocab=vocab, ffn=ffn or 4 * hidden, kv_heads=kv,
        head_dim=head_dim or hidden // heads, gated_mlp=gated_mlp,
        activation=activation or ("silu" if gated_mlp else "gelu"), experts=experts, top_k=top_k,
        moe_renormalize=moe_renormalize, parallel_block=parallel_block, tie_embeddings=tie_embeddings,
        norm=norm, positions=positions, max_positions=max_positions, attn_bias=attn_bias, out_bias=out_bias,
        mlp_bias=mlp_bias, norm_bias=norm_bias, causal=not encoder if causal is None else causal,
        encoder=encoder, type_vocab=type_vocab, sliding_window=sliding_window,
        dtype=dtype if isinstance(dtype, DType) else DType.parse(dtype), dropout=dropout, attention=attention,
        **variants)
    return build(spec, seq=seq, batch=batch, past=past, eps=eps, name=name)


def build(spec: TransformerSpec, *, seq: int = 2048, batch: int = 1, past: int | None = None,
          eps: float = 1e-5, name: str = "transformer") -> Graph:
    """The graph of ``spec`` (what :func:`transformer` calls once it has filled in the defaults)."""
    if spec.max_positions and seq + (past or 0) > spec.max_positions:
        raise NarrowpipeError(f"seq={seq} (+ past={past or 0}) exceeds max_positions={spec.max_positions}")
    if past is not None and spec.encoder:
        raise NarrowpipeError("transformer: an encoder keeps no KV cache (past is for decoders)")
    graph = Graph(name)
    graph.declare_dim(DimSpec("batch", default=batch, min=1, role=DimRole.BATCH,
                              doc="sequences per forward pass"))
    graph.declare_dim(DimSpec("seq", default=seq, min=1, max=spec.max_positions, role=DimRole.SEQUENCE,
                              doc="tokens per sequence in this pass"))
    if past is not None:
        graph.declare_dim(DimSpec("past", default=past, min=0, role=DimRole.KV_LENGTH,
                                  doc="tokens already in the KV cache"))
        caps = {c for c in (spec.cached_window(i) for i in range(spec.layers)) if c is not None}
        if caps:
            cap = max(caps)
            graph.declare_dim(DimSpec(WINDOW_DIM, default=min(past, cap), min=0, max=cap, role=DimRole.KV_LENGTH,
                                      doc=f"tokens a sliding-window layer's cache holds: min(past, {cap})"))
    graph.meta.update({"builder": "narrowpipe.models.transformer", "spec": _spec_meta(spec)})
    b = GraphBuilder(graph, spec.dtype)
    B, S = Sym("batch"), Sym("seq")
    ids = b.input("input_ids", (B, S), DType.INT64)
    with b.scope("model"):
        with b.scope("embed_tokens"):
            table = b.weight("weight", (spec.vocab, spec.hidden))
            h = b.emit(Op.GATHER, [table, ids], (B, S, spec.hidden), {"axis": 0}, name="embedding")
            if spec.embed_scale:
                h = b.emit(Op.MUL, [h], h.shape, {"scalar": math.sqrt(spec.hidden)}, name="scale")
        h = _positions(b, spec, h)
        if spec.encoder:
            h = _encoder_embeddings(b, spec, h, eps)
        with b.scope("drop"):
            h = dropout_block(b, h, spec.dropout)
        ropes = _ropes(b, spec, S)
        if spec.attention == "eager" and spec.causal:
            b.shared["causal_mask"] = causal_mask(b, S, dim_add(Sym("past"), S) if past is not None else S)
        caches = [_cache_inputs(b, spec, i) for i in range(spec.layers)] if past is not None else []
        for i in range(spec.layers):
            with b.scope("layers", i):
                rope = ropes[1] if spec.window(i) and spec.local_rope else ropes[0]
                h = _layer(b, spec, i, h, rope, eps, caches[i] if caches else None)
        if spec.encoder:
            graph.set_outputs([h, _pooler(b, spec, h)])
            return maybe_verify(graph, "narrowpipe.models.transformer")
        h = norm(b, spec, h, "norm", eps)
    with b.scope("lm_head"):
        head = table if spec.tie_embeddings else b.weight("weight", (spec.vocab, spec.hidden))
        logits = b.dot(h, head)
        if spec.logit_softcap is not None:
            logits = _softcap(b, logits, spec.logit_softcap)
    graph.set_outputs([logits, *(v for c in caches for v in c.present)])
    return maybe_verify(graph, "narrowpipe.models.transformer")


def _softcap(b: GraphBuilder, x: Value, cap: float) -> Value:
    """``tanh(x / cap) * cap`` (Gemma-2's final logits)."""
    y = b.emit(Op.DIV, [x], x.shape, {"scalar": cap}, name="softcap_div")
    return b.emit(Op.MUL, [b.unary(Op.TANH, y, name="softcap_tanh")], x.shape, {"scalar": cap}, name="softcap")


def _ropes(b: GraphBuilder, spec: TransformerSpec, seq: Sym) -> list[tuple[Value, Value] | None]:
    """The rotary tables of full-attention layers, then those of windowed layers (the same ones unless
    ``local_rope``: Gemma-3 computes a set per layer type)."""
    if spec.positions != "rotary":
        return [None, None]
    tables = rotary_tables(b, spec, seq)
    local = spec.local_rope and any(spec.window(i) for i in range(spec.layers))
    return [tables, rotary_tables(b, spec, seq, prefix="local_") if local else tables]


def _positions(b: GraphBuilder, spec: TransformerSpec, h: Value) -> Value:
    """Learned absolute positions (GPT-2's ``wpe``): a gather of rows ``0..seq-1`` added to the tokens."""
    if spec.positions != "learned":
        return h
    assert spec.max_positions is not None
    seq = h.shape[1]
    with b.scope("embed_positions"):
        table = b.weight("weight", (spec.max_positions, spec.hidden))
        pos = b.emit(Op.IOTA, [], (seq,), {"role": "positions"}, name="positions", dtype=DType.INT64)
        rows = b.emit(Op.GATHER, [table, pos], (seq, spec.hidden), {"axis": 0}, name="embedding")
    return b.binary(Op.ADD, h, rows, name="add_positions")


def _cache_inputs(b: GraphBuilder, spec: TransformerSpec, layer: int) -> Cache:
    """Layer ``layer``'s past keys and values, named as Hugging Face's legacy cache tuples: per-head keys
    and values, or MLA's latent and rotary key (one "head" each; absorbed, both in one ``key`` tensor);
    a windowed layer's along ``past_window``."""
    cap = spec.cached_window(layer)
    length = Sym(WINDOW_DIM if cap is not None else "past")
    if spec.is_mla and spec.mla_absorb:      # serving engines' one [latent | k_rot] tensor (models.mla)
        assert spec.kv_lora_rank is not None
        key = b.input(f"past_key_values.{layer}.key", (Sym("batch"), 1, length,
                                                        spec.kv_lora_rank + spec.qk_rope_head_dim), spec.dtype)
        if cap is not None:
            b.graph.meta.setdefault(KV_WINDOWS_META, {})[key.name] = cap
        return Cache(key, None)
    if spec.is_mla:
        assert spec.kv_lora_rank is not None
        shapes = [(Sym("batch"), 1, length, spec.kv_lora_rank), (Sym("batch"), 1, length, spec.qk_rope_head_dim)]
    else:
        shapes = [(Sym("batch"), spec.kv_heads, length, d) for d in (spec.head_dim, spec.value_dim)]
    key, value = (b.input(f"past_key_values.{layer}.{part}", shape, spec.dtype)
                  for part, shape in zip(("key", "value"), shapes))
    if cap is not None:
        windows = b.graph.meta.setdefault(KV_WINDOWS_META, {})
        windows.update({key.name: cap, value.name: cap})
    return Cache(key, value)


def _encoder_embeddings(b: GraphBuilder, spec: TransformerSpec, h: Value, eps: float) -> Value:
    """BERT's token-type rows (all type 0 when none are given, as ``BertModel`` does) and embedding norm."""
    if spec.type_vocab:
        with b.scope("embed_token_types"):
            table = b.weight("weight", (spec.type_vocab, spec.hidden))
            types = b.emit(Op.FILL, [], h.shape[:2], {"value": 0}, name="token_type_ids", dtype=DType.INT64)
            rows = b.emit(Op.GATHER, [table, types], h.shape, {"axis": 0}, name="embedding")
        h = b.binary(Op.ADD, h, rows, name="add_token_types")
    return norm(b, spec, h, "embed_norm", eps)


def _pooler(b: GraphBuilder, spec: TransformerSpec, h: Value) -> Value:
    """BERT's pooler: the first token's hidden state through a dense layer and tanh."""
    with b.scope("pooler"):
        first = b.emit(Op.SLICE, [h], (h.shape[0], spec.hidden), {"axis": 1, "index": 0}, name="first_token",
                       dtype=h.dtype)
        return b.unary(Op.TANH, b.linear(first, spec.hidden, "dense", bias=True), name="tanh")


def _layer(b: GraphBuilder, spec: TransformerSpec, i: int, x: Value, rope: tuple[Value, Value] | None,
           eps: float, cache: Cache | None = None) -> Value:
    """Layer ``i``: pre-norm residual blocks, one shared norm for a parallel block, Gemma's sandwich of
    norms around each block, or post-norm (encoder); experts or a dense MLP as the layer has."""
    def ffn(h: Value) -> Value:
        out = moe(b, spec, h) if spec.layer_is_moe(i) else mlp(b, spec, h)
        return dropout_block(b, out, spec.dropout, "mlp_dropout")

    def attend(h: Value) -> Value:
        if spec.is_mla:
            return mla_attention(b, spec, h, rope, cache, eps)
        return attention(b, spec, h, rope, cache, spec.window(i), eps)

    if spec.encoder:
        x = norm(b, spec, b.binary(Op.ADD, x, attend(x), name="residual_attn"), "post_attention_layernorm", eps)
        return norm(b, spec, b.binary(Op.ADD, x, ffn(x), name="residual_mlp"), "post_mlp_layernorm", eps)
    if spec.parallel_block:
        h = norm(b, spec, x, "input_layernorm", eps)
        a, m = attend(h), ffn(h)
        return b.binary(Op.ADD, b.binary(Op.ADD, x, a, name="residual_attn"), m, name="residual_mlp")
    a = attend(norm(b, spec, x, "input_layernorm", eps))
    if spec.sandwich_norm:
        a = norm(b, spec, a, "post_attention_layernorm", eps)
    x = b.binary(Op.ADD, x, a, name="residual_attn")
    m = ffn(norm(b, spec, x, "pre_feedforward_layernorm" if spec.sandwich_norm else "post_attention_layernorm", eps))
    if spec.sandwich_norm:
        m = norm(b, spec, m, "post_feedforward_layernorm", eps)
    return b.binary(Op.ADD, x, m, name="residual_mlp")


def _spec_meta(spec: TransformerSpec) -> dict[str, object]:
    """The spec as JSON-friendly data, kept in ``graph.meta`` so a saved graph says how it was made."""
    out: dict[str, object] = {}
    for key, value in vars(spec).items():
        out[key] = value.value if isinstance(value, DType) else list(value) if isinstance(value, tuple) else value
    return out

