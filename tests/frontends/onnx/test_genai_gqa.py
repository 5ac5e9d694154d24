"""onnxruntime GenAI-style GroupQueryAttention: head attributes checked as onnxruntime checks them
(a floor division gave a silently wrong head dim), and ``local_window_size`` (onnxruntime's left
window: ``local_window_size + 1`` keys, the query's own included) carried as the IR's window with the
attention handed only the keys the window reaches. Every expected number is worked out by hand."""

from __future__ import annotations

import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.errors import FrontendError  # noqa: E402
from narrowpipe.ir import WINDOW, Op, attention_window  # noqa: E402

H = TensorProto.FLOAT16


def gqa_model(width: int = 384, past_heads: int = 2, head_dim: int = 32, rotary: bool = False,
              **attrs: object) -> onnx.ModelProto:
    """One packed-QKV GQA with a [batch, kv heads, past, head dim] cache (as the GenAI builder writes it)."""
    attrs = {"num_heads": 8, "kv_num_heads": 2, **attrs}
    attrs = {k: v for k, v in attrs.items() if v is not None}
    ins = ["qkv", "", "", "pk", "pv", "seqlens_k", "total"] + (["cos", "sin"] if rotary else [])
    node = helper.make_node("GroupQueryAttention", ins, ["out", "present_k", "present_v"], domain="com.microsoft",
                            name="gqa0", **attrs)
    cache = ["batch", past_heads, "past", head_dim]
    vi = [helper.make_tensor_value_info("qkv", H, ["batch", "seq", width]),
          helper.make_tensor_value_info("pk", H, cache), helper.make_tensor_value_info("pv", H, cache),
          helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["batch"]),
          helper.make_tensor_value_info("total", TensorProto.INT32, [])]
    if rotary:
        vi += [helper.make_tensor_value_info(n, H, [4096, head_dim // 2]) for n in ("cos", "sin")]
    g = helper.make_graph([node], "g", vi, [helper.make_tensor_value_info(o, H, None)
                                            for o in ("out", "present_k", "present_v")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("kw, says", [
    ({"num_heads": 16}, "num_heads=16, kv_num_heads=2: packed query hidden size 384 is not divisible by "
                        "num_heads + 2 * kv_num_heads = 20"),            # 384 // 20 = 19 was the head dim
    ({"kv_num_heads": 3}, "num_heads=8, kv_num_heads=3: num_heads must be a multiple of kv_num_heads"),
    ({"num_heads": 4, "kv_num_heads": 4}, "has 2 heads (kv_num_heads), the node 4"),   # 384 / 12 = 32 fits
    ({"kv_num_heads": 2.0}, "kv_num_heads=2.0 must be a positive INT"),
    ({"kv_num_heads": None}, "kv_num_heads=None must be a positive INT"),
    ({"do_rotary": 1}, "do_rotary=1 needs cos_cache and sin_cache"),
])
def test_malformed_heads_are_refused_naming_the_node(kw, says) -> None:
    with pytest.raises(FrontendError) as err:
        narrowpipe.load(gqa_model(**kw))
    assert says in str(err.value) and "'gqa0'" in str(err.value) and "GroupQueryAttention" in str(err.value)


def test_well_formed_heads_load_with_the_hand_flops() -> None:
    """8 q and 2 kv heads of 32 in a 384-wide packed projection: 4 x heads x keys x head dim per token."""
    r = narrowpipe.analyze(narrowpipe.load(gqa_model(rotary=True, do_rotary=1)), dims={"batch": 1, "seq": 1,
                                                                                       "past": 2047})
    assert r.flops_by_group["attention"] == 4 * 8 * 2048 * 32


@pytest.mark.parametrize("lws, keys", [(None, 32768), (-1, 32768), (-5, 32768), (256, 257), (0, 1)])
def test_local_window_reads_at_most_window_keys(lws, keys) -> None:
    """Decode at 32,767 cached tokens: a window of ``local_window_size + 1`` keys (0: the query's own
    key only; negative: no window, as onnxruntime's CPU kernel runs them) is what attention is handed,
    so its FLOPs (4 x 8 heads x keys x 32) and its K/V bytes (keys x 2 kv heads x 32 x 2 B each) stop
    there; the present output keeps the whole cache."""
    graph = narrowpipe.load(gqa_model(local_window_size=lws))
    att = next(n for n in graph.nodes if n.op is Op.ATTENTION)
    assert attention_window(att) == (None if lws is None or lws < 0 else lws + 1)
    assert (WINDOW in att.attrs) == (keys != 32768)
    dims = {"batch": 1, "seq": 1, "past": 32767}
    r = narrowpipe.analyze(graph, dims=dims)
    assert r.flops_by_group["attention"] == 4 * 8 * keys * 32
    from narrowpipe.costmodel.interpreter import interpret
    cost = interpret(graph, dims).costs[att]
    q_out = 2 * (8 * 32 * 2)                      # q read and the output written, 8 heads x 32, fp16
    assert cost.bytes_read + cost.bytes_written == q_out + 2 * keys * 2 * 32 * 2


def test_window_hands_prefill_queries_every_key_they_reach() -> None:
    """A 100-token chunk after 1,000 cached: the first query reaches 256 keys back, so 257 + 99 = 356
    keys are handed (the builder's windowed layer: a cache of W - 1 plus the new tokens)."""
    graph = narrowpipe.load(gqa_model(local_window_size=256))
    r = narrowpipe.analyze(graph, dims={"batch": 1, "seq": 100, "past": 1000})
    assert r.flops_by_group["attention"] == 4 * 8 * 100 * 356 * 32


def _masked_decoder() -> onnx.ModelProto:
    """GenAI's layout: input_ids [batch_size, sequence_length], attention_mask [batch_size,
    total_sequence_length] (seqlens_k = its row sums - 1), the cache [batch_size, 2, past_sequence_length, 32]."""
    model = gqa_model()
    g = model.graph
    for v in g.input:
        for d in v.type.tensor_type.shape.dim:
            if not d.dim_param:
                continue
            d.dim_param = {"batch": "batch_size", "seq": "sequence_length", "past": "past_sequence_length"}.get(
                d.dim_param, d.dim_param)
    keep = [v for v in g.input if v.name != "seqlens_k"]
    del g.input[:]
    g.input.extend(keep + [helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                                         ["batch_size", "total_sequence_length"])])
    one = helper.make_tensor("one", TensorProto.INT64, [], [1])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    g.initializer.extend([one, axes])
    g.node.insert(0, helper.make_node("Cast", ["lens"], ["seqlens_k"], to=TensorProto.INT32))
    g.node.insert(0, helper.make_node("Sub", ["sums", "one"], ["lens"]))
    g.node.insert(0, helper.make_node("ReduceSum", ["attention_mask", "axes"], ["sums"], keepdims=0))
    return model


def test_total_sequence_length_is_no_kv_length() -> None:
    """past_sequence_length is the KV length (2047 cached tokens), total_sequence_length = past + new is
    derived: role_size(KV_LENGTH) is 2047 (was 2047 x 2048); a total other than 2047 + 1 is refused."""
    from narrowpipe.ir import DimRole
    graph = narrowpipe.load(_masked_decoder())
    dims = {"batch_size": 1, "sequence_length": 1, "past_sequence_length": 2047}
    assert graph.dims_with_role(DimRole.KV_LENGTH) == ["past_sequence_length"]
    assert graph.dims["total_sequence_length"].role is DimRole.OTHER
    assert graph.role_size(DimRole.KV_LENGTH, {**dims, "total_sequence_length": 2048}) == 2047
    assert narrowpipe.analyze(graph, dims={**dims, "total_sequence_length": 2048}).flops_by_group["attention"] == \
        4 * 8 * 2048 * 32
    for bad, word in ((2049, "longer"), (2047, "shorter")):
        with pytest.raises(narrowpipe.NarrowpipeError, match=f"total_sequence_length={bad} is {word} than the cache"):
            narrowpipe.analyze(graph, dims={**dims, "total_sequence_length": bad})


def test_serving_binds_total_to_past_plus_tokens() -> None:
    from narrowpipe.costmodel.serving import serving_graph
    sg = serving_graph(narrowpipe.load(_masked_decoder()))
    assert sg.bindings(batch=2, tokens=1, past=99) == {"batch_size": 2, "sequence_length": 1,
                                                       "past_sequence_length": 99, "total_sequence_length": 100}
