"""Multi-head latent attention (DeepSeek-V2/V3) as canonical IR, as transformers implements it.

Why its own block: MLA compresses each token's keys and values into one latent vector of
``kv_lora_rank`` dims (plus a ``qk_rope_head_dim`` rotary key shared by every head), and what a model
caches, and what a decode step costs, follow from where the latent is expanded.

Two formulations, one set of weights:

* **Decompressed** (the default; transformers' eager and sdpa attention, so FLOPs and parameters equal
  a torch export and FlopCounterMode): the latent is cached (``past_key_values.{i}.key`` holds the
  normed latent ``[batch, 1, past, kv_lora_rank]``, ``.value`` the rotated shared key
  ``[batch, 1, past, qk_rope_head_dim]``, as transformers' cache layers hold them), and every step
  expands the whole cache, past and new tokens, through ``kv_b_proj`` into full per-head keys and
  values before attention. A decode step therefore costs ``2 * (past + seq) * kv_lora_rank * heads *
  (qk_nope + v)`` FLOPs in ``kv_b_proj`` alone, growing with the context.
* **Absorbed** (``mla_absorb=True``; what serving engines run at decode, e.g. vLLM's and SGLang's
  FlashMLA path, after DeepSeek-V2 section 2.1.3): ``kv_b_proj``'s key half is folded into the
  query (``q_nope @ W_UK`` per head) and its value half applied after attention (``o @ W_UV``), so
  attention runs multi-query style over the cached latent itself: keys ``[latent, k_rot]`` of
  ``kv_lora_rank + qk_rope_head_dim`` dims, values the latent, one KV head. No per-token expansion of
  the cache; attention's own FLOPs grow instead (its head dims are the latent's). Same cache, same
  outputs; FLOPs differ, so it is a separate, explicit choice and no torch export equals it. Its
  weights are ``kv_b_proj``'s as the engines hold them after loading: ``kv_b_proj.W_UK_T`` and
  ``kv_b_proj.W_UV``, the same parameters split per head (:func:`_absorbed`).

Both read the cache of ``kv_lora_rank + qk_rope_head_dim`` values per token per layer (576 for
DeepSeek-V3, against ``2 * 128 * 128 = 32768`` for a plain multi-head cache of its size): the
decompressed form as transformers holds it (two tensors), the absorbed one as serving engines do, one
tensor of ``[latent | k_rot]`` rows (``past_key_values.{i}.key``) that attention reads once, V being
its first ``kv_lora_rank`` columns.
"""

from __future__ import annotations

from ..ir import V_IN_K, Op, Value
from .blocks import Cache, append_cache, apply_rotary, attention_attrs, dropout, heads_view, norm
from .graph_builder import GraphBuilder
from .spec import TransformerSpec

__all__ = ["mla_attention"]


def _slice(b: GraphBuilder, x: Value, start: int, end: int, name: str) -> Value:
    """``x[..., start:end]`` (a view, as ``torch.split`` gives)."""
    return b.emit(Op.SLICE, [x], (*x.shape[:-1], end - start), {"axis": x.type.rank - 1, "start": start, "end": end},
                  name=name, dtype=x.dtype)


def mla_attention(b: GraphBuilder, spec: TransformerSpec, x: Value, rope: tuple[Value, Value] | None,
                  cache: Cache | None = None, eps: float = 1e-5) -> Value:
    """Latent attention in module ``self_attn`` (see the module doc for the two formulations)."""
    assert spec.kv_lora_rank is not None
    batch, seq = x.shape[0], x.shape[1]
    h, d, dr, r = spec.heads, spec.head_dim, spec.qk_rope_head_dim, spec.kv_lora_rank
    dn = d - dr
    with b.scope("self_attn"):
        if spec.q_lora_rank is None:
            q = b.linear(x, h * d, "q_proj")
        else:
            qa = norm(b, spec, b.linear(x, spec.q_lora_rank, "q_a_proj", bias=spec.attn_bias), "q_a_layernorm", eps)
            q = b.linear(qa, h * d, "q_b_proj")
        q = heads_view(b, q, h, d, "q")
        q_pass, q_rot = _slice(b, q, 0, dn, "q_pass"), _slice(b, q, dn, d, "q_rot")
        kv = b.linear(x, r + dr, "kv_a_proj_with_mqa", bias=spec.attn_bias)
        latent = norm(b, spec, _slice(b, kv, 0, r, "kv_nope"), "kv_a_layernorm", eps)
        latent = b.reshape(latent, (batch, 1, seq, r), name="latent_view")
        k_rot = b.reshape(_slice(b, kv, r, r + dr, "k_rot"), (batch, 1, seq, dr), name="k_rot_view")
        if rope is not None:
            q_rot = apply_rotary(b, q_rot, *rope, "q")
            k_rot = apply_rotary(b, k_rot, *rope, "k")
        if spec.mla_absorb:
            o = _absorbed(b, spec, q_pass, q_rot, latent, k_rot, cache)
        else:
            if cache is not None:
                assert cache.value is not None
                latent = append_cache(b, cache.key, latent, "latent")
                k_rot = append_cache(b, cache.value, k_rot, "k_rot")
                cache.present.extend([latent, k_rot])
            o = _decompressed(b, spec, q_pass, q_rot, latent, k_rot)
        o = b.linear(b.reshape(o, (batch, seq, h * spec.value_dim), name="o_view"), spec.hidden, "o_proj",
                     bias=spec.attn_bias)
        return dropout(b, o, spec.dropout, "resid_dropout")


def _decompressed(b: GraphBuilder, spec: TransformerSpec, q_pass: Value, q_rot: Value, latent: Value,
                  k_rot: Value) -> Value:
    """transformers' ``expand_kv``: every cached latent through ``kv_b_proj``, then plain attention.
    Returns ``[B, S, H, v]``."""
    assert spec.kv_lora_rank is not None
    batch, h, seq = q_pass.shape[0], spec.heads, q_pass.shape[2]
    d, dr, dv = spec.head_dim, spec.qk_rope_head_dim, spec.value_dim
    dn = d - dr
    length = latent.shape[2]
    q = b.emit(Op.CONCAT, [q_pass, q_rot], (batch, h, seq, d), {"axis": 3}, name="q_cat")
    kv = b.linear(latent, h * (dn + dv), "kv_b_proj")                    # [B, 1, L, H*(dn+dv)]
    kv = heads_view(b, b.reshape(kv, (batch, length, h * (dn + dv)), name="kv_squeeze"), h, dn + dv, "kv")
    k_nope, v = _slice(b, kv, 0, dn, "k_nope"), _slice(b, kv, dn, dn + dv, "value")
    k_rot = b.emit(Op.EXPAND, [k_rot], (batch, h, length, dr), name="k_rot_expand", dtype=k_rot.dtype)
    k = b.emit(Op.CONCAT, [k_nope, k_rot], (batch, h, length, d), {"axis": 3}, name="k_cat")
    o = b.emit(Op.ATTENTION, [q, k, v], (batch, h, seq, dv), attention_attrs(spec, d, False, None), name="attention")
    return b.permute(o, (0, 2, 1, 3), name="o_transpose")


def _absorbed(b: GraphBuilder, spec: TransformerSpec, q_pass: Value, q_rot: Value, latent: Value,
              k_rot: Value, cache: Cache | None) -> Value:
    """Attention in the latent space: ``W_UK`` folded into the query, ``W_UV`` applied to the output,
    one shared KV head of the latent (plus rotary key). Returns ``[B, S, H, v]``.

    ``W_UK^T`` ``[H, dn, r]`` and ``W_UV`` ``[H, r, dv]`` are weights of the step, ``kv_b_proj.weight``
    split per head and laid out for the two batched matmuls once when the model is loaded (vLLM's
    ``MLACommonImpl.process_weights_after_loading`` keeps them as ``W_UK_T`` and ``W_UV``): the same
    ``H * (dn + dv) * r`` parameters, read once a step. Reshaping and transposing ``kv_b_proj.weight``
    inside the step instead costed a copy kernel per layer that read and wrote the whole weight every
    step (DeepSeek-V2-Lite: 8.39 MB per layer, 27 kernels, 2.5% of a batch-1 decode step).

    The cache is one tensor of ``[latent | k_rot]`` rows (FlashMLA's and vLLM's ``kv_c_and_k_pe_cache``):
    only the new tokens' rows are joined (what the cache write does), K is the whole cache and V its
    first ``kv_lora_rank`` columns, a view the attention reads with K (:data:`~narrowpipe.ir.V_IN_K`),
    so a decode step streams the cache once and copies none of it."""
    assert spec.kv_lora_rank is not None
    batch, h, seq = q_pass.shape[0], spec.heads, q_pass.shape[2]
    d, dr, dv, r = spec.head_dim, spec.qk_rope_head_dim, spec.value_dim, spec.kv_lora_rank
    dn = d - dr
    with b.scope("kv_b_proj"):
        # kv_b_proj's [H*(dn+dv), r] weight split per head once, at load: W_UK^T [H, dn, r], W_UV [H, r, dv]
        w_uk = b.weight("W_UK_T", (h, dn, r))
        w_uv = b.weight("W_UV", (h, r, dv))
        # q_nope [B,H,S,dn] x W_UK^T [H,dn,r] over dn, batched on heads -> [H,B,S,r]
        q_lat = b.emit(Op.DOT, [q_pass, w_uk], (h, batch, seq, r),
                       {"lhs_contract": (3,), "rhs_contract": (1,), "lhs_batch": (1,), "rhs_batch": (0,)},
                       name="absorb_k")
    q_lat = b.permute(q_lat, (1, 0, 2, 3), name="q_latent")
    q = b.emit(Op.CONCAT, [q_lat, q_rot], (batch, h, seq, r + dr), {"axis": 3}, name="q_cat")
    k = b.emit(Op.CONCAT, [latent, k_rot], (batch, 1, seq, r + dr), {"axis": 3}, name="kv_row",
               dtype=latent.dtype)
    if cache is not None:
        k = append_cache(b, cache.key, k, "kv")
        cache.present.append(k)
    v = _slice(b, k, 0, r, "latent")
    attrs = attention_attrs(spec, d, True, None)     # the scale of the qk head dim, as before absorbing
    attrs[V_IN_K] = True
    o = b.emit(Op.ATTENTION, [q, k, v], (batch, h, seq, r), attrs, name="attention")
    with b.scope("kv_b_proj"):
        # o [B,H,S,r] x W_UV [H,r,dv] over r, batched on heads -> [H,B,S,dv]
        o = b.emit(Op.DOT, [o, w_uv], (h, batch, seq, dv),
                   {"lhs_contract": (3,), "rhs_contract": (1,), "lhs_batch": (1,), "rhs_batch": (0,)},
                   name="absorb_v")
    return b.permute(o, (1, 2, 0, 3), name="o_transpose")
