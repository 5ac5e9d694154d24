"""Recognising communication in a trace and giving a collective's sizes a one-node IR graph.

NCCL kernels, ``c10d::`` ops and ``record_param_comms`` name their collective in free text
(``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``, ``allreduce``); the recorded element counts and group
size then become one collective node, so :mod:`.rules` gives the bytes each rank sends.
"""

from __future__ import annotations

from ...ir import DType, Graph, Op, TensorType

__all__ = ["collective_kind", "collective_graph"]

_COLLECTIVES = (("reducescatter", Op.REDUCE_SCATTER), ("reduce_scatter", Op.REDUCE_SCATTER),
                ("allreduce", Op.ALL_REDUCE), ("all_reduce", Op.ALL_REDUCE),
                ("allgather", Op.ALL_GATHER), ("all_gather", Op.ALL_GATHER),
                ("alltoall", Op.ALL_TO_ALL), ("all_to_all", Op.ALL_TO_ALL),
                ("broadcast", Op.BROADCAST), ("sendrecv", Op.SEND), ("send", Op.SEND), ("recv", Op.RECV))
_COMM_MARKERS = ("nccl", "c10d::", "record_param_comms", "gloo:", "rccl", "all_reduce", "allreduce",
                 "all_gather", "allgather", "reduce_scatter", "reducescatter", "all_to_all", "alltoall")


def collective_kind(name: str) -> tuple[bool, Op | None]:
    """(is this communication?, which collective) from an op or kernel name."""
    low = name.lower()
    if not any(m in low for m in _COMM_MARKERS):
        return False, None
    for key, op in _COLLECTIVES:
        if key in low:
            return True, op
    return True, None


def collective_graph(name: str, op: Op, in_elems: int, out_elems: int, dtype: DType, group: int) -> Graph:
    """One collective node over flat buffers, so :mod:`.rules` gives the bytes each rank sends."""
    g = Graph(name)
    x = g.add_input("buf", TensorType(dtype, (max(in_elems, 0),)))
    y = g.add_node(op, [x], [TensorType(dtype, (max(out_elems, 0),))], {"group_size": max(group, 1)})
    g.set_outputs(y.outputs)
    return g
