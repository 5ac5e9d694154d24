"""Sliding-window masks in ONNX exports are recognised with their window (the ONNX twin of
``tests/frontends/torch/test_sliding_window_masks.py``).

References: hand-built graphs whose window is known by construction (``kv_idx > q_idx - W`` AND
``kv_idx <= q_idx``, transformers' ``sliding_window_causal_mask_function``); for a real export,
transformers' own mask (``masking_utils.create_sliding_window_causal_mask``) evaluated past the window
and compared with the band the IR's ``window`` means (query ``q`` sees keys ``q - window < k <= q``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
from narrowpipe.costmodel.eager_attention import attention_from_eager
from narrowpipe.ir import CAUSAL, WINDOW, Op

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _init(name: str, value: object, dtype: int = I64) -> TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=helper.tensor_dtype_to_np_dtype(dtype)), name)


def _window_model(window: int, seq: str = "seq", as_initializer: bool = False):
    """scores + Where(band, 0, -inf) -> Softmax, the band's width a scalar constant."""
    width = [] if as_initializer else [helper.make_node("Constant", [], ["w"], value=_init("wv", window))]
    nodes = width + [
        helper.make_node("Shape", ["scores"], ["shape"]),
        helper.make_node("Gather", ["shape", "two"], ["n"], axis=0),
        helper.make_node("Range", ["zero", "n", "one"], ["i"]),
        helper.make_node("Unsqueeze", ["i", "axis1"], ["q_idx"]),
        helper.make_node("Unsqueeze", ["i", "axis0"], ["kv_idx"]),
        helper.make_node("LessOrEqual", ["kv_idx", "q_idx"], ["causal"]),
        helper.make_node("Sub", ["q_idx", "w"], ["first"]),
        helper.make_node("Greater", ["kv_idx", "first"], ["recent"]),
        helper.make_node("And", ["causal", "recent"], ["allowed"]),
        helper.make_node("Where", ["allowed", "fzero", "neg_inf"], ["mask"]),
        helper.make_node("Add", ["scores", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
    ]
    inits = [_init("zero", 0), _init("one", 1), _init("two", 2), _init("axis0", [0]), _init("axis1", [1]),
             _init("fzero", 0.0, F), _init("neg_inf", float("-inf"), F)]
    if as_initializer:
        inits.append(_init("w", window))
    scores = [helper.make_tensor_value_info("scores", F, ["batch", 2, seq, seq])]
    g = helper.make_graph(nodes, "window", scores, [helper.make_tensor_value_info("probs", F, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _mask_step(model) -> dict:
    (step,) = [n for n in narrowpipe.load(model).nodes if n.op is Op.ADD]
    return step.attrs


@pytest.mark.parametrize("window", [4, 64])
@pytest.mark.parametrize("as_initializer", [False, True])
def test_hand_built_window_masks(window: int, as_initializer: bool) -> None:
    attrs = _mask_step(_window_model(window, as_initializer=as_initializer))
    assert attrs[CAUSAL] is True and attrs[WINDOW] == window


def test_a_window_too_long_to_probe_stays_plain_causal() -> None:
    attrs = _mask_step(_window_model(100_000))
    assert attrs[CAUSAL] is True and WINDOW not in attrs


def test_a_long_window_needs_a_sequence_dim_to_probe() -> None:
    """Dims named ``n``: no role says which to lengthen, so only the small sizes are tried."""
    attrs = _mask_step(_window_model(64, seq="n"))
    assert attrs[CAUSAL] is True and WINDOW not in attrs
    assert _mask_step(_window_model(4, seq="n"))[WINDOW] == 4


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize("window", [4, 64])
def test_legacy_export_of_transformers_window_mask(tmp_path, window: int, impl: str) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    masking_utils = pytest.importorskip("transformers.masking_utils")
    import transformers

    config = transformers.MistralConfig(hidden_size=32, num_attention_heads=2, sliding_window=window)
    config._attn_implementation = impl

    class Attention(torch.nn.Module):
        def forward(self, q, x):
            mask = masking_utils.create_sliding_window_causal_mask(config, x, None, None, allow_is_causal_skip=False)
            if mask.dtype == torch.bool:
                return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask)
            return torch.softmax(q @ q.transpose(-1, -2) + mask, dim=-1) @ q

    path = str(tmp_path / "window.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Attention(), (torch.zeros(2, 2, 16, 8), torch.zeros(2, 16, 32)), path, dynamo=False,
                          input_names=["q", "x"], opset_version=17,
                          dynamic_axes={"q": {0: "batch", 2: "sequence"}, "x": {0: "batch", 1: "sequence"}})
    graph = narrowpipe.load(path)
    (step,) = [n for n in graph.nodes if n.attrs.get(CAUSAL)]
    w = step.attrs[WINDOW]
    assert w == window
    # serving's rewrite of the eager pattern into one attention node keeps the window
    assert attention_from_eager(graph) == 1
    (attn,) = [n for n in graph.nodes if n.op is Op.ATTENTION]
    assert attn.attrs[CAUSAL] is True and attn.attrs[WINDOW] == window
    seq = 2 * window + 3
    hf = masking_utils.create_sliding_window_causal_mask(config, torch.zeros(1, seq, 32), None, None,
                                                         allow_is_causal_skip=False)[0, 0].numpy()
    q, k = np.arange(seq)[:, None], np.arange(seq)[None, :]
    assert np.array_equal(hf if hf.dtype == np.bool_ else hf == 0, (k <= q) & (k > q - w))
