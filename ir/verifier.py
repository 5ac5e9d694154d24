"""The graph verifier: checks the invariants every pass and cost rule relies on.

It collects every problem before raising, so a frontend bug shows all its symptoms at once. Besides
the structure (each value defined once and before use, producers and indices pointing back, use-lists
matching the inputs, no dangling uses) it checks each node's output type against its operands
(:mod:`.typecheck`). Frontends and the pass manager run it when ``NARROWPIPE_VERIFY=1`` (always in
the test suite), so a lowering that promises a shape it does not compute fails where it is made.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ..errors import VerificationError
from .dims import Sym
from .graph import Graph, Node, Use, Value, node_subgraphs
from .ops import Op
from .typecheck import type_problems

__all__ = ["verify", "problems", "verify_enabled", "maybe_verify", "ENV_FLAG"]

#: The debug flag: when set to 1, frontends and passes verify the graphs they produce.
ENV_FLAG = "NARROWPIPE_VERIFY"


def verify_enabled() -> bool:
    return os.environ.get(ENV_FLAG, "").strip().lower() in ("1", "true", "yes", "on")


def maybe_verify(graph: Graph, after: str) -> Graph:
    """Verify ``graph`` when the debug flag is on (frontends and the pass manager call this)."""
    return verify(graph, after) if verify_enabled() else graph


def verify(graph: Graph, after: str = "") -> Graph:
    """Raise :class:`VerificationError` listing every broken invariant; return the graph if none.

    ``after`` names what produced the graph (a frontend, a pass) for the message."""
    found = problems(graph)
    if found:
        shown = "\n  ".join(found[:50])
        more = f"\n  ... and {len(found) - 50} more" if len(found) > 50 else ""
        made = f" after {after}" if after else ""
        raise VerificationError(f"graph {graph.name!r} failed verification{made}:\n  {shown}{more}")
    return graph


def _where(node: Node) -> str:
    src = node.source.describe()
    return f"node {node.name!r} ({node.label})" + (f" from {src}" if src else "")


def problems(graph: Graph, outer: Iterable[Value] = ()) -> list[str]:
    """Every invariant violation found in ``graph`` (values in ``outer`` are visible, as in ONNX)."""
    out: list[str] = []
    defined: set[Value] = set(outer)
    names: set[str] = set()
    mine: list[Value] = []

    def define(v: Value, where: str) -> None:
        if v in defined:
            out.append(f"{where}: value {v.name!r} defined twice")
        defined.add(v)
        mine.append(v)
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
        out.extend(_check_node(node, graph, defined))
        for sub in node_subgraphs(node):
            out.extend(f"{node.name}/{p}" for p in problems(sub, defined))
        for i, v in enumerate(node.outputs):
            if v.producer is not node or v.index != i:
                out.append(f"{_where(node)}: output {i} ({v.name!r}) does not point back to it")
            define(v, _where(node))
    for v in graph.outputs:
        if v not in defined:
            out.append(f"graph output {v.name!r} is not defined")
    out.extend(_dangling_uses(mine))
    return out


def _check_node(node: Node, graph: Graph, defined: set[Value]) -> list[str]:
    where = _where(node)
    if not isinstance(node.op, Op):
        return [f"{where}: not a canonical op"]
    out: list[str] = []
    if node.owner is not graph:
        out.append(f"{where}: owner is not the graph that lists it")
    for i, v in enumerate(node.inputs):
        if v is None:
            continue
        if v not in defined:
            out.append(f"{where}: input {i} ({v.name!r}) used before it is defined")
        if Use(node, i) not in v.uses:
            out.append(f"{where}: input {i} ({v.name!r}) is missing from the value's use-list")
    if not out:
        out.extend(f"{where}: {reason}" for reason in type_problems(node))
    return out


def _dangling_uses(values: Iterable[Value]) -> list[str]:
    """Use-list entries that point at removed nodes or at inputs that read something else."""
    out: list[str] = []
    for v in values:
        for use in v.uses:
            node = use.node
            if node.owner is None or not 0 <= use.index < len(node.inputs) or node.inputs[use.index] is not v:
                out.append(f"value {v.name!r}: dangling use by {node.name!r} input {use.index}")
    return out
