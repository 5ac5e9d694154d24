"""The vocabulary as Megatron builds it: padded to a multiple of ``make-vocab-size-divisible-by x tp``.

Why: Megatron sizes the embedding and the output layer with the padded vocabulary
(``_vocab_size_with_padding``), so every tensor-parallel rank holds an equal slice of both, and the
head computes (and the vocab-parallel cross entropy reads) logits for the padding rows too. A
vocabulary that ``tp`` does not divide (GPT-2's 50,257) is therefore split, not replicated, and costs
the padded rows: the graph's vocabulary dims are rewritten to the padded size before the block is
differentiated and sharded, so FLOPs, bytes and the split follow from the same rules as any dim.

The vocabulary is the row count of the largest table a ``GATHER`` reads with the model's integer
inputs (the token embedding); every weight dim of that size (the embedding, an untied head, a head
bias) is padded, and so is every dim of that size downstream of them (the logits and what reads them).
"""

from __future__ import annotations

from ...ir import VIEW_OPS, Graph, Op, TensorType, Value

__all__ = ["vocab_rows", "padded_vocab", "pad_vocab"]


def vocab_rows(graph: Graph) -> int | None:
    """Rows of the token embedding: the largest table a ``GATHER`` indexes with an integer graph input
    (through views), or None when the model looks nothing up by token."""
    best: int | None = None
    for node in graph.nodes:
        if node.op is not Op.GATHER or len(node.inputs) < 2:
            continue
        table, idx = node.inputs[0], node.inputs[1]
        if table is None or idx is None or not table.kind.is_weight or idx.dtype.is_float:
            continue
        while idx.producer is not None and idx.producer.op in VIEW_OPS and idx.producer.inputs[0] is not None:
            idx = idx.producer.inputs[0]
        rows = table.shape[0] if table.shape else None
        if idx.producer is None and not idx.kind.is_weight and isinstance(rows, int):
            best = rows if best is None else max(best, rows)
    return best


def padded_vocab(vocab: int, multiple: int, tp: int) -> int:
    """``vocab`` rounded up to a multiple of ``multiple x tp`` (Megatron's ``_vocab_size_with_padding``)."""
    step = max(1, multiple) * max(1, tp)
    return -(-vocab // step) * step


def pad_vocab(graph: Graph, vocab: int, padded: int) -> bool:
    """Rewrite ``graph`` in place: every weight dim of ``vocab`` and every dim of that size
    downstream of those weights becomes ``padded``; whether anything changed."""
    if padded == vocab:
        return False
    changed: set[int] = set()
    for w in graph.weights:
        if _pad(w, vocab, padded):
            changed.add(id(w))
    if not changed:
        return False
    for node in graph.nodes:
        if any(v is not None and id(v) in changed for v in node.inputs):
            for o in node.outputs:
                if _pad(o, vocab, padded):
                    changed.add(id(o))
    graph.version += 1
    return True


def _pad(v: Value, vocab: int, padded: int) -> bool:
    shape = tuple(padded if isinstance(d, int) and d == vocab else d for d in v.shape)
    if shape == tuple(v.shape):
        return False
    v.type = TensorType(v.dtype, shape)
    return True
