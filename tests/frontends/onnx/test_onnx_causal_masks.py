"""Causal masks that ONNX exports materialise are recognised, and only those (the ONNX twin of
``tests/torch/test_causal_masks.py``).

Reference: which masks are causal is known by construction (hand-built graphs: exactly the lower
triangle, at every size tried) and independently for real models (decoder LMs are causal, BERT is
not). The hand-built tests need numpy and onnx only; the real-model ones export tiny transformers
models with both exporters (shared with ``test_transformers.py`` through the ``exported`` fixture).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
from narrowpipe.frontends.mask_pattern import MAX_NODES
from narrowpipe.frontends.onnx import masks as onnx_masks
from narrowpipe.ir import CAUSAL, WINDOW, Op

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
NEG_INF = float("-inf")


def _const(name: str, value: object, dtype: int = I64) -> TensorProto:
    arr = np.asarray(value, dtype=helper.tensor_dtype_to_np_dtype(dtype))
    return numpy_helper.from_array(arr, name)


#: initializers the mask builders use: scalars 0, 1, 2, -inf, 0.0 and the axes of Unsqueeze
_INITS = [_const("zero", 0), _const("one", 1), _const("two", 2), _const("axis0", [0]), _const("axis1", [1]),
          _const("neg_inf", NEG_INF, F), _const("fzero", 0.0, F), _const("idx2", 2)]


def _positions(src: str) -> list:
    """``q_idx`` [n, 1] and ``kv_idx`` [1, n] from the third dim of ``src`` (its ``seq``)."""
    return [
        helper.make_node("Shape", [src], ["shape"]),
        helper.make_node("Gather", ["shape", "idx2"], ["n"], axis=0),
        helper.make_node("Range", ["zero", "n", "one"], ["i"]),
        helper.make_node("Unsqueeze", ["i", "axis1"], ["q_idx"]),
        helper.make_node("Unsqueeze", ["i", "axis0"], ["kv_idx"]),
    ]


def _mask_nodes(kind: str, src: str = "scores") -> list:
    """Nodes computing ``mask`` (bool: True attends; float: additive) from ``src``'s sizes."""
    pos = _positions(src)
    if kind == "causal":
        return pos + [helper.make_node("LessOrEqual", ["kv_idx", "q_idx"], ["mask"])]
    if kind == "upper":
        return pos + [helper.make_node("GreaterOrEqual", ["kv_idx", "q_idx"], ["mask"])]
    if kind == "window":   # a causal sliding window of 2: a band of the triangle
        return pos + [
            helper.make_node("LessOrEqual", ["kv_idx", "q_idx"], ["tri"]),
            helper.make_node("Sub", ["q_idx", "kv_idx"], ["dist"]),
            helper.make_node("Less", ["dist", "two"], ["near"]),
            helper.make_node("And", ["tri", "near"], ["mask"]),
        ]
    if kind in ("where_additive", "upper_additive"):   # Hugging Face's additive mask: Where(allowed, 0, -inf)
        compare = "LessOrEqual" if kind == "where_additive" else "GreaterOrEqual"
        return pos + [
            helper.make_node(compare, ["kv_idx", "q_idx"], ["allowed"]),
            helper.make_node("Where", ["allowed", "fzero", "neg_inf"], ["mask"]),
        ]
    if kind == "trilu_additive":   # -inf strictly above the diagonal
        return [
            helper.make_node("Shape", [src], ["shape"]),
            helper.make_node("Gather", ["shape", "idx2"], ["n"], axis=0),
            helper.make_node("Unsqueeze", ["n", "axis0"], ["n1"]),
            helper.make_node("Concat", ["n1", "n1"], ["nn"], axis=0),
            helper.make_node("ConstantOfShape", ["nn"], ["full"],
                             value=helper.make_tensor("v", F, [1], [NEG_INF])),
            helper.make_node("Trilu", ["full", "one"], ["mask"], upper=1),
        ]
    if kind == "alibi":            # -|q - kv|: a bias, not a mask
        return pos + [
            helper.make_node("Sub", ["q_idx", "kv_idx"], ["d"]),
            helper.make_node("Abs", ["d"], ["ad"]),
            helper.make_node("Cast", ["ad"], ["fd"], to=F),
            helper.make_node("Neg", ["fd"], ["mask"]),
        ]
    if kind == "data":             # the causal triangle, ANDed with a test of a float input's values
        return pos + [
            helper.make_node("LessOrEqual", ["kv_idx", "q_idx"], ["tri"]),
            helper.make_node("Greater", [src, "fzero"], ["positive"]),
            helper.make_node("And", ["tri", "positive"], ["mask"]),
        ]
    raise KeyError(kind)


def _model(nodes: list, inputs: list, outputs: list, inits: list | None = None, opset: int = 17):
    g = helper.make_graph(nodes, "masks", inputs, outputs, (inits or []) + _INITS)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _scores_in() -> list:
    return [helper.make_tensor_value_info("scores", F, ["batch", 2, "seq", "seq"])]


def _eager(kind: str, step: str = "auto"):
    """scores -> (mask step) -> Softmax, the mask built by :func:`_mask_nodes`."""
    nodes = _mask_nodes(kind)
    if step == "auto":
        step = "where" if kind in ("causal", "upper", "window", "data") else "add"
    if step == "where":
        nodes.append(helper.make_node("Where", ["mask", "scores", "neg_inf"], ["masked"]))
    elif step == "masked_fill":   # Where(blocked, -inf, scores), blocked = not mask
        nodes += [helper.make_node("Not", ["mask"], ["blocked"]),
                  helper.make_node("Where", ["blocked", "neg_inf", "scores"], ["masked"])]
    else:
        nodes.append(helper.make_node("Add", ["scores", "mask"], ["masked"]))
    nodes.append(helper.make_node("Softmax", ["masked"], ["probs"], axis=-1))
    return _model(nodes, _scores_in(), [helper.make_tensor_value_info("probs", F, None)])


def _tagged(graph) -> list:
    return [n for n in graph.nodes if n.attrs.get(CAUSAL)]


# -- hand-built eager attention ------------------------------------------------------------------

@pytest.mark.parametrize("kind,step,causal", [
    ("causal", "where", True), ("where_additive", "add", True), ("trilu_additive", "add", True),
    ("causal", "masked_fill", True), ("upper", "where", False), ("window", "where", True),
    ("alibi", "add", False), ("data", "where", False), ("upper", "masked_fill", False),
])
def test_hand_built_eager_masks(kind: str, step: str, causal: bool) -> None:
    g = narrowpipe.load(_eager(kind, step))
    tagged = _tagged(g)
    assert len(tagged) == (1 if causal else 0)
    assert all(n.op is (Op.WHERE if step != "add" else Op.ADD) for n in tagged)
    assert all(n.attrs.get(WINDOW) == (2 if kind == "window" else None) for n in tagged)


def test_mask_evaluation_leaks_no_numpy_warnings() -> None:
    """T5's relative-position bias takes log(|q - kv|), -inf on the diagonal, and casts it to int:
    numpy's divide-by-zero and invalid-cast warnings are expected there and must not reach the user
    (the bias is not a causal mask, so nothing is tagged)."""
    nodes = _positions("scores") + [
        helper.make_node("Sub", ["q_idx", "kv_idx"], ["d"]),
        helper.make_node("Abs", ["d"], ["ad"]),
        helper.make_node("Cast", ["ad"], ["fd"], to=F),
        helper.make_node("Log", ["fd"], ["lg"]),
        helper.make_node("Cast", ["lg"], ["bucket"], to=I64),
        helper.make_node("Cast", ["bucket"], ["mask"], to=F),
        helper.make_node("Add", ["scores", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
    ]
    model = _model(nodes, _scores_in(), [helper.make_tensor_value_info("probs", F, None)])
    with warnings.catch_warnings(record=True) as caught:   # recorded, not raised: the walk catches errors
        warnings.simplefilter("always")
        g = narrowpipe.load(model)
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []
    assert not _tagged(g)


def test_mask_that_feeds_no_softmax_is_not_tagged() -> None:
    nodes = _mask_nodes("causal") + [helper.make_node("Where", ["mask", "scores", "neg_inf"], ["masked"]),
                                     helper.make_node("Relu", ["masked"], ["out"])]
    g = narrowpipe.load(_model(nodes, _scores_in(), [helper.make_tensor_value_info("out", F, None)]))
    assert not _tagged(g)


def _buffer_model(external: bool):
    """Old GPT-2 exports: a stored lower-triangle buffer sliced to the sequence length."""
    buf = numpy_helper.from_array(np.tril(np.ones((1, 1, 16, 16), dtype=bool)), "bias")
    if external:
        buf.ClearField("raw_data")
        buf.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "missing.bin"), ("offset", "0"), ("length", "256")):
            e = buf.external_data.add()
            e.key, e.value = k, v
    nodes = [
        helper.make_node("Shape", ["scores"], ["shape"]),
        helper.make_node("Gather", ["shape", "idx2"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axis0"], ["n1"]),
        helper.make_node("Concat", ["n1", "n1"], ["ends"], axis=0),
        helper.make_node("Concat", ["axis0", "axis0"], ["starts"], axis=0),
        helper.make_node("Concat", ["idx2_1d", "idx3_1d"], ["axes"], axis=0),
        helper.make_node("Slice", ["bias", "starts", "ends", "axes"], ["mask"]),
        helper.make_node("Where", ["mask", "scores", "neg_inf"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
    ]
    return _model(nodes, _scores_in(), [helper.make_tensor_value_info("probs", F, None)],
                  [buf, _const("idx2_1d", [2]), _const("idx3_1d", [3])])


@pytest.mark.parametrize("external,causal", [(False, True), (True, False)])
def test_stored_mask_buffer_needs_its_data(external: bool, causal: bool) -> None:
    g = narrowpipe.load(_buffer_model(external))
    assert len(_tagged(g)) == (1 if causal else 0)


def test_shared_mask_is_evaluated_once_and_every_layer_tagged(monkeypatch) -> None:
    calls: list[str] = []
    original = onnx_masks.CausalMasks._evaluate

    def counting(self, name):
        calls.append(name)
        return original(self, name)

    monkeypatch.setattr(onnx_masks.CausalMasks, "_evaluate", counting)
    nodes = _mask_nodes("where_additive")
    x = "scores"
    for layer in range(4):
        nodes += [helper.make_node("Add", [x, "mask"], [f"m{layer}"]),
                  helper.make_node("Softmax", [f"m{layer}"], [f"p{layer}"], axis=-1)]
        x = f"p{layer}"
    g = narrowpipe.load(_model(nodes, _scores_in(), [helper.make_tensor_value_info(x, F, None)]))
    assert len(_tagged(g)) == 4
    assert calls.count("mask") == 1


def test_oversized_mask_subgraph_is_not_evaluated() -> None:
    nodes = _mask_nodes("causal")
    nodes[-1].output[0] = "mask0"
    for k in range(MAX_NODES):
        nodes.append(helper.make_node("Identity", [f"mask{k}"], [f"mask{k + 1}"]))
    nodes += [helper.make_node("Where", [f"mask{MAX_NODES}", "scores", "neg_inf"], ["masked"]),
              helper.make_node("Softmax", ["masked"], ["probs"], axis=-1)]
    g = narrowpipe.load(_model(nodes, _scores_in(), [helper.make_tensor_value_info("probs", F, None)]))
    assert not _tagged(g)


def test_huge_mask_is_not_evaluated() -> None:
    """A fixed 8192 x 8192 triangle (67M elements) is causal, but too large to evaluate here: the
    size guard refuses it from its IR type before anything is allocated."""
    nodes = [
        helper.make_node("ConstantOfShape", ["dims"], ["full"], value=helper.make_tensor("v", F, [1], [NEG_INF])),
        helper.make_node("Trilu", ["full", "one"], ["mask"], upper=1),
        helper.make_node("Add", ["scores", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
    ]
    scores = [helper.make_tensor_value_info("scores", F, ["batch", 2, 8192, 8192])]
    g = narrowpipe.load(_model(nodes, scores, [helper.make_tensor_value_info("probs", F, None)],
                               [_const("dims", [8192, 8192])]))
    assert not _tagged(g)


def test_integer_and_position_inputs_are_filled() -> None:
    """A padding term from an int ``attention_mask`` input (ones: no padding) and a position input
    (an arange) combine with the causal term; the mask is still exactly the lower triangle."""
    nodes = [
        helper.make_node("Unsqueeze", ["position_ids", "axis1"], ["q_idx"]),     # [1, 1, seq]
        helper.make_node("Transpose", ["q_idx"], ["q_col"], perm=[0, 2, 1]),      # [1, seq, 1]
        helper.make_node("Unsqueeze", ["position_ids", "axis1"], ["kv_row"]),    # [1, 1, seq]
        helper.make_node("LessOrEqual", ["kv_row", "q_col"], ["tri"]),           # [1, seq, seq]
        helper.make_node("Cast", ["attention_mask"], ["pad"], to=B),
        helper.make_node("Unsqueeze", ["pad", "axis1"], ["pad3"]),               # [batch, 1, seq]
        helper.make_node("And", ["tri", "pad3"], ["mask3"]),
        helper.make_node("Unsqueeze", ["mask3", "axis1"], ["mask"]),             # [batch, 1, seq, seq]
        helper.make_node("Where", ["mask", "scores", "neg_inf"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
    ]
    inputs = _scores_in() + [helper.make_tensor_value_info("attention_mask", I64, ["batch", "seq"]),
                             helper.make_tensor_value_info("position_ids", I64, [1, "seq"])]
    g = narrowpipe.load(_model(nodes, inputs, [helper.make_tensor_value_info("probs", F, None)]))
    assert len(_tagged(g)) == 1


# -- fused attention ops ---------------------------------------------------------------------------

def _attention_model(kind: str | None, is_causal: int = 0):
    """ONNX (opset 23) Attention over [batch, heads, seq, dim] with the mask built from q's sizes."""
    qkv = [helper.make_tensor_value_info(n, F, ["batch", 2, "seq", 8]) for n in ("q", "k", "v")]
    nodes = _mask_nodes(kind, src="q") if kind else []
    nodes.append(helper.make_node("Attention", ["q", "k", "v"] + (["mask"] if kind else []), ["out"],
                                  is_causal=is_causal))
    return _model(nodes, qkv, [helper.make_tensor_value_info("out", F, None)], opset=23)


@pytest.mark.parametrize("kind,causal", [("causal", True), ("where_additive", True), ("trilu_additive", True),
                                         ("upper", False), ("window", True), ("alibi", False)])
def test_opset23_attention_mask(kind: str, causal: bool) -> None:
    g = narrowpipe.load(_attention_model(kind))
    (attn,) = [n for n in g.nodes if n.op is Op.ATTENTION]
    assert attn.attrs["causal"] is causal
    assert attn.attrs.get(WINDOW) == (2 if kind == "window" else None)
    assert attn.attrs.get("causal_from") == ("mask" if causal else None)
    assert len(attn.inputs) == 4        # the mask stays an input: its bytes are still read


def test_opset23_attention_flag_is_kept() -> None:
    g = narrowpipe.load(_attention_model(None, is_causal=1))
    (attn,) = [n for n in g.nodes if n.op is Op.ATTENTION]
    assert attn.attrs["causal"] is True and "causal_from" not in attn.attrs


@pytest.mark.parametrize("kind,causal", [("where_additive", True), ("alibi", False)])
def test_contrib_multihead_attention_bias(kind: str, causal: bool) -> None:
    """com.microsoft MultiHeadAttention's ``attention_bias`` [1, 1, seq, seq] (input 5)."""
    qkv = [helper.make_tensor_value_info(n, F, ["batch", "seq", 16]) for n in ("q", "k", "v")]
    nodes = [helper.make_node("Unsqueeze", ["q", "axis0"], ["q4"])]   # [1, batch, seq, 16]: seq is dim 2
    nodes += _mask_nodes(kind, src="q4")
    nodes += [helper.make_node("Unsqueeze", ["mask", "axis0"], ["mask3"]),
              helper.make_node("Unsqueeze", ["mask3", "axis0"], ["bias"]),
              helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "", "bias"], ["out"],
                               domain="com.microsoft", num_heads=2)]
    g = helper.make_graph(nodes, "mha", qkv, [helper.make_tensor_value_info("out", F, None)], _INITS)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    (attn,) = [n for n in narrowpipe.load(model).nodes if n.op is Op.ATTENTION]
    assert attn.attrs["causal"] is causal


def test_causal_mask_halves_gpu_attention_time() -> None:
    """The flag reaches the GPU model: FlashAttention skips the blocks above the diagonal."""
    def time_s(kind: str) -> float:
        qkv = [helper.make_tensor_value_info(n, TensorProto.FLOAT16, [1, 32, "seq", 128]) for n in ("q", "k", "v")]
        nodes = _mask_nodes(kind, src="q") + [helper.make_node("Attention", ["q", "k", "v", "mask"], ["out"])]
        model = _model(nodes, qkv, [helper.make_tensor_value_info("out", TensorProto.FLOAT16, None)], opset=23)
        return narrowpipe.analyze(narrowpipe.load(model), target="h100", seq=4096).time_s
    assert 0.45 < time_s("causal") / time_s("upper") < 0.6


def test_causal_mask_step_halves_gpu_eager_attention_time() -> None:
    """Eager attention (MatMul, mask add, Softmax, MatMul) is fused into one attention kernel,
    causal when its mask add carries ``causal_mask``; the two masks cost the same to build."""
    def time_s(kind: str) -> float:
        h = TensorProto.FLOAT16
        qkv = [helper.make_tensor_value_info(n, h, [1, 32, "seq", 128]) for n in ("q", "k", "v")]
        nodes = _mask_nodes(kind, src="q") + [
            helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
            helper.make_node("MatMul", ["q", "kt"], ["s"]),
            helper.make_node("Cast", ["mask"], ["mask16"], to=h),
            helper.make_node("Add", ["s", "mask16"], ["masked"]),
            helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
            helper.make_node("MatMul", ["p", "v"], ["out"]),
        ]
        g = narrowpipe.load(_model(nodes, qkv, [helper.make_tensor_value_info("out", h, None)]))
        assert len(_tagged(g)) == (kind == "where_additive")
        return narrowpipe.analyze(g, target="h100", seq=4096).time_s
    assert 0.45 < time_s("where_additive") / time_s("upper_additive") < 0.6


# -- real models ----------------------------------------------------------------------------------

#: BERT's dynamo export (its mask evaluates too, to all zeros) is left out to keep this file near 30 s
REAL = [("gpt2", "legacy", True), ("gpt2", "dynamo", True), ("llama", "legacy", True), ("llama", "dynamo", True),
        ("bert", "legacy", False)]


@pytest.mark.parametrize("name,exporter,causal", REAL, ids=[f"{n}-{e}" for n, e, _ in REAL])
def test_real_model_eager_masks(exported, name: str, exporter: str, causal: bool) -> None:
    """Tiny transformers models (2 layers, eager attention, ``use_cache=False``, an explicit
    ``attention_mask`` input): each decoder layer's mask add is tagged, no BERT node is."""
    path, _ = exported(name, exporter)
    g = narrowpipe.load(path)
    tagged = _tagged(g)
    assert len(tagged) == (2 if causal else 0)
    assert all(n.op in (Op.ADD, Op.WHERE) for n in tagged)
    assert not any(n.attrs.get("causal") for n in g.nodes if n.op is Op.ATTENTION)


def test_real_model_opset23_attention(tmp_path) -> None:
    """Llama with SDPA attention, exported by the dynamo exporter at opset 23: each layer is one
    ``Attention`` op fed the materialised mask (``is_causal=0``), proved causal from it."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import warnings

    import onnx_models  # benchmarks/, put on the path by conftest

    wrapped = onnx_models._wrap(onnx_models.build("llama", "tiny", "sdpa"), "lm")
    dim = {0: torch.export.Dim("batch", max=4096), 1: torch.export.Dim("sequence", max=8192)}
    path = str(tmp_path / "llama_sdpa_opset23.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(wrapped, onnx_models.example_inputs("llama"), path, dynamo=True, opset_version=23,
                          input_names=["input_ids", "attention_mask"], external_data=True,
                          dynamic_shapes={"input_ids": dim, "attention_mask": dim})
    attn = [n for n in narrowpipe.load(path).nodes if n.op is Op.ATTENTION]
    assert len(attn) == 2
    assert all(n.attrs["causal"] is True and n.attrs.get("causal_from") == "mask" for n in attn)
