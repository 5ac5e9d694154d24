"""The blocks of a transformer layer, built as canonical IR: norms, attention, rotary, dense MLP.

Each block emits what the torch frontend lowers the matching Hugging Face module to, where that
decides a count: projections are ``DOT`` nodes on ``[out, in]`` weights (torch's ``aten.linear``),
attention is one fused ``ATTENTION`` node in the ``bhsd`` layout the frontend gives SDPA, with the
causal attribute set. Elsewhere it prefers the canonical op to the decomposition an export happens
to contain (one ``RMS_NORM`` rather than ``pow, mean, add, rsqrt, mul, mul``; one ``GELU``), so
elementwise and normalization counts follow the cost rules' per-op conventions rather than an
exporter's spelling. Grouped-query attention passes k and v with ``kv_heads`` heads, as a fused
GQA kernel reads them; the attention rule counts over the query heads either way. Attention-side
switches of the families (a layer's sliding window, Gemma's soft-capping and softmax scale, Qwen3's
and Gemma-3's q/k norms) are attributes or small nodes here; latent attention is :mod:`.mla`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..ir import CAUSAL, WINDOW, DType, Op, Value, ValueKind
from ..ir.dims import Dim, dim_add
from .graph_builder import GraphBuilder
from .spec import TransformerSpec

__all__ = ["Cache", "norm", "rotary_tables", "apply_rotary", "heads_view", "attention", "attention_attrs",
           "append_cache", "mlp", "activation", "dropout", "causal_mask"]

_ACTIVATION_OPS = {"gelu": (Op.GELU, {}), "gelu_tanh": (Op.GELU, {"approximate": "tanh"}),
                   "silu": (Op.SILU, {}), "relu": (Op.RELU, {})}


def norm(b: GraphBuilder, spec: TransformerSpec, x: Value, name: str, eps: float = 1e-5) -> Value:
    """RMS or layer norm over the last dim (the hidden one, or a head's, or a latent's), with its scale
    (and shift) as weights of module ``name``."""
    op = Op.RMS_NORM if spec.norm == "rms" else Op.LAYER_NORM
    size = x.shape[-1]
    with b.scope(name):
        ins = [x, b.weight("weight", (size,))]
        if spec.has_norm_bias:
            ins.append(b.weight("bias", (size,)))
        return b.emit(op, ins, x.shape, {"axis": x.type.rank - 1, "eps": eps}, name=f"{spec.norm}_norm")


def dropout(b: GraphBuilder, x: Value, p: float, name: str = "dropout") -> Value:
    """Training-mode dropout as the torch frontend lowers it: a Bernoulli mask and a multiply."""
    if not p:
        return x
    mask = b.emit(Op.RANDOM, [], x.shape, {"distribution": "bernoulli", "p": p}, name=f"{name}_mask",
                  dtype=DType.BOOL)
    return b.binary(Op.MUL, x, mask, name=name)


def activation(b: GraphBuilder, kind: str, x: Value) -> Value:
    op, attrs = _ACTIVATION_OPS[kind]
    with b.scope("act_fn"):
        return b.unary(op, x, attrs, name=kind)


def rotary_tables(b: GraphBuilder, spec: TransformerSpec, seq: Dim, prefix: str = "") -> tuple[Value, Value]:
    """cos and sin tables ``[seq, rope_dim]``, computed once per forward as ``model.rotary_emb`` does.

    ``inv_freq`` is a buffer (not a parameter, as in Hugging Face); positions are ``0..seq-1``.
    ``prefix`` names a second set (Gemma-3's local layers rotate with another base).
    """
    dim = spec.rope_dim
    half = dim // 2
    with b.scope("rotary_emb"):
        inv_freq = b.weight(f"{prefix}inv_freq", (half,), kind=ValueKind.BUFFER, dtype=DType.FP32)
        pos = b.emit(Op.IOTA, [], (seq, 1), {"role": "positions"}, name="positions", dtype=DType.FP32)
        freqs = b.emit(Op.MUL, [pos, inv_freq], (seq, half), name="freqs", dtype=DType.FP32)
        emb = b.emit(Op.CONCAT, [freqs, freqs], (seq, dim), {"axis": 1}, name="cat", dtype=DType.FP32)
        tables = []
        for op in (Op.COS, Op.SIN):
            t = b.unary(op, emb, name=op.value)
            if b.dtype is not DType.FP32:
                t = b.emit(Op.CAST, [t], t.shape, {"to": b.dtype.value}, name=f"{op.value}_cast")
            tables.append(t)
    return tables[0], tables[1]


def apply_rotary(b: GraphBuilder, x: Value, cos: Value, sin: Value, which: str) -> Value:
    """``x*cos + rotate_half(x)*sin`` (rotate_half's slices and negation are folded into the sin term).

    The tables hold the ``seq`` new positions (``past .. past+seq-1`` with a cache), so they are
    ``[seq, head_dim]`` whatever the cache length."""
    a = b.binary(Op.MUL, x, cos, name=f"{which}_rope_cos")
    s = b.binary(Op.MUL, x, sin, name=f"{which}_rope_sin")
    return b.binary(Op.ADD, a, s, name=f"{which}_rope")


def heads_view(b: GraphBuilder, x: Value, heads: int, head_dim: int, which: str) -> Value:
    """``[B, S, H*D] -> [B, H, S, D]``: a view and a transpose, as the Hugging Face modules do."""
    batch, seq = x.shape[0], x.shape[1]
    y = b.reshape(x, (batch, seq, heads, head_dim), name=f"{which}_view")
    return b.permute(y, (0, 2, 1, 3), name=f"{which}_transpose")


def attention(b: GraphBuilder, spec: TransformerSpec, x: Value, rope: tuple[Value, Value] | None,
              cache: Cache | None = None, window: int | None = None, eps: float = 1e-5) -> Value:
    """Self-attention in module ``self_attn``: q/k/v projections, (q/k norms,) rotary, fused attention, o_proj.

    With a ``cache`` the new keys and values are appended to the past ones (``[B, kv_heads, past, D]``
    inputs), attention reads ``past + seq`` keys, and the appended tensors join ``cache.present``.
    ``window`` is the layer's sliding window (the node's :data:`~narrowpipe.ir.WINDOW`).
    """
    batch, seq = x.shape[0], x.shape[1]
    hq, hk, d, dv = spec.heads, spec.kv_heads, spec.head_dim, spec.value_dim
    with b.scope("self_attn"):
        q = heads_view(b, b.linear(x, hq * d, "q_proj", bias=spec.attn_bias), hq, d, "q")
        k = heads_view(b, b.linear(x, hk * d, "k_proj", bias=spec.attn_bias), hk, d, "k")
        v = heads_view(b, b.linear(x, hk * dv, "v_proj", bias=spec.attn_bias), hk, dv, "v")
        if spec.qk_norm:
            q, k = norm(b, spec, q, "q_norm", eps), norm(b, spec, k, "k_norm", eps)
        if rope is not None:
            q = apply_rotary(b, q, *rope, "q")
            k = apply_rotary(b, k, *rope, "k")
        if cache is not None:
            assert cache.value is not None
            k, v = append_cache(b, cache.key, k, "k"), append_cache(b, cache.value, v, "v")
            cache.present.extend([k, v])
        if spec.attention == "eager":
            o = _eager_attention(b, spec, q, k, v)
        else:
            o = b.emit(Op.ATTENTION, [q, k, v], (batch, hq, seq, dv), attention_attrs(spec, d, hk != hq, window),
                       name="attention")
        o = b.permute(o, (0, 2, 1, 3), name="o_transpose")
        o = b.reshape(o, (batch, seq, hq * dv), name="o_view")
        return dropout(b, b.linear(o, spec.hidden, "o_proj", bias=spec.out_bias), spec.dropout, "resid_dropout")


def _eager_attention(b: GraphBuilder, spec: TransformerSpec, q: Value, k: Value, v: Value) -> Value:
    """``softmax(QK^T * scale + causal mask) V`` as separate ops (what eager PyTorch and Megatron
    without FlashAttention run, and what the torch frontend lowers HF's eager attention to); grouped
    keys and values are broadcast to the query heads by views (HF's ``repeat_kv``). The scale and
    Gemma-2's soft-cap are those of the fused node (:func:`attention_attrs`); a window is not built
    here (the spec refuses eager attention with one)."""
    batch, _, seq, _ = q.shape
    hq, d, dv = spec.heads, spec.head_dim, spec.value_dim
    k, v = (_repeat_kv(b, t, hq, which) for t, which in ((k, "k"), (v, "v")))
    kv_len = k.shape[2]
    dot = {"lhs_batch": (0, 1), "rhs_batch": (0, 1), "lhs_contract": (3,)}
    s = b.emit(Op.DOT, [q, k], (batch, hq, seq, kv_len), {**dot, "rhs_contract": (3,)}, name="scores")
    s = b.emit(Op.MUL, [s], s.shape, {"scalar": spec.attn_scale or 1 / math.sqrt(d)}, name="scale")
    if spec.attn_softcap is not None:           # tanh(s / cap) * cap, as Gemma-2's eager attention
        s = b.emit(Op.DIV, [s], s.shape, {"scalar": spec.attn_softcap}, name="softcap_div")
        s = b.emit(Op.MUL, [b.unary(Op.TANH, s, name="softcap_tanh")], s.shape, {"scalar": spec.attn_softcap},
                   name="softcap")
    if spec.causal:
        s = b.emit(Op.ADD, [s, b.shared["causal_mask"]], s.shape, {CAUSAL: True}, name="mask")
    p = dropout(b, b.emit(Op.SOFTMAX, [s], s.shape, {"axis": 3}, name="softmax"), spec.dropout, "attn_dropout")
    return b.emit(Op.DOT, [p, v], (batch, hq, seq, dv), {**dot, "rhs_contract": (2,)}, name="context")


def causal_mask(b: GraphBuilder, seq: Dim, kv_len: Dim) -> Value:
    """``-inf`` above the diagonal, 0 elsewhere: ``[seq, kv_len]``, built once for every layer."""
    fill = b.emit(Op.FILL, [], (seq, kv_len), {"value": float("-inf")}, name="mask_fill")
    return b.emit(Op.TRIANGULAR, [fill], (seq, kv_len), {"upper": True, "diagonal": 1}, name="causal_mask")


def _repeat_kv(b: GraphBuilder, x: Value, heads: int, which: str) -> Value:
    batch, kv, length, d = x.shape
    if kv == heads:
        return x
    assert isinstance(kv, int)
    y = b.reshape(x, (batch, kv, 1, length, d), name=f"{which}_unsqueeze")
    y = b.emit(Op.EXPAND, [y], (batch, kv, heads // kv, length, d), name=f"{which}_expand", dtype=x.dtype)
    return b.reshape(y, (batch, heads, length, d), name=f"{which}_repeat")


def attention_attrs(spec: TransformerSpec, qk_dim: int, grouped: bool, window: int | None) -> dict[str, object]:
    """The fused attention node's attributes: layout, causality, softmax scale, GQA, window, soft-cap."""
    attrs: dict[str, object] = {"layout": "bhsd", CAUSAL: spec.causal,
                                "scale": spec.attn_scale or 1 / math.sqrt(qk_dim), "dropout": spec.dropout}
    if grouped:
        attrs["enable_gqa"] = True
    if window is not None:
        attrs[WINDOW] = window
    if spec.attn_softcap is not None:
        attrs["softcap"] = spec.attn_softcap     # tanh(s / cap) * cap on each score (Gemma-2)
    return attrs


@dataclass
class Cache:
    """One layer's KV cache: the past keys and values read, and the present ones the layer returns
    (``value`` None: one tensor holds both, absorbed latent attention's ``[latent | k_rot]`` rows)."""

    key: Value
    value: Value | None
    present: list[Value] = field(default_factory=list)


def append_cache(b: GraphBuilder, past: Value, new: Value, which: str) -> Value:
    """``cat([past, new], dim=2)``: what a dynamic cache's update returns to attention."""
    shape = (*new.shape[:2], dim_add(past.shape[2], new.shape[2]), new.shape[3])
    return b.emit(Op.CONCAT, [past, new], shape, {"axis": 2}, name=f"{which}_cache", dtype=new.dtype)


def mlp(b: GraphBuilder, spec: TransformerSpec, x: Value, ffn: int | None = None, name: str = "mlp") -> Value:
    """A dense MLP in module ``name`` with ``ffn`` (default ``spec.ffn``) hidden units:
    ``down(act(gate(x)) * up(x))`` when gated, else ``down(act(up(x)))``."""
    width = ffn or spec.ffn
    with b.scope(name):
        up = b.linear(x, width, "up_proj", bias=spec.mlp_bias)
        if spec.gated_mlp:
            gate = activation(b, spec.activation, b.linear(x, width, "gate_proj", bias=spec.mlp_bias))
            h = b.binary(Op.MUL, gate, up, name="gate_mul")
        else:
            h = activation(b, spec.activation, up)
        return b.linear(h, spec.hidden, "down_proj", bias=spec.mlp_bias)
