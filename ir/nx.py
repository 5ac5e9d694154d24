"""A networkx view of a graph, for users who want graph algorithms (paths, cuts, drawing)."""

from __future__ import annotations

import networkx as nx

from .graph import Graph

__all__ = ["to_networkx"]


def to_networkx(graph: Graph) -> nx.MultiDiGraph:
    """Nodes are op nodes plus one node per graph input/weight; edges carry the value flowing.

    Node attributes: ``op`` (canonical op name or ``input``/``param``/...), ``group``, ``kind``.
    Edge attributes: ``value`` (value name), ``dtype``, ``shape`` (as text).
    """
    g = nx.MultiDiGraph(name=graph.name)
    for v in [*graph.inputs, *graph.weights]:
        g.add_node(v.name, op=v.kind.value, group="input", kind=v.kind.value, type=str(v.type))
    for node in graph.nodes:
        g.add_node(node.name, op=node.op.value, group=node.group.value, kind="node",
                   source_op=node.source.op)
    for node in graph.nodes:
        for operand in node.inputs:
            if operand is None:
                continue
            src = operand.producer.name if operand.producer is not None else operand.name
            if src not in g:  # a value captured from an enclosing graph
                g.add_node(src, op="outer", group="input", kind="outer", type=str(operand.type))
            g.add_edge(src, node.name, value=operand.name, dtype=operand.type.dtype.value,
                       shape=str(list(map(str, operand.type.shape))))
    return g
