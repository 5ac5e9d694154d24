"""The rows of a report and its totals, from a cost table: node by node, or class by class.

Why two ways: a graph costed by class (:mod:`.costcache`) has a few hundred distinct costs for a
hundred thousand nodes, so its totals are sums over classes (count x cost, exact integers) and each
class formats its shape once; only the row itself (name, scope) is per node.
"""

from __future__ import annotations

from ..ir import Op, format_shape
from .cost import Cost
from .interpreter import CostTable
from .report import OpRow, row_defaults

__all__ = ["node_rows", "class_rows"]

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


def class_rows(table: CostTable, flops_by_group: dict[str, int],
               bytes_by_group: dict[str, int]) -> tuple[list[OpRow], Totals]:
    """The same rows and totals as :func:`node_rows`, for a table costed by class."""
    index = table.index
    assert index is not None
    unmodeled = set(table.unmodeled)
    totals = [0, 0, 0, 0]

    def add(node_group: str, cost: Cost, k: int) -> None:
        flops_by_group[node_group] += cost.flops * k
        bytes_by_group[node_group] += cost.bytes * k
        totals[0] += cost.flops * k
        totals[1] += cost.transcendentals * k
        totals[2] += cost.bytes * k
        totals[3] += cost.comm_bytes * k

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
            add(node.group.value, cost, index.counts[c] if c >= 0 else 1)
            if c >= 0:
                common[c] = fields
        source = node.source
        if node.op is Op.UNKNOWN:   # its label is its source op, which its class does not fix
            rows.append(OpRow.from_fields(fields, name=node.name, source_op=source.op, scope=source.scope,
                                          op=node.label))
        else:
            rows.append(OpRow.from_fields(fields, name=node.name, source_op=source.op, scope=source.scope))
    return rows, (totals[0], totals[1], totals[2], totals[3])
