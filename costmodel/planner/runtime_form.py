"""The forward graph of a block as a given training runtime runs it, before it is differentiated.

Why one entry point: what a step computes, saves and splits depends on the runtime as much as on the
model (flash or unfused attention and the layout it writes, which elementwise steps run as one fused
kernel, dropout, the padded vocabulary), and every prediction of a block must see the same form. So
the planner rewrites the graph once per (block, runtime, tensor-parallel size) and hands the result
to the training step and the sharding pass, which cost it like any graph:

1. norms spelled as steps fused (:func:`.fused_forms.fuse_rms_norms`, ``Runtime.fused_norm``);
2. attention unfused, or its output in the projection's layout, and dropout (:mod:`.attention_form`);
3. gated activations computed again in the fused product's backward (:func:`.fused_forms.mark_fused_glu`,
   ``Runtime.fused_glu``);
4. a mixture of experts' dispatch as a capacity-factor runtime runs it (:mod:`.moe_capacity`,
   ``Runtime.moe_capacity_factor``);
5. the vocabulary padded to a multiple of ``Runtime.vocab_multiple x tp`` (:mod:`.vocab_pad`).

A graph the runtime runs as it is comes back unchanged (the same object).
"""

from __future__ import annotations

from ...ir import Graph, Node
from ...ir.verifier import maybe_verify
from .attention_form import attention_form
from .fused_forms import fuse_rms_norms, mark_fused_glu
from .moe_capacity import capacity_dispatch
from .runtime import Runtime
from .vocab_pad import pad_vocab, padded_vocab

__all__ = ["apply_runtime_form"]


def apply_runtime_form(graph: Graph, runtime: Runtime, *, tp: int = 1, vocab: int | None = None) -> Graph:
    """``graph`` rewritten to ``runtime``'s form at tensor-parallel size ``tp``; ``vocab`` is the
    model's vocabulary (:func:`.vocab_pad.vocab_rows`; None: nothing padded)."""
    out = graph.clone()
    changed = fuse_rms_norms(out) if runtime.fused_norm else False
    changed = attention_form(out, runtime) or changed
    changed = (mark_fused_glu(out) if runtime.fused_glu else False) or changed
    changed = capacity_dispatch(out, runtime.moe_capacity_factor) or changed
    if vocab is not None:
        changed = pad_vocab(out, vocab, padded_vocab(vocab, runtime.vocab_multiple, tp)) or changed
    if not changed:
        return graph
    out.nodes = _topological(out)
    out.version += 1
    return maybe_verify(out, "narrowpipe.planner.runtime_form")


def _topological(g: Graph) -> list[Node]:
    """The nodes in an order where every operand is produced first (the rewrite appended new nodes
    after their readers): a depth-first walk over producers, original order kept otherwise."""
    placed: set[int] = set()
    order: list[Node] = []
    for root in g.nodes:
        stack: list[tuple[Node, bool]] = [(root, False)]
        while stack:
            n, expanded = stack.pop()
            if expanded:
                order.append(n)
                continue
            if id(n) in placed:
                continue
            placed.add(id(n))
            stack.append((n, True))
            for v in reversed(n.inputs):
                p = v.producer if v is not None else None
                if p is not None and p.owner is g and id(p) not in placed:
                    stack.append((p, False))
    return order
