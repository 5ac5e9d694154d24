"""A report note naming the ops of a torch graph that ``torch.utils.flop_counter.FlopCounterMode``
counts as 0 while narrowpipe counts them in :attr:`Report.matmul_flops`.

``matmul_flops`` (contraction + convolution + attention) is the quantity FlopCounterMode counts and is
tested to equal it exactly; a user comparing the two totals on a graph holding one of these ops sees
a difference and needs to know it is the counter's gap, not narrowpipe's. The counts stay as they are.
The list is torch 2.13's ``flop_registry`` read against the ops torch.export leaves in a program (the
note matches on the node's source op, so it applies to torch graphs only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..ir import Node, OpGroup

if TYPE_CHECKING:
    from .interpreter import CostTable

__all__ = ["FCM_UNCOUNTED", "flop_counter_notes"]

_COUNTED_GROUPS = frozenset({OpGroup.CONTRACTION, OpGroup.CONVOLUTION, OpGroup.ATTENTION})

#: torch source op (without overload) -> when FlopCounterMode counts it as 0 (torch 2.13: no entry in
#: ``torch.utils.flop_counter.flop_registry``; SDPA has entries for its CUDA kernels only)
FCM_UNCOUNTED: dict[str, str] = {
    "aten.dot": "", "aten.vdot": "", "aten.mv": "", "aten.addmv": "", "aten.addbmm": "",
    "aten._grouped_mm": "", "transformers.grouped_mm_fallback": "",
    "aten.scaled_dot_product_attention": "when the model runs on CPU",
    "aten._scaled_dot_product_flash_attention_for_cpu": "",
}


def _source_op(node: Node) -> str:
    op = node.source.op if node.source is not None else ""
    head, _, tail = op.rpartition(".")
    return head if head.count(".") == 1 else op   # "aten.addbmm.default" -> "aten.addbmm"


def flop_counter_notes(table: CostTable) -> list[str]:
    """One note listing each uncounted source op with its node count and FLOPs under this binding."""
    graph = table.graph
    if graph.meta.get("source") != "torch.export":
        return []
    found: dict[str, list[int]] = {}
    index = table.index
    for i, node in enumerate(graph.nodes):
        if node.group not in _COUNTED_GROUPS:
            continue
        name = _source_op(node)
        if name not in FCM_UNCOUNTED:
            continue
        cost = table.costs.get(node)
        if cost is None and index is not None and index.node_class[i] >= 0:
            cost = table.class_costs[index.node_class[i]]
        entry = found.setdefault(name, [0, 0])
        entry[0] += 1
        entry[1] += cost.flops if cost is not None else 0
    if not found:
        return []
    parts = [f"{name} ({n} node{'s' if n != 1 else ''}, {flops:,} FLOPs"
             + (f"; {FCM_UNCOUNTED[name]}" if FCM_UNCOUNTED[name] else "") + ")"
             for name, (n, flops) in sorted(found.items())]
    total = sum(flops for _, flops in found.values())
    return [f"torch's FlopCounterMode counts 0 for {', '.join(parts)}; matmul_flops (alias modeled_flops) counts "
            f"them, so it exceeds FlopCounterMode's total by up to {total:,} FLOPs (the counts here are unchanged)"]
