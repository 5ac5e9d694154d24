"""Serving's cache appends write only the new rows, and GQA attention reads each KV head once."""

import math

import narrowpipe
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.serving.prepare import serving_graph
from narrowpipe.ir import DType, Graph, Op, TensorType
from narrowpipe.ir.dims import Sym
from narrowpipe.models.graph_builder import GraphBuilder


def test_decode_step_reads_the_cache_once_and_writes_one_token():
    g = narrowpipe.transformer(layers=1, hidden=256, heads=4, vocab=100, kv_heads=2, seq=1, past=10)
    sg = serving_graph(g)
    table = interpret(sg.graph, {"batch": 3, "seq": 1, "past": 50})
    appends = [n for n in sg.graph.nodes if n.op is Op.CONCAT and "in_place" in n.attrs]
    assert len(appends) == 2                                   # keys and values
    row = 3 * 2 * 1 * 64 * 2                                  # batch x kv heads x 1 token x head dim x bf16
    for n in appends:
        c = table.costs[n]
        assert (c.bytes_read, c.bytes_written) == (row, row)
    attn = next(n for n in sg.graph.nodes if n.op is Op.ATTENTION)
    q = 3 * 4 * 1 * 64 * 2
    kv = 3 * 2 * 51 * 64 * 2                                  # the 50 cached tokens and the new one
    assert table.costs[attn].bytes_read == q + 2 * kv


def _repeat_kv_graph() -> Graph:
    """q [B, 4, S, 16] attending to k, v [B, 2, S, 16] repeated to 4 heads as transformers does."""
    g = Graph("gqa")
    b = GraphBuilder(g, DType.BF16)
    B, S = Sym("batch"), Sym("seq")
    q = b.input("q", (B, 4, S, 16), DType.BF16)
    outs = []
    kvs = []
    for name in ("k", "v"):
        x = b.input(name, (B, 2, S, 16), DType.BF16)
        u = b.reshape(x, (B, 2, 1, S, 16), name=f"{name}_unsqueeze")
        e = b.emit(Op.EXPAND, [u], (B, 2, 2, S, 16), name=f"{name}_expand", dtype=DType.BF16)
        kvs.append(b.reshape(e, (B, 4, S, 16), name=f"{name}_repeat"))
    outs.append(b.emit(Op.ATTENTION, [q, *kvs], (B, 4, S, 16), {"layout": "bhsd", "causal": True,
                                                               "scale": 0.25}, name="attention"))
    g.set_outputs(outs)
    return g


def test_fold_repeat_kv_reads_kv_heads_once_and_keeps_flops():
    from narrowpipe.costmodel.serving.inplace import fold_repeat_kv
    g = _repeat_kv_graph()
    before = interpret(g, {"batch": 2, "seq": 8})
    folded = g.clone()
    assert fold_repeat_kv(folded) == 1
    after = interpret(folded, {"batch": 2, "seq": 8})
    a0 = next(n for n in g.nodes if n.op is Op.ATTENTION)
    a1 = next(n for n in folded.nodes if n.op is Op.ATTENTION)
    assert after.costs[a1].flops == before.costs[a0].flops == 2 * 2 * 4 * 8 * 8 * (16 + 16)
    elems = 2 * 8 * 16
    assert before.costs[a0].bytes_read == 2 * elems * (4 + 4 + 4)   # k and v read at 4 heads
    assert after.costs[a1].bytes_read == 2 * elems * (4 + 2 + 2)    # each KV head once
    assert a1.attrs["enable_gqa"] is True
    assert math.prod(a1.inputs[1].type.shape[1:2]) == 2
    assert isinstance(a1.inputs[1].type, TensorType)


def test_a_prefill_runs_the_head_on_each_sequences_last_token():
    """A prefill samples one token per sequence (vLLM prunes the hidden states to the last token before
    the head): the head's FLOPs are batch x hidden x vocab x 2, not x the prompt, and the step never
    holds every position's logits; a decode step (one token) is unchanged."""
    b, s, e, v = 3, 40, 256, 8000                         # a vocabulary large enough that logits are the peak
    g = narrowpipe.transformer(layers=1, hidden=e, heads=4, vocab=v, kv_heads=2, seq=1, past=10)
    sg = serving_graph(g)
    head = next(n for n in sg.graph.nodes if n.outputs[0] is sg.graph.outputs[0])
    assert head.op is Op.DOT and head.inputs[0].producer.op is Op.SLICE
    prefill = interpret(sg.graph, {"batch": b, "seq": s, "past": 0})
    assert prefill.costs[head].flops == 2 * b * e * v
    assert prefill.costs[head].bytes_written == b * v * 2   # one bf16 row of logits per sequence
    full = interpret(g, {"batch": b, "seq": s, "past": 0})
    assert full.peak_activation_bytes >= b * s * v * 2 > prefill.peak_activation_bytes
    decode = interpret(sg.graph, {"batch": b, "seq": 1, "past": s})
    assert decode.costs[head].flops == 2 * b * e * v
    assert any("last token" in n for n in sg.notes)


def test_the_head_stays_whole_when_a_node_reads_the_logits():
    """A final softcap (tanh(logits / c) x c, as Gemma-2) reads the head's output: slicing the head
    would hand it one row where it expects every position, so the graph is left as it was."""
    from narrowpipe.costmodel.serving.inplace import head_on_last_token
    g = narrowpipe.transformer(layers=1, hidden=64, heads=4, vocab=256, kv_heads=2, seq=8, past=8)
    logits, rest = g.outputs[0], list(g.outputs[1:])
    capped = g.add_node(Op.TANH, [logits], [logits.type], name="final_softcap").outputs[0]
    g.set_outputs([capped, *rest])
    assert head_on_last_token(g) is False                  # the capped logits are no DOT's output
    g.set_outputs([logits, capped, *rest])                 # the raw logits returned and read as well
    before = logits.type
    assert head_on_last_token(g) is False and logits.type == before
