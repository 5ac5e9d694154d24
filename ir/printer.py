"""A readable text form of a graph, one node per line, for debugging and golden tests."""

from __future__ import annotations

from typing import Any

from .graph import Graph, Node, node_subgraphs

__all__ = ["format_graph"]


def _attr(v: Any) -> str:
    if isinstance(v, Graph):
        return f"<graph {v.name}>"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_attr(x) for x in v) + "]"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _node_line(node: Node) -> str:
    outs = ", ".join(f"%{v.name}: {v.type}" for v in node.outputs) or "()"
    ins = ", ".join("_" if v is None else f"%{v.name}" for v in node.inputs)
    attrs = {k: v for k, v in node.attrs.items() if not isinstance(v, Graph)}
    attr_text = (" {" + ", ".join(f"{k}={_attr(v)}" for k, v in sorted(attrs.items())) + "}") if attrs else ""
    where = node.source.describe()
    comment = f"  # {where}" if where else ""
    return f"{outs} = {node.op.value}({ins}){attr_text}{comment}"


def format_graph(graph: Graph, indent: str = "") -> str:
    """Render ``graph`` as text; nested bodies of control-flow ops are indented below their node."""
    lines = []
    ins = ", ".join(f"%{v.name}: {v.type}" for v in graph.inputs)
    lines.append(f"{indent}graph {graph.name}({ins}) {{")
    if graph.dims:
        dims = ", ".join(f"{d.name}={d.default}" if d.default is not None else d.name for d in graph.dims.values())
        lines.append(f"{indent}  dims {dims}")
    for w in graph.weights:
        lines.append(f"{indent}  {w.kind.value} %{w.name}: {w.type}")
    for node in graph.nodes:
        lines.append(f"{indent}  {_node_line(node)}")
        for sub in node_subgraphs(node):
            lines.append(format_graph(sub, indent + "    "))
    outs = ", ".join(f"%{v.name}" for v in graph.outputs)
    lines.append(f"{indent}  return {outs}")
    lines.append(f"{indent}}}")
    return "\n".join(lines)
