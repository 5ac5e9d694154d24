"""``analyze``: bind dims, run the cost interpreter and assemble a :class:`Report`."""

from __future__ import annotations

from math import prod

from typing import Any

from ..errors import NarrowpipeError, UnboundDimError
from ..ir import Graph, OpGroup, ValueKind, format_shape
from .interpreter import CostTable, interpret
from .report import OpRow, Report, Unmodeled

__all__ = ["analyze", "resolve_bindings", "build_report"]


def resolve_bindings(graph: Graph, dims: dict[str, Any]) -> dict[str, int]:
    """The graph's default dims overridden by ``dims``; every symbol used must end up bound."""
    symbols = graph.symbols()
    known = set(symbols) | set(graph.dims) | _trip_count_names(graph)
    unknown = [k for k in dims if k not in known and not k.endswith("_trips")]
    if unknown:
        listed = ", ".join(sorted(known)) or "none (the graph is fully static)"
        raise NarrowpipeError(f"unknown dim(s) {', '.join(sorted(unknown))}; this graph's dims: {listed}")
    bindings = graph.default_bindings()
    for k, v in dims.items():
        try:
            n = int(v)
        except (TypeError, ValueError):
            raise NarrowpipeError(f"dim {k} must be an integer, got {v!r}") from None
        if n < 0:
            raise NarrowpipeError(f"dim {k} must be >= 0, got {n}")
        bindings[k] = n
    missing = sorted(s for s in symbols if s not in bindings)
    if missing:
        raise UnboundDimError(
            f"graph {graph.name!r} has unbound symbolic dim(s): {', '.join(missing)}; bind them with "
            f"--set {missing[0]}=VALUE (CLI) or analyze(graph, {missing[0]}=VALUE)")
    return bindings


def _trip_count_names(graph: Graph) -> set[str]:
    """Loop trip counts given by name: optional dims (a loop counts once, with a note, if unbound)."""
    from ..ir import node_subgraphs
    out: set[str] = set()
    for node in graph.nodes:
        trips = node.attrs.get("trip_count")
        if isinstance(trips, str):
            out.add(trips)
        for sub in node_subgraphs(node):
            out |= _trip_count_names(sub)
    return out


def build_report(table: CostTable) -> Report:
    graph = table.graph
    rows: list[OpRow] = []
    unmodeled_nodes = set(table.unmodeled)
    flops_by_group: dict[str, int] = {g.value: 0 for g in OpGroup}
    bytes_by_group: dict[str, int] = {g.value: 0 for g in OpGroup}
    flops = trans = nbytes = comm = 0
    for node, cost in table.costs.items():
        group = node.group.value
        for g, c in table.body_groups.get(node, {node.group: cost}).items():
            flops_by_group[g.value] += c.flops
            bytes_by_group[g.value] += c.bytes
        flops += cost.flops
        trans += cost.transcendentals
        nbytes += cost.bytes
        comm += cost.comm_bytes
        out = node.outputs[0] if node.outputs else None
        rows.append(OpRow(
            name=node.name, op=node.label, group=group, flops=cost.flops, bytes=cost.bytes,
            transcendentals=cost.transcendentals, bytes_read=cost.bytes_read,
            bytes_written=cost.bytes_written, comm_bytes=cost.comm_bytes, source_op=node.source.op,
            scope=node.source.scope, shape=format_shape(table.shapes[out]) if out is not None else "",
            dtype=out.type.dtype.value if out is not None else "", modeled=node not in unmodeled_nodes))
    counts: dict[str, int] = {}
    for node in table.unmodeled:
        counts[node.label] = counts.get(node.label, 0) + 1
    unmodeled = [Unmodeled(op, n) for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    params = sum(prod(table.shapes[v]) for v in graph.weights if v.kind is ValueKind.PARAM)
    weight_bytes = sum(v.type.dtype.nbytes(prod(table.shapes[v])) for v in graph.weights)
    return Report(graph=graph.name, dims=dict(table.bindings), flops=flops, transcendentals=trans,
                  bytes=nbytes, comm_bytes=comm, params=params, weight_bytes=weight_bytes,
                  peak_activation_bytes=table.peak_activation_bytes,
                  flops_by_group=flops_by_group, bytes_by_group=bytes_by_group,
                  ops=rows, unmodeled=unmodeled, notes=list(table.notes))


def range_notes(graph: Graph, bindings: dict[str, int]) -> list[str]:
    """Bindings outside the range a dim was exported for: the graph may not hold there."""
    notes = []
    for name, value in bindings.items():
        spec = graph.dims.get(name)
        if spec is None:
            continue
        if (spec.min is not None and value < spec.min) or (spec.max is not None and value > spec.max):
            notes.append(f"{name}={value} is outside the range the graph was exported for "
                         f"[{spec.min if spec.min is not None else '-inf'}, {spec.max if spec.max is not None else 'inf'}]; "
                         f"the program may differ at that size")
    return notes


def analyze(graph: Graph, target: Any = None, strict: bool = False, *, fusion: str | None = None,
            allow_tf32: bool = False, sparse: bool = False, price: float | None = None, **dims: Any) -> Report:
    """Count every op of ``graph`` under the bound dims and, given a target, time it there.

    ``target`` is a catalog name or alias, a path to a target TOML file, or a ``Target``.
    ``fusion`` ("full" or "none") overrides the family default; ``allow_tf32`` runs fp32 matmuls
    on TF32 tensor cores; ``sparse`` uses 2:4 sparse rates where the chip has them; ``price``
    overrides the target's USD per device-hour.
    """
    bindings = resolve_bindings(graph, dims)
    table = interpret(graph, bindings, strict=strict)
    report = build_report(table)
    report.notes.extend(range_notes(graph, bindings))
    if target is not None:
        from .targeted import apply_target  # the execution models, one per chip family
        report = apply_target(report, table, target, fusion=fusion, allow_tf32=allow_tf32, sparse=sparse,
                              price=price)
    return report

