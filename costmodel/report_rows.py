"""The rows of a report and its totals, from a cost table: node by node, or class by class.

Why two ways: a graph costed by class (:mod:`.costcache`) has a few hundred distinct costs for a
hundred thousand nodes, so its totals are sums over classes (count x cost, exact integers, no walk
over the nodes) and its rows are built only when read (:class:`.lazy_rows.LazyRows`), each class
formatting its shape once; only the row itself (name, scope) is per node.
"""

from __future__ import annotations

from ..ir import Op, format_shape
from .interpreter import CostTable
from .report import OpRow, row_defaults

__all__ = ["node_rows", "class_rows", "class_totals"]

Totals = tuple[int, int, int, int]   # flops, transcendentals, bytes, comm bytes


def node_rows(table: CostTable, flops_by_group: dict[str, int],
              bytes_by_group: dict[str, int]) -> tuple[list[OpRow], Totals]:
    """One row per costed node; adds each node's cost to the group totals (a control-flow node's
    by the groups of its bodies' ops)."""
    rows: list[OpRow] = []
    unmodeled = set(table.unmodeled)
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
            dtype=out.type.dtype.value if out is not None else "", modeled=node not in unmodeled,
            phase=node.attrs.get("phase")))
    return rows, (flops, trans, nbytes, comm)


def class_totals(table: CostTable, flops_by_group: dict[str, int],
                 bytes_by_group: dict[str, int]) -> Totals:
    """The totals :func:`node_rows` gives, for a table costed by class: each class's cost times
    its node count, from the first node of each class (``cost_points``) without a walk over the rest."""
    index = table.index
    assert index is not None
    nodes = table.graph.nodes
    costs = table.costs
    node_class, counts = index.node_class, index.counts
    flops = trans = nbytes = comm = 0
    for i in index.cost_points:
        node = nodes[i]
        cost = costs[node]
        c = node_class[i]
        k = counts[c] if c >= 0 else 1
        g = node.group.value
        flops_by_group[g] += cost.flops * k
        bytes_by_group[g] += cost.bytes * k
        flops += cost.flops * k
        trans += cost.transcendentals * k
        nbytes += cost.bytes * k
        comm += cost.comm_bytes * k
    return flops, trans, nbytes, comm


def class_rows(table: CostTable) -> list[OpRow]:
    """The rows :func:`node_rows` gives, for a table costed by class: the fields every node of a
    class shares are made once per class; only name, scope and source op are per node."""
    index = table.index
    assert index is not None
    unmodeled = set(table.unmodeled)
    #: per class, the row fields every node of the class shares
    common: list[dict[str, object] | None] = [None] * len(index.counts)
    defaults = row_defaults()
    rows: list[OpRow] = []
    for node, c in zip(table.costs, index.node_class):
        fields = common[c] if c >= 0 else None
        if fields is None:
            cost = table.costs[node]
            out = node.outputs[0] if node.outputs else None
            fields = {
                **defaults, "op": node.label, "group": node.group.value, "flops": cost.flops, "bytes": cost.bytes,
                "transcendentals": cost.transcendentals, "bytes_read": cost.bytes_read,
                "bytes_written": cost.bytes_written, "comm_bytes": cost.comm_bytes,
                "shape": format_shape(table.shapes[out]) if out is not None else "",
                "dtype": out.type.dtype.value if out is not None else "",
                "modeled": node not in unmodeled, "phase": node.attrs.get("phase")}
            if c >= 0:
                common[c] = fields
        source = node.source
        if node.op is Op.UNKNOWN:   # its label is its source op, which its class does not fix
            rows.append(OpRow.from_fields(fields, name=node.name, source_op=source.op, scope=source.scope,
                                          op=node.label))
        else:
            rows.append(OpRow.from_fields(fields, name=node.name, source_op=source.op, scope=source.scope))
    return rows
