"""Sliding-window masks that Hugging Face models materialise are recognised with their window.

References: transformers' own mask (``masking_utils.create_sliding_window_causal_mask``, the code every
windowed model calls), evaluated here at a length past the window and compared with the band the IR's
``window`` attribute means (query ``q`` sees keys ``q - window < k <= q``: ``ir/attention.py``); the
model configs' ``sliding_window`` and ``layer_types``; hand counts of 128 x 128 attention blocks.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
masking_utils = pytest.importorskip("transformers.masking_utils")

import narrowpipe  # noqa: E402
from narrowpipe.frontends.mask_pattern import Band, agreed_band, causal_band  # noqa: E402
from narrowpipe.ir import CAUSAL, WINDOW, Op  # noqa: E402

F = torch.nn.functional


class _HfMaskAttention(torch.nn.Module):
    """Attention over transformers' sliding-window causal mask: SDPA handed the mask (``sdpa``: a
    boolean mask), or eager attention adding it before the softmax (``eager``: an additive mask), as
    the models' ``sdpa_attention_forward`` and ``eager_attention_forward`` do."""

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config

    def forward(self, q, x):
        make = masking_utils.create_causal_mask if self.config.sliding_window is None else \
            masking_utils.create_sliding_window_causal_mask
        mask = make(self.config, x, None, None, allow_is_causal_skip=False)
        if self.config._attn_implementation == "sdpa":
            return F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
        scores = q @ q.transpose(-1, -2) * q.shape[-1] ** -0.5 + mask
        return torch.softmax(scores, dim=-1) @ q


def _config(window: int | None, impl: str):
    config = transformers.MistralConfig(hidden_size=32, num_attention_heads=2, sliding_window=window)
    config._attn_implementation = impl
    return config


def _export(window: int | None, impl: str, heads: int = 2, head_dim: int = 8, device: str = "cpu"):
    q = torch.zeros(2, heads, 16, head_dim, device=device)
    x = torch.zeros(2, 16, 32, device=device)
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=1 << 20)
    dims = {"q": {0: batch, 2: seq}, "x": {0: batch, 1: seq}}
    return narrowpipe.from_torch(_HfMaskAttention(_config(window, impl)), (q, x), dynamic_shapes=dims)


def _hf_allowed(window: int, impl: str, seq: int) -> np.ndarray:
    """transformers' mask at ``seq`` tokens, as the positions it lets attend."""
    mask = masking_utils.create_sliding_window_causal_mask(_config(window, impl), torch.zeros(1, seq, 32), None, None,
                                                           allow_is_causal_skip=False)
    m = mask[0, 0].numpy()
    return m if m.dtype == np.bool_ else m == 0


def _ir_band(window: int, seq: int) -> np.ndarray:
    """What an attention node with ``window`` lets attend (ir/attention.py), written out by hand."""
    q, k = np.arange(seq)[:, None], np.arange(seq)[None, :]
    return (k <= q) & (k > q - window)


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize("window", [4, 64])
def test_the_window_is_the_one_transformers_masks_with(window: int, impl: str) -> None:
    g = _export(window, impl)
    if impl == "sdpa":
        (node,) = [n for n in g.nodes if n.op is Op.ATTENTION]
    else:   # eager attention: the mask step feeding the softmax carries what the fused kernel reads
        (node,) = [n for n in g.nodes if n.attrs.get(CAUSAL)]
        assert node.op is Op.ADD
    assert node.attrs[CAUSAL] is True and node.attrs[WINDOW] == window
    for seq in (window + 3, 3 * window):
        assert np.array_equal(_hf_allowed(window, impl, seq), _ir_band(node.attrs[WINDOW], seq))


def test_a_window_too_long_to_probe_stays_plain_causal() -> None:
    """Window 100,000: a probe past it would hold a 2 x 100,001^2 mask, over the 2^26-element bound."""
    (node,) = [n for n in _export(100_000, "sdpa").nodes if n.op is Op.ATTENTION]
    assert node.attrs[CAUSAL] is True and WINDOW not in node.attrs


def _tiny_lm(cls, config, impl: str):
    config._attn_implementation = impl
    with torch.device("meta"):
        model = cls(config).eval()
    dim = {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=1024)}
    kwargs = {"input_ids": torch.zeros(2, 16, dtype=torch.long, device="meta"), "use_cache": False}
    return narrowpipe.from_torch(model, (), kwargs, dynamic_shapes={"input_ids": dim, "use_cache": None})


def test_gemma2_sliding_layers_get_the_window_and_full_layers_none() -> None:
    config = transformers.Gemma2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, vocab_size=64,
                                       num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=16)
    expected = [16 if t == "sliding_attention" else None for t in config.layer_types]
    assert expected == [16, None]
    tagged = [n for n in _tiny_lm(transformers.Gemma2ForCausalLM, config, "eager").nodes if n.attrs.get(CAUSAL)]
    assert [n.attrs.get(WINDOW) for n in tagged] == expected


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_h100_runs_the_hand_counted_blocks_of_the_window(impl: str) -> None:
    """4,096 tokens, W = 1,024, 128 x 128 blocks: query block m needs key blocks m - 8 .. m (9 from
    m = 8 on, m + 1 below): 36 + 24 x 9 = 252 of the causal kernel's 32 x 33 / 2 = 528. FLOPs stay
    the full count (4 B H S^2 d), as torch's FlopCounterMode counts a masked SDPA."""
    runs = []
    for window in (1024, None):
        g = _export(window, impl, heads=32, head_dim=128, device="meta")
        r = narrowpipe.analyze(g, "h100", dims={"batch": 1, "seq": 4096})
        runs.append(max(r.timeline, key=lambda k: k.flops))   # the attention kernel (eager: fused at its QK^T)
    windowed, causal = runs
    if impl == "sdpa":
        assert windowed.flops == causal.flops == 4 * 32 * 4096 ** 2 * 128
    assert windowed.executed_flops / causal.executed_flops == pytest.approx(252 / 528, rel=1e-9)


def test_the_band_of_hand_built_masks() -> None:
    keys = np.arange(9)[None, :]
    pos = np.arange(6)[:, None] + 3                                # 6 queries after 3 cached keys
    band = (keys <= pos) & (keys > pos - 4)
    assert causal_band(band) == Band(4, 9)
    assert causal_band(np.pad(band, ((0, 0), (0, 3)))) is None      # not bottom-right aligned
    assert causal_band(band & (keys != 5)) is None                  # a hole in the band
    assert causal_band(np.where(keys <= pos, 0.0, -np.inf)) == Band(None, 9)
    assert causal_band(np.where(keys <= pos, 0.5, -np.inf)) is None  # a bias, not a mask
    # plain at 5 and 7 keys agrees with a window of 8 seen at 9; a window of 6 seen at 9 does not
    assert agreed_band([Band(None, 5), Band(None, 7), Band(8, 9)]) == Band(8, 7)
    assert agreed_band([Band(None, 5), Band(None, 7), Band(6, 9)]) is None
    assert agreed_band([Band(4, 5), Band(3, 7)]) is None
