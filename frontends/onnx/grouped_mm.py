"""An unrolled grouped GEMM in an ONNX export, folded back into one :attr:`Op.GROUPED_DOT`.

ONNX has no grouped GEMM, so exporters unroll one. transformers' ONNX exporter writes
``aten._grouped_mm(x, w, offsets)`` (the default experts of Mixtral-style models) as, per expert ``g``:
``rows_g = Range(offsets[g-1], offsets[g])``, ``MatMul(Gather(x, rows_g), Squeeze(Split(w)[g]))``, and one
``Concat`` of the experts' outputs along the rows. Lowered as it stands, each expert's row count is a
data-dependent dim nobody can bind (``val_389_d0``), so the model cannot be analysed at all. The
pattern says exactly what it computes, so it becomes the grouped GEMM it was: the same FLOPs (every
row through one expert), and the expert balance of the analysis decides how the rows split.
"""

from __future__ import annotations

from ...ir import Graph, Node, Op, Value
from ...ir.dims import Dim
from ..moe_routing import routed_top_k

__all__ = ["fold_unrolled_grouped_mm"]


def fold_unrolled_grouped_mm(graph: Graph) -> set[str]:
    """Rewrite every unrolled grouped GEMM of ``graph`` in place; returns the dim names that only the
    removed per-expert values used (their row counts), which no longer need declaring."""
    before: set[str] = set()
    for concat in [n for n in graph.nodes if n.op is Op.CONCAT]:
        match = _match(concat)
        if match is None:
            continue
        x, w, offsets, dead = match
        for node in dead:
            for v in node.outputs:
                before |= v.type.symbols
        attrs: dict[str, object] = {"rhs_contract": 1, "unrolled_from": len(concat.inputs)}
        top_k = routed_top_k(offsets, w.shape[0])
        if top_k is not None:
            attrs["top_k"] = top_k
        out = concat.outputs[0]
        rows = x.shape[0]
        node = graph.add_node(Op.GROUPED_DOT, [x, w, offsets], [out.type.with_shape((rows, w.shape[2]))], attrs,
                              name=f"{concat.name}_grouped", source=concat.source)
        if out.shape[0] != rows:
            _retype_rows(graph, out.shape[0], rows)
        graph.nodes.remove(node)   # added last; it belongs where the concat was (topological order)
        graph.nodes.insert(graph.nodes.index(concat), node)
        graph.replace_all_uses(out, node.outputs[0])
        graph.remove_unread(dead)
    return before - graph.symbols() if before else set()


def _match(concat: Node) -> tuple[Value, Value, Value | None, list[Node]] | None:
    """(rows, stacked weights, offsets, the pattern's nodes) when ``concat`` joins an unrolled grouped GEMM."""
    parts = concat.inputs
    out = concat.outputs[0] if concat.outputs else None
    if concat.attrs.get("axis") != 0 or out is None or out.type.rank != 2 or not parts:
        return None
    x = w = None
    dead: list[Node] = [concat]
    bounds: list[Value | None] = []
    for g, part in enumerate(parts):
        dot = part.producer if part is not None else None
        if dot is None or part is None or dot.op is not Op.DOT or len(part.uses) != 1 or dot.attrs.get("lhs_batch"):
            return None
        if tuple(dot.attrs.get("lhs_contract", ())) != (1,) or tuple(dot.attrs.get("rhs_contract", ())) != (0,):
            return None
        lhs, rhs = dot.inputs[0], dot.inputs[1]
        gather = lhs.producer if lhs is not None else None
        squeeze = rhs.producer if rhs is not None else None
        if gather is None or gather.op is not Op.GATHER or gather.attrs.get("axis", 0) != 0:
            return None
        rows_idx = gather.inputs[1] if len(gather.inputs) > 1 else None
        iota = rows_idx.producer if rows_idx is not None else None
        if iota is None or iota.op is not Op.IOTA:
            return None
        if squeeze is None or squeeze.op is not Op.RESHAPE or squeeze.inputs[0] is None:
            return None
        piece = squeeze.inputs[0]
        split = piece.producer
        if split is None or split.op is not Op.SPLIT or split.attrs.get("axis", 0) != 0 or piece.index != g:
            return None
        x = gather.inputs[0] if x is None else x
        w = split.inputs[0] if w is None else w
        if gather.inputs[0] is not x or split.inputs[0] is not w or x is None or w is None:
            return None
        dead += [dot, gather, iota, squeeze]
        bounds.append(iota.inputs[1] if len(iota.inputs) > 1 else None)
        if g == len(parts) - 1:
            dead.append(split)
    if x is None or w is None or w.type.rank != 3 or w.shape[0] != len(parts) or x.type.rank != 2:
        return None
    offsets = _offsets(bounds[0], dead)
    return x, w, offsets, dead


def _offsets(end: Value | None, dead: list[Node]) -> Value | None:
    """The cumulative row counts the first expert's end was cut from: ``Squeeze(Split(offsets)[0])``."""
    squeeze = end.producer if end is not None else None
    if squeeze is None or squeeze.op is not Op.RESHAPE or squeeze.inputs[0] is None:
        return None
    split = squeeze.inputs[0].producer
    if split is None or split.op is not Op.SPLIT or split.inputs[0] is None or split.inputs[0].type.rank != 1:
        return None
    for out in split.outputs:
        dead.extend(use.node for use in out.uses if use.node.op is Op.RESHAPE)
    dead.append(split)
    return split.inputs[0]


def _retype_rows(graph: Graph, old: Dim, rows: Dim) -> None:
    """Shape inference left the concat's rows as the sum of the experts' unknown counts; every value
    typed with that sum has the grouped GEMM's rows instead (the same count, now bound by the input)."""
    for v in graph.values():
        if any(d == old for d in v.shape):
            v.type = v.type.with_shape(tuple(rows if d == old else d for d in v.shape))
