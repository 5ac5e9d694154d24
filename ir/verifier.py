"""The graph verifier: checks the invariants every pass and cost rule relies on.

It collects every problem before raising, so a frontend bug shows all its symptoms at once.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import VerificationError
from .dims import Sym
from .graph import Graph, Node, Value, node_subgraphs
from .ops import Op

__all__ = ["verify", "problems"]

_REQUIRED_ATTRS: dict[Op, tuple[str, ...]] = {
    Op.DOT: ("lhs_contract", "rhs_contract"),
    Op.CONV: ("stride", "padding", "dilation", "groups"),
}
_MIN_INPUTS: dict[Op, int] = {Op.DOT: 2, Op.CONV: 2, Op.ATTENTION: 3}


def verify(graph: Graph) -> Graph:
    """Raise :class:`VerificationError` listing every broken invariant; return the graph if none."""
    found = problems(graph)
    if found:
        shown = "\n  ".join(found[:50])
        more = f"\n  ... and {len(found) - 50} more" if len(found) > 50 else ""
        raise VerificationError(f"graph {graph.name!r} failed verification:\n  {shown}{more}")
    return graph


def problems(graph: Graph, outer: Iterable[Value] = ()) -> list[str]:
    """Every invariant violation found in ``graph`` (values in ``outer`` are visible, as in ONNX)."""
    out: list[str] = []
    defined: set[int] = {id(v) for v in outer}
    names: set[str] = set()

    def define(v: Value, where: str) -> None:
        if id(v) in defined:
            out.append(f"{where}: value {v.name!r} defined twice")
        defined.add(id(v))
        if v.name in names:
            out.append(f"{where}: duplicate value name {v.name!r}")
        names.add(v.name)
        for d in v.type.shape:
            if isinstance(d, bool) or not isinstance(d, (int, Sym)):
                out.append(f"{where}: value {v.name!r} has a dim of type {type(d).__name__}")
            elif isinstance(d, int) and d < 0:
                out.append(f"{where}: value {v.name!r} has a negative dim {d}")

    for v in graph.inputs:
        if v.kind.is_weight:
            out.append(f"input {v.name!r} has weight kind {v.kind.value}")
        define(v, "inputs")
    for v in graph.weights:
        if not v.kind.is_weight:
            out.append(f"weight {v.name!r} has kind {v.kind.value}")
        define(v, "weights")
    for node in graph.nodes:
        out.extend(_check_node(node, defined))
        for sub in node_subgraphs(node):
            visible = [v for v in graph.values() if id(v) in defined]
            out.extend(f"{node.name}/{p}" for p in problems(sub, visible))
        for i, v in enumerate(node.outputs):
            if v.producer is not node or v.index != i:
                out.append(f"node {node.name!r}: output {i} ({v.name!r}) does not point back to it")
            define(v, f"node {node.name!r}")
    for v in graph.outputs:
        if id(v) not in defined:
            out.append(f"graph output {v.name!r} is not defined")
    return out


def _check_node(node: Node, defined: set[int]) -> list[str]:
    out: list[str] = []
    where = f"node {node.name!r} ({node.op.value})"
    if not isinstance(node.op, Op):
        return [f"{where}: not a canonical op"]
    for i, v in enumerate(node.inputs):
        if v is not None and id(v) not in defined:
            out.append(f"{where}: input {i} ({v.name!r}) used before it is defined")
    present = [v for v in node.inputs if v is not None]
    need = _MIN_INPUTS.get(node.op, 0)
    if len(present) < need:
        out.append(f"{where}: needs at least {need} inputs, has {len(present)}")
    for key in _REQUIRED_ATTRS.get(node.op, ()):
        if key not in node.attrs:
            out.append(f"{where}: missing attribute {key!r}")
    if node.op is Op.DOT and not out:
        lhs, rhs = node.inputs[0], node.inputs[1]
        assert lhs is not None and rhs is not None
        for side, value, keys in (("lhs", lhs, ("lhs_contract", "lhs_batch")),
                                  ("rhs", rhs, ("rhs_contract", "rhs_batch"))):
            for key in keys:
                for d in node.attrs.get(key, ()):
                    if not 0 <= d < value.type.rank:
                        out.append(f"{where}: {key} dim {d} out of range for {side} rank {value.type.rank}")
        if len(node.attrs["lhs_contract"]) != len(node.attrs["rhs_contract"]):
            out.append(f"{where}: lhs_contract and rhs_contract differ in length")
        if len(node.attrs.get("lhs_batch", ())) != len(node.attrs.get("rhs_batch", ())):
            out.append(f"{where}: lhs_batch and rhs_batch differ in length")
    if node.op is Op.UNKNOWN and not (node.attrs.get("source_op") or node.source.op):
        out.append(f"{where}: unknown op without a source_op")
    return out
