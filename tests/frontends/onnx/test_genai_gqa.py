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
