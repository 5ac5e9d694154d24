"""A networkx view of a graph, for users who want graph algorithms (paths, cuts, drawing)."""

from __future__ import annotations

import networkx as nx

from ..errors import IRError
from .graph import Graph, Node, Value

__all__ = ["to_networkx"]


def to_networkx(graph: Graph) -> nx.MultiDiGraph:
    """Nodes are op nodes plus one node per graph input/weight; edges carry the value flowing.

    Node attributes: ``op`` (canonical op name or ``input``/``param``/...), ``group``, ``kind``.
    Edge attributes: ``value`` (value name), ``dtype``, ``shape`` (as text).

    Both kinds of node are keyed by name, as the IR's one name space per graph keeps them apart; a
    graph whose names were edited into a clash is refused (merged, an input and a node of one name
    made an acyclic program cyclic).
    """
    g = nx.MultiDiGraph(name=graph.name)
    owner: dict[str, Value | Node] = {}

    def claim(key: str, obj: Value | Node) -> None:
        other = owner.setdefault(key, obj)
        if other is not obj:
            raise IRError(f"graph {graph.name!r}: {_what(other)} and {_what(obj)} are both named {key!r}; "
                          f"the networkx view keys nodes and values by name, so rename one")

    for v in [*graph.inputs, *graph.weights]:
        claim(v.name, v)
        g.add_node(v.name, op=v.kind.value, group="input", kind=v.kind.value, type=str(v.type))
    for node in graph.nodes:
        claim(node.name, node)
        g.add_node(node.name, op=node.op.value, group=node.group.value, kind="node",
                   source_op=node.source.op)
    for node in graph.nodes:
        for operand in node.inputs:
            if operand is None:
                continue
            src = operand.producer.name if operand.producer is not None else operand.name
            if src not in owner:  # a value captured from an enclosing graph
                g.add_node(src, op="outer", group="input", kind="outer", type=str(operand.type))
            claim(src, operand.producer if operand.producer is not None else operand)
            g.add_edge(src, node.name, value=operand.name, dtype=operand.type.dtype.value,
                       shape=str(list(map(str, operand.type.shape))))
    return g


def _what(obj: Value | Node) -> str:
    return f"a {obj.op.value} node" if isinstance(obj, Node) else f"a value of kind {obj.kind.value}"
