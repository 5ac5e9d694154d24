"""Causal masks that exporters materialise are recognised, and only those.

Reference: which models are causal is known independently (decoder LMs are, BERT and ViT are not),
and hand-built masks pin the rule: exactly the lower triangle, at every size tried.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import narrowpipe  # noqa: E402
from narrowpipe.ir import CAUSAL, WINDOW, Op  # noqa: E402

F = torch.nn.functional


def _lm(cls, config, impl: str, attention_mask: bool = False):
    config._attn_implementation = impl
    with torch.device("meta"):
        model = cls(config).eval()
    dim = {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=256)}
    kwargs = {"input_ids": torch.zeros(2, 16, dtype=torch.long, device="meta")}
    dims = {"input_ids": dim}
    if attention_mask:
        kwargs["attention_mask"] = torch.ones(2, 16, dtype=torch.long, device="meta")
        dims["attention_mask"] = dim
    if cls is not transformers.BertModel:
        kwargs["use_cache"], dims["use_cache"] = False, None
    return narrowpipe.from_torch(model, (), kwargs, dynamic_shapes=dims)


def _llama():
    return transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, vocab_size=500)


def _gpt2():
    return transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=500, bos_token_id=0, eos_token_id=0)


def _bert():
    return transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                   intermediate_size=128, vocab_size=500)


CASES = [("llama", transformers.LlamaForCausalLM, _llama, True),
         ("gpt2", transformers.GPT2LMHeadModel, _gpt2, True),
         ("bert", transformers.BertModel, _bert, False)]


@pytest.mark.parametrize("name,cls,config,causal", CASES, ids=[c[0] for c in CASES])
def test_sdpa_masks_of_real_models(name, cls, config, causal):
    g = _lm(cls, config(), "sdpa")
    attn = [n for n in g.nodes if n.op is Op.ATTENTION]
    assert len(attn) == 2
    assert all(n.attrs["causal"] is causal for n in attn)
    assert all(n.attrs.get("causal_from") == ("mask" if causal else None) for n in attn)
    assert not any(WINDOW in n.attrs for n in attn)    # plain causal (or not causal): no window
    assert len(attn[0].inputs) == 4          # the mask stays an input: its bytes are still read


@pytest.mark.parametrize("name,cls,config,causal", CASES, ids=[c[0] for c in CASES])
def test_eager_masks_of_real_models(name, cls, config, causal):
    g = _lm(cls, config(), "eager")
    tagged = [n for n in g.nodes if n.attrs.get(CAUSAL)]
    assert len(tagged) == (2 if causal else 0)
    assert all(n.op in (Op.ADD, Op.WHERE) for n in tagged)


def test_padding_mask_input_is_assumed_dense():
    g = _lm(transformers.LlamaForCausalLM, _llama(), "sdpa", attention_mask=True)
    assert all(n.attrs["causal"] for n in g.nodes if n.op is Op.ATTENTION)


class _MaskedAttention(torch.nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, q, k, v):
        s = q.shape[-2]
        i = torch.arange(s, device=q.device)
        if self.kind == "causal":
            mask = i[None, :] <= i[:, None]
        elif self.kind == "upper":
            mask = i[None, :] >= i[:, None]
        elif self.kind == "window":                    # causal sliding window of 2: a band of the triangle
            mask = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < 2)
        elif self.kind == "additive":
            mask = torch.full((s, s), float("-inf"), device=q.device).triu(1)
        elif self.kind == "alibi":                     # a bias, not a mask
            mask = -(i[:, None] - i[None, :]).abs().to(q.dtype)
        else:                                          # from activations: data-dependent
            mask = q.sum(-1, keepdim=True) > 0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("kind,causal,window", [("causal", True, None), ("additive", True, None),
                                                ("upper", False, None), ("window", True, 2), ("alibi", False, None),
                                                ("data", False, None)])
def test_hand_built_masks(kind, causal, window):
    q = torch.randn(1, 2, 8, 16)
    seq = torch.export.Dim("seq", min=2, max=64)
    dims = {"q": {2: seq}, "k": {2: seq}, "v": {2: seq}}
    g = narrowpipe.from_torch(_MaskedAttention(kind), (q, q.clone(), q.clone()), dynamic_shapes=dims)
    (attn,) = [n for n in g.nodes if n.op is Op.ATTENTION]
    assert attn.attrs["causal"] is causal
    assert attn.attrs.get(WINDOW) == window


def test_causal_mask_halves_gpu_attention_time():
    """The flag reaches the GPU model: FlashAttention skips the blocks above the diagonal."""
    q = torch.randn(1, 32, 4096, 128, dtype=torch.bfloat16, device="meta")
    g_causal = narrowpipe.from_torch(_MaskedAttention("causal"), (q, q, q))
    g_full = narrowpipe.from_torch(_MaskedAttention("upper"), (q, q, q))
    t_causal = narrowpipe.analyze(g_causal, target="h100").time_s
    t_full = narrowpipe.analyze(g_full, target="h100").time_s
    assert 0.45 < t_causal / t_full < 0.6


class _EagerWhereAttention(torch.nn.Module):
    """Eager attention in the masked_fill/where form: ``where(mask, scores, -inf)``."""

    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v):
        s = q.shape[-2]
        i = torch.arange(s, device=q.device)
        mask = (i[None, :] <= i[:, None]) if self.causal else (i[None, :] >= i[:, None])
        scores = torch.where(mask, q @ k.transpose(-1, -2), float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


def test_eager_where_form_fuses_into_one_causal_attention_kernel():
    q = torch.randn(1, 32, 4096, 128, dtype=torch.bfloat16, device="meta")
    causal = narrowpipe.analyze(narrowpipe.from_torch(_EagerWhereAttention(True), (q, q, q)), target="h100")
    full = narrowpipe.analyze(narrowpipe.from_torch(_EagerWhereAttention(False), (q, q, q)), target="h100")
    for r in (causal, full):
        assert {row.kernel for row in r.ops if row.op in ("dot", "softmax", "where")} == {r.timing.top[0].kernel}
    assert 0.45 < causal.time_s / full.time_s < 0.6
