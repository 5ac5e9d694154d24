"""Fresh pages: what a CPU op pays when it allocates a buffer the allocator maps anew from the OS.

Eager PyTorch allocates every op's output with malloc, and oneDNN some temporaries. glibc serves a
request of at least its mmap threshold (32 MiB at most on 64-bit; ``fresh_page_threshold``) with a
fresh ``mmap`` and gives it back with ``munmap`` when freed, so such a buffer is new memory on
every call: the first touch of each page faults into the kernel, which zeroes it. On the
development host that costs about 0.5 ms of CPU time per MiB, 15-20x a streaming write of the same
bytes (a 37 MiB ReLU output: ~20 ms instead of ~1.3 ms); smaller buffers come back from the heap's
free lists already mapped. ``calibrate`` measures the rate (``fresh_page_bandwidth``).

What this leaves out depends on the process's allocation history: glibc also returns the top of
its heap to the OS past ``M_TRIM_THRESHOLD`` and grows it again (faults on smaller buffers), and a
large request can land in a hole earlier frees left in the heap (no faults). The validation counts
each forward's page faults beside the bytes charged here (``benchmarks/results/cpu_validate.md``).

Which buffers a node allocates:

* its outputs, unless it is a view, writes in place (an aten op whose name ends in ``_``, or a
  node marked ``in_place``), or is not the last of the nodes one source op was lowered to (a linear
  layer's matmul and bias add are one ``addmm`` writing one buffer);
* a convolution other than a 1x1 stride-1 one also reorders its input and its output through
  oneDNN blocked-layout temporaries of their sizes (measured: a 3x3 or depthwise convolution's time
  jumps by the fresh-page time of its input when the input crosses 32 MiB, and by twice that of its
  output when the output does; a 1x1 stride-1 convolution's jumps only by its output's).
"""

from __future__ import annotations

from collections.abc import Iterator
from weakref import WeakKeyDictionary

from ...backends import CpuTarget
from ...backends.defaults import default_value
from ...ir import IN_PLACE, VIEW_OPS, Graph, Node, Op, Value
from ..interpreter import CostTable
from ..kernels import Kernel
from ..sizes import value_bytes

__all__ = ["fresh_bytes", "fresh_page_time", "allocations"]


def _writes_in_place(node: Node) -> bool:
    if IN_PLACE in node.attrs:
        return True
    parts = (node.source.op or "").split(".")
    name = parts[1] if len(parts) > 1 and parts[0] == "aten" else ""
    return name.endswith("_") and not name.endswith("__")


def _reorders(table: CostTable, node: Node) -> bool:
    """A convolution oneDNN runs on its blocked layout (all but 1x1 stride-1 ones, run as GEMMs)."""
    w = node.inputs[1] if len(node.inputs) > 1 else None
    if node.op is not Op.CONV or w is None:
        return False
    kernel = table.shapes[w][2:]
    strides = node.attrs.get("stride") or (1,) * len(kernel)
    return any(int(d) != 1 for d in kernel) or any(int(s) != 1 for s in strides)


def _inner_nodes(graph: Graph) -> set[Node]:
    """Nodes followed by another node lowered from the same source op call (its intermediates live
    inside that one library call)."""
    cached = _INNER.get(graph)
    if cached is not None and cached[0] == graph.version:
        return cached[1]
    inner: set[Node] = set()
    nodes = graph.nodes
    for a, b in zip(nodes, nodes[1:]):
        if a.source.name and a.source.name == b.source.name and a.source.op == b.source.op:
            inner.add(a)
    _INNER[graph] = (graph.version, inner)
    return inner


_INNER: WeakKeyDictionary[Graph, tuple[int, set[Node]]] = WeakKeyDictionary()


def allocations(node: Node, table: CostTable) -> Iterator[Value]:
    """The buffers ``node`` allocates when it runs eagerly (temporaries as the values they copy)."""
    if node.op in VIEW_OPS or node.op is Op.UNKNOWN:
        return
    if not _writes_in_place(node) and node not in _inner_nodes(table.graph):
        yield from node.outputs
    if _reorders(table, node):
        x = node.inputs[0]
        if x is not None:
            yield x
        yield from node.outputs


def fresh_bytes(kernel: Kernel, table: CostTable, threshold: float) -> int:
    """Bytes of the kernel's allocations at least ``threshold`` large (each one mapped fresh)."""
    total = 0
    for node in kernel.nodes:
        for value in allocations(node, table):
            nbytes = value_bytes(table, value)
            if nbytes >= threshold:
                total += nbytes
    return total


def fresh_page_time(kernel: Kernel, table: CostTable, target: CpuTarget) -> float:
    """Seconds the kernel spends faulting in and zeroing fresh pages (0 where the target has no rate)."""
    if not target.fresh_page_bandwidth or kernel.is_free:
        return 0.0
    threshold = default_value("cpu", "fresh_page_threshold", target.fresh_page_threshold)
    return fresh_bytes(kernel, table, threshold) / target.fresh_page_bandwidth
