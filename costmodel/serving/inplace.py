"""Rewrites that make a decode graph move the bytes a serving runtime moves.

A graph as exported or built describes the model's math, and three of its habits cost bytes no
serving engine spends (a fourth, eager attention written out as matmuls and a softmax, is made one
``ATTENTION`` node first by :mod:`..eager_attention`, so the fold below sees it):

* **Cache appends copy the cache.** Hugging Face's dynamic cache returns ``cat([past, new])`` and
  the static cache ``index_copy`` s into its buffer; costed as written, either reads and writes the
  whole cache every step, tripling the KV traffic of decode. vLLM, TensorRT-LLM and SGLang write the
  new token's keys and values into preallocated (paged) storage and attention reads the cache once.
  :func:`mark_in_place` tags those appends ``in_place`` (the cost rule then moves only the new
  rows), following the cache's storage from the cache inputs through every append.
* **Grouped-query attention repeats K and V.** transformers' ``repeat_kv`` (unsqueeze, expand,
  reshape) hands SDPA ``heads`` copies of each KV head; the views are free, but the attention reads
  its operands at their logical size, so a GQA model would read its cache ``heads / kv_heads``
  times. Fused kernels (FlashAttention, FlashInfer, paged attention) read each KV head once.
  :func:`fold_repeat_kv` passes the un-repeated tensors with ``enable_gqa`` (as the model builder
  writes GQA), which leaves FLOPs unchanged: the rule counts over the query heads.
* **The head runs on every prompt token.** A causal LM's forward returns logits for every position,
  so a prefill of ``B x S`` tokens computes and holds ``B x S x vocab`` logits (33.6 GB for Llama-3-8B
  at batch 64 and 2k tokens in bf16). Serving engines sample only each sequence's next token: vLLM's
  ``LogitsProcessor`` keeps the hidden states at the selected (last) token indices before the head
  (vllm/model_executor/layers/logits_processor.py, ``_prune_hidden_states``), TensorRT-LLM gathers
  context logits only when built with ``gather_context_logits``. :func:`head_on_last_token` slices
  each sequence's last hidden state before the head (a decode step, one token, is unchanged). A
  continuous-batching iteration timed as one long sequence then runs its head on one row, not one per
  request: at those row counts the head's time is its weight read, paid once either way.

All return a new graph; the input is never edited.
"""

from __future__ import annotations

from ...ir import IN_PLACE, VIEW_OPS, Graph, Node, Op, TensorType, Value
from ..eager_attention import attention_from_eager
from .kvcache import KvCache

__all__ = ["mark_in_place", "cache_storage", "fold_repeat_kv", "head_on_last_token", "serving_rewrites"]

_SCATTERS = (Op.SCATTER, Op.SCATTER_ELEMENTS, Op.SCATTER_ND, Op.INDEX_PUT)


def _cache_appends(graph: Graph, cache: KvCache) -> tuple[list[tuple[Node, int]], set[Value]]:
    """Every append to the cache's storage (the node and the operand it updates), and every value
    that is that storage: the cache inputs and what each append returns."""
    names = {t.name for t in cache.tensors}
    storage: set[Value] = {v for v in graph.inputs if v.name in names}
    appends: list[tuple[Node, int]] = []
    for node in graph.nodes:
        if node.op is Op.CONCAT:
            hit = next((i for i, v in enumerate(node.inputs) if v is not None and v in storage), None)
        elif node.op in _SCATTERS:
            hit = 0 if node.inputs and node.inputs[0] in storage else None
        else:
            hit = None
        if hit is None:
            continue
        appends.append((node, hit))
        storage.update(node.outputs)
    return appends, storage


def cache_storage(graph: Graph, cache: KvCache) -> set[Value]:
    """The values that hold the KV cache (its inputs and every append's result, in place or a copy):
    what a step's activation peak leaves out, the memory budget counting the cache on its own."""
    return _cache_appends(graph, cache)[1]


def mark_in_place(graph: Graph, cache: KvCache) -> int:
    """Tag every append to the cache's storage ``in_place``, in place on ``graph`` (a fresh clone);
    returns how many appends were tagged (a one-input Concat of the cache, which an exporter may
    emit, is a copy: tagged, it writes nothing, but it is no update of its own)."""
    tagged = 0
    for node, hit in _cache_appends(graph, cache)[0]:
        graph.set_attr(node, IN_PLACE, hit)
        tagged += node.op is not Op.CONCAT or sum(v is not None for v in node.inputs) > 1
    return tagged


def _repeat_base(v: Value) -> Value | None:
    """The tensor a chain of views ending in ``v`` repeats with an expand, if any."""
    seen_expand = False
    cur = v
    while cur.producer is not None and cur.producer.op in VIEW_OPS:
        seen_expand = seen_expand or cur.producer.op is Op.EXPAND
        src = cur.producer.inputs[0]
        if src is None:
            return None
        cur = src
    return cur if seen_expand else None


def fold_repeat_kv(graph: Graph) -> int:
    """Feed attention the un-repeated K and V where a bhsd attention reads them through
    ``repeat_kv``; in place on ``graph`` (a fresh clone); returns how many attentions changed."""
    changed = 0
    for node in graph.nodes:
        if node.op is not Op.ATTENTION or node.attrs.get("layout", "bhsd") != "bhsd" or len(node.inputs) < 3:
            continue
        q, k, v = node.inputs[0], node.inputs[1], node.inputs[2]
        if q is None or k is None or v is None:
            continue
        bases = [_repeat_base(k), _repeat_base(v)]
        if any(b is None for b in bases):
            continue
        ok = True
        for base, full in zip(bases, (k, v)):
            assert base is not None
            s, f = base.shape, full.shape
            if len(s) != 4 or s[0] != f[0] or s[2] != f[2] or s[3] != f[3] or not isinstance(s[1], int) \
                    or not isinstance(f[1], int) or s[1] < 1 or f[1] % s[1]:
                ok = False
        if not ok:
            continue
        for index, base in ((1, bases[0]), (2, bases[1])):
            graph.set_input(node, index, base)
        graph.set_attr(node, "enable_gqa", True)
        changed += 1
    return changed


def head_on_last_token(graph: Graph) -> bool:
    """Run the head (the matmul producing the first output, the logits) on each sequence's last
    position only, in place on ``graph`` (a fresh clone); False when the logits are not a
    ``[batch, seq, vocab]`` matmul over a symbolic sequence, or when a node reads the logits (a
    softcap, a loss: it would see one row where it expects every position), the graph then left as
    it was."""
    if not graph.outputs:
        return False
    logits = graph.outputs[0]
    head = logits.producer
    if head is None or head.op is not Op.DOT or graph.users().get(logits):
        return False
    h = head.inputs[0]
    if h is None or h.type.rank != 3 or logits.type.rank != 3 or isinstance(h.type.shape[1], int):
        return False
    last = graph.add_node(Op.SLICE, [h], [TensorType(h.type.dtype, (h.type.shape[0], 1, h.type.shape[2]))],
                          {"axis": 1, "start": -1, "end": None}, name="last_token")
    graph.nodes.remove(last)                               # added last: it belongs just before the head
    graph.nodes.insert(graph.nodes.index(head), last)
    graph.set_input(head, 0, last.outputs[0])
    logits.type = TensorType(logits.type.dtype, (logits.type.shape[0], 1, logits.type.shape[2]))
    return True


def serving_rewrites(graph: Graph, cache: KvCache) -> tuple[Graph, list[str]]:
    """A copy of ``graph`` with the three rewrites applied (after eager attention is made one
    ``ATTENTION`` node, :mod:`..eager_attention`: what a serving runtime runs), and notes saying what changed."""
    out = graph.clone()
    fused = attention_from_eager(out)
    folded = fold_repeat_kv(out)
    tagged = mark_in_place(out, cache)
    last = head_on_last_token(out)
    notes = []
    if fused:
        notes.append(f"{fused} eager attention(s) (QK^T, scale, mask, softmax, PV) run as one fused attention")
    if folded:
        notes.append(f"{folded} attention(s) read K/V once per KV head (repeat_kv folded into GQA)")
    if tagged:
        notes.append(f"{tagged} cache update(s) write only the new tokens (in place, as serving runtimes do)")
    if last:
        notes.append("the head runs on each sequence's last token (a prefill samples one token per sequence)")
    return out, notes
