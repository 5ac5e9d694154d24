"""One decoder reads both attention layouts; one attribute says causal, one the sliding window."""

from narrowpipe.ir import (
    CAUSAL,
    WINDOW,
    DType,
    Graph,
    Op,
    TensorType,
    attention_dims,
    attention_operands,
    attention_window,
    is_causal,
)


def test_both_layouts_decode_to_the_same_dims():
    bhsd = attention_dims({}, (2, 8, 16, 64), (2, 2, 32, 64), (2, 2, 32, 48))
    bsd = attention_dims({"layout": "bsd", "num_heads": 8, "kv_num_heads": 2},
                         (2, 16, 8 * 64), (2, 32, 2 * 64), (2, 32, 2 * 48))
    assert bhsd == bsd
    assert (bsd.batch, bsd.heads, bsd.kv_heads, bsd.sq, bsd.sk, bsd.d, bsd.dv) == (2, 8, 2, 16, 32, 64, 48)


def test_kv_heads_default_to_the_query_heads_in_bsd():
    a = attention_dims({"layout": "bsd", "num_heads": 4}, (1, 5, 32), (1, 7, 32), (1, 7, 32))
    assert (a.heads, a.kv_heads, a.d, a.dv) == (4, 4, 8, 8)


def test_the_causal_attribute_and_the_backward_operands():
    g = Graph()
    t = TensorType(DType.FP32, (1, 1, 4, 8))
    q = g.add_input("q", t)
    fwd = g.add_node(Op.ATTENTION, [q, q, q], [t], {CAUSAL: True})
    mask_step = g.add_node(Op.ADD, [q, q], [t])
    bwd = g.add_node(Op.ATTENTION_BACKWARD, [q, q, q, q], [t, t, t])
    assert is_causal(fwd) and not is_causal(mask_step)
    assert (attention_operands(fwd), attention_operands(bwd)) == (0, 1)


def test_the_window_attribute_is_read_in_both_layouts_and_absent_means_none():
    assert attention_dims({WINDOW: 4096}, (1, 8, 1, 64), (1, 2, 4095, 64), (1, 2, 4095, 64)).window == 4096
    bsd = attention_dims({"layout": "bsd", "num_heads": 2, WINDOW: 16}, (1, 5, 32), (1, 7, 32), (1, 7, 32))
    assert bsd.window == 16
    assert attention_dims({}, (1, 1, 4, 8), (1, 1, 4, 8), (1, 1, 4, 8)).window is None
    g = Graph()
    t = TensorType(DType.FP32, (1, 1, 4, 8))
    q = g.add_input("q", t)
    windowed = g.add_node(Op.ATTENTION, [q, q, q], [t], {CAUSAL: True, WINDOW: 3})
    full = g.add_node(Op.ATTENTION, [q, q, q], [t], {CAUSAL: True})
    assert (attention_window(windowed), attention_window(full)) == (3, None)
