"""A serving step's activations: the step's peak of live tensors with the KV cache left out, no more.

The budget counts the cache on its own (every token of the context), so the activation term must
hold what the step holds besides it. An in-place append (what serving runtimes do) holds no storage
of its own; subtracting the new rows from the peak anyway took out rows that were never in it, and
Llama-3-8B's prefill at batch 8 x 2,048 read 1 MB of activations (its peak is 1.5 GB)."""

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.costmodel.serving.prepare import serving_graph
from narrowpipe.costmodel.serving.step import activation_bytes, time_step
from narrowpipe.ir import IN_PLACE, Op

B, S, E, FFN, LAYERS, HEADS = 4, 512, 256, 1024, 16, 4


def _graph():
    return narrowpipe.transformer(layers=LAYERS, hidden=E, heads=HEADS, vocab=512, kv_heads=HEADS, ffn=FFN,
                                  gated_mlp=True, seq=1, past=10)


def _hand_peak() -> int:
    """The peak by hand: at the gated product ``silu(gate) * up`` the step holds silu(gate), up and the
    product ([B, S, ffn] bf16 each; gate itself was freed by the silu), the residual stream ([B, S,
    hidden] bf16) and the rotary cos/sin tables ([S, head_dim] bf16 each); nothing else is live."""
    head_dim = E // HEADS
    return 3 * B * S * FFN * 2 + B * S * E * 2 + 2 * S * head_dim * 2


def test_prefill_activations_are_the_peak_without_the_cache_by_hand():
    sg = serving_graph(_graph())
    kv = B * S * sg.cache.bytes_per_token
    assert sg.cache.bytes_per_token == LAYERS * 2 * E * 2     # keys and values, bf16, every layer
    assert kv > _hand_peak()                                  # the old subtraction went to 0 here
    assert activation_bytes(sg, B, S) == _hand_peak() == 13_762_560


def test_a_copying_append_leaves_the_same_activations():
    """An append that copies the cache (no ``in_place``) makes a new cache each layer; that storage is
    the cache too, counted by the KV term, so the activations are the same as with in-place appends."""
    sg = serving_graph(_graph())
    copied = serving_graph(_graph())
    for node in copied.graph.nodes:
        if node.op is Op.CONCAT and IN_PLACE in node.attrs:
            del node.attrs[IN_PLACE]
    copied.graph.version += 1                                 # cached analyses are dropped
    assert activation_bytes(copied, B, S) == activation_bytes(sg, B, S) == _hand_peak()


def test_the_step_reports_the_same_term_in_prefill_and_decode():
    """The step's own figure is this term, per device, in prefill and in decode (one token on a cache of S:
    the residual stream, the [B, 1, ffn] MLP tensors and the tables, never 0; nothing here grows with the
    cache, which the term leaves out)."""
    sg = serving_graph(_graph())
    assert time_step(sg, get_target("h100"), batch=B, tokens=S, past=0).activation_bytes == _hand_peak()
    decode = time_step(sg, get_target("h100"), batch=B, tokens=1, past=S).activation_bytes
    assert decode == 3 * B * FFN * 2 + B * E * 2 + 2 * (E // HEADS) * 2
