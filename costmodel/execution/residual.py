"""Where a tensor-parallel layout must all-reduce: the residual adds that close each block.

Megatron-style tensor parallelism splits each block's first contraction by columns and its last by
rows, so every chip holds a partial sum of the block's output until it is all-reduced, once per
block, right where the block's output joins the residual stream. A residual add is an ADD of two
activations (no weight, not a bias) one of which is a contraction's output (through views and bias
adds) that the other does not depend on (``x + 0.044715 * x**3`` inside a GELU adds a contraction's
output to a function of itself: not a residual). Found from the graph, not from layer names.
"""

from __future__ import annotations

from ...ir import VIEW_OPS, Graph, Node, Op, Value

__all__ = ["residual_adds"]

_DEPTH = 12   # how far back the checks look: a block's tail is a handful of views and a bias add


def _from_weight(v: Value | None) -> bool:
    while v is not None:
        if v.kind.is_weight:
            return True
        p = v.producer
        if p is None or p.op not in VIEW_OPS or not p.inputs:
            return False
        v = p.inputs[0]
    return False


def _contraction_output(v: Value | None) -> Value | None:
    """The DOT output ``v`` is (through views and bias adds), or None."""
    for _ in range(_DEPTH):
        n = v.producer if v is not None else None
        if n is None:
            return None
        if n.op is Op.DOT:
            return n.outputs[0]
        if n.op in VIEW_OPS and n.inputs:
            v = n.inputs[0]
        elif n.op is Op.ADD and any(_from_weight(i) for i in n.inputs):
            v = next((i for i in n.inputs if not _from_weight(i)), None)
        else:
            return None
    return None


def _depends_on(v: Value | None, target: Value) -> bool:
    frontier, seen = [v], 0
    while frontier and seen < 4 * _DEPTH:
        cur = frontier.pop()
        seen += 1
        if cur is None:
            continue
        if cur is target:
            return True
        if cur.producer is not None:
            frontier.extend(cur.producer.inputs)
    return False


def residual_adds(graph: Graph) -> list[Node]:
    """The ADD nodes that close a block (where a tensor-parallel layout all-reduces)."""
    out = []
    for n in graph.nodes:
        if n.op is not Op.ADD or len(n.inputs) != 2 or any(i is None or _from_weight(i) for i in n.inputs):
            continue
        a, b = n.inputs
        for x, other in ((a, b), (b, a)):
            dot = _contraction_output(x)
            if dot is not None and not _depends_on(other, dot):
                out.append(n)
                break
    return out
