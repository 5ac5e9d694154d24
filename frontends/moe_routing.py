"""The top-k of a grouped GEMM's router, found in the lowered graph; shared by the torch and ONNX frontends.

A grouped GEMM's rows are ``top_k x tokens`` routed rows, and no expert can take more rows than there
are tokens (a token picks ``top_k`` different experts). The op itself only sees ``S`` rows and an
``offsets`` tensor, so the frontends look for the router that made the offsets: Hugging Face's
grouped experts build them as ``cumsum(histc(sort(top_k_index.flatten())))`` (ONNX: the same
through ``CumSum`` and a ``ScatterElements`` histogram). The nearest ``TOPK`` above the offsets
gives ``k``; no router in reach leaves ``top_k`` unknown, which only drops the one-row-per-token cap.
"""

from __future__ import annotations

from ..ir import Node, Op, Value

__all__ = ["routed_top_k", "MAX_NODES"]

#: nodes visited walking up from the offsets (Hugging Face's chain is 5 to 8 ops long)
MAX_NODES = 32


def routed_top_k(offsets: Value | None, experts: object) -> int | None:
    """The ``k`` of the nearest ``TOPK`` above the ``offsets`` that picks among the ``experts`` (breadth
    first, so a histogram's zero-filled bins or a clamp's bounds do not hide the router; a sort that
    an exporter wrote as a top-k over all the rows is not a router), or None."""
    queue = [offsets] if offsets is not None else []
    seen: set[int] = set()
    while queue and len(seen) < MAX_NODES:
        node = queue.pop(0).producer
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if node.op is Op.TOPK and _over_experts(node, experts):
            k = node.attrs.get("k")
            ok = isinstance(k, int) and not isinstance(k, bool) and isinstance(experts, int) and 0 < k <= experts
            return k if ok else None
        queue.extend(x for x in node.inputs if x is not None)
    return None


def _over_experts(topk: Node, experts: object) -> bool:
    """Whether the top-k picks along a dim of exactly ``experts`` entries (the router's scores)."""
    scores = topk.inputs[0] if topk.inputs else None
    if scores is None or not isinstance(experts, int) or scores.type.rank == 0:
        return False
    axis = topk.attrs.get("axis", -1)
    axis = axis % scores.type.rank if isinstance(axis, int) else -1
    return scores.shape[axis] == experts
