"""Routing a kernel to the unit that runs it, once for every family.

Views and unmodeled nodes take no time; collectives go to the interconnect model on the target's
topology; fused attention, GEMM-shaped kernels (matmul, convolution) and everything else go to the
family's :class:`UnitTimes` hooks. A family says how its units run each kind; it never decides
which kind a kernel is.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Protocol
from weakref import WeakKeyDictionary

from ...ir import Node, Op
from ..costcache import node_signature
from ..kernels import Kernel
from .collectives import collective_time
from .common import ZERO_TIME, KernelTime
from .gemm import Gemm, kernel_gemms
from .program import Program

__all__ = ["UnitTimes", "kernel_time", "kernel_times", "kernel_signature"]


class UnitTimes(Protocol):
    """How one family's units time each kind of kernel on ``target``."""

    def gemm(self, kernel: Kernel, g: Gemm, program: Program, target: Any) -> KernelTime:
        ...

    def attention(self, kernel: Kernel, program: Program, target: Any) -> KernelTime:
        ...

    def vector(self, kernel: Kernel, program: Program, target: Any) -> KernelTime:
        ...


def _unmodeled(kernel: Kernel) -> bool:
    return any(n.op is Op.UNKNOWN for n in kernel.nodes)


def kernel_time(kernel: Kernel, program: Program, target: Any, units: UnitTimes) -> KernelTime:
    """The time of one kernel on ``target``, by the unit its kind runs on."""
    if kernel.is_free or _unmodeled(kernel):
        return ZERO_TIME
    if kernel.kind == "collective":
        return collective_time(kernel.anchor, kernel.cost, target, program.options.topology)
    if kernel.kind == "attention":
        return units.attention(kernel, program, target)
    gemms = kernel_gemms(program.table, kernel)
    if gemms and min(gemms[0].batch, gemms[0].m, gemms[0].n, gemms[0].k) > 0:
        return units.gemm(kernel, gemms[0], program, target)
    # an empty GEMM (a MoE expert group no row reaches at this binding) has no tiles to run: its
    # kernel is what remains, memory traffic and epilogue, on the vector units
    return units.vector(kernel, program, target)


def kernel_times(program: Program, target: Any, units: UnitTimes) -> list[KernelTime]:
    """Every kernel's time; from a program's second timing on, each distinct kernel is timed once.
    A model repeats the same block in every layer, and a family whose kernel times depend only on
    the kernel (GPU, TPU) gives the copies one answer: a 25-target ``compare`` of Llama-3-8B times
    each program six times (the run and the sensitivity's doubled resources), 32 identical layers
    each time. A program timed once (serving's steps, one per batch) is not worth classifying."""
    classes = _classes(program)
    if classes is None:
        return [kernel_time(k, program, target, units) for k in program.kernels]
    memo: dict[int, KernelTime] = {}
    out = []
    for kernel, c in zip(program.kernels, classes):
        if c is None:
            out.append(kernel_time(kernel, program, target, units))
            continue
        t = memo.get(c)
        if t is None:
            t = memo[c] = kernel_time(kernel, program, target, units)
        out.append(t)
    return out


def kernel_signature(kernel: Kernel, node_class: Callable[[Node], Hashable | None] = node_signature
                     ) -> Hashable | None:
    """Everything a unit's hooks read of ``kernel``: its kind and cost, each node's class (op,
    attributes, operand and result types: :func:`~..costcache.node_signature`), the wiring inside
    it (which node's output each operand is, or an outside value: a GEMM's fused dequantization is
    found through it) and which values leave it. None where a node has no exact class."""
    where: dict[int, tuple[int, int]] = {}
    nodes = []
    for i, n in enumerate(kernel.nodes):
        sig = node_class(n)
        if sig is None:
            return None
        nodes.append((sig, tuple(where.get(id(v), (-1, -1)) if v is not None else None for v in n.inputs)))
        for j, v in enumerate(n.outputs):
            where[id(v)] = (i, j)
    anchor = next((i for i, n in enumerate(kernel.nodes) if n is kernel.anchor), -1)
    return (kernel.kind, kernel.cost, anchor, tuple(nodes),
            tuple(where.get(id(v), (-1, -1)) for v in kernel.outputs), tuple(v.type for v in kernel.inputs))


def _classes(program: Program) -> list[int | None] | None:
    """Each kernel's class (kernels with equal signatures share one number), worked out on the
    program's second timing and kept: hashing the signatures again at each timing cost as much as
    the timing it saved. None on the first timing, unless another binding of the same graph and
    kernel partition classed them already (:func:`_shared_classes`)."""
    classes = _CLASSES.get(program, _FIRST)
    if classes is _FIRST:
        shared = _shared_classes(program)
        _CLASSES[program] = shared
        return shared
    if classes is None or len(classes) != len(program.kernels):
        classes = _CLASSES[program] = _classify(program)
    return classes


def _classify(program: Program) -> list[int | None]:
    ids: dict[Hashable, int] = {}
    node_class = _node_classes(program)
    return [None if (sig := kernel_signature(k, node_class)) is None else ids.setdefault(sig, len(ids))
            for k in program.kernels]


def _shared_classes(program: Program) -> list[int | None] | None:
    """The classes of a program whose graph another binding already classed, kept with the graph's
    cost index beside its kernel partition: serving times each of hundreds of batch and context
    bindings once. Exact across bindings: the node classes are (equal signatures cost the same
    under every binding), so kernels that share a class at one binding share it at all. The
    second program with the same kernels (same anchors) classes them; a first one does not pay."""
    index = program.table.index
    if index is None or not index.flat or index.version != program.table.graph.version:
        return None
    anchors = tuple(id(k.anchor) for k in program.kernels)
    key = ("kernel-classes", program.options.fusion)
    seen = index.partitions.get(key)
    if seen is None or seen[0] != anchors:
        index.partitions[key] = (anchors, None)
        return None
    if seen[1] is None:
        index.partitions[key] = (anchors, _classify(program))
    return index.partitions[key][1]


def _node_classes(program: Program) -> Callable[[Node], Hashable | None]:
    """A node's class from the cost table's graph index (:mod:`..costcache`: nodes of one class have
    equal signatures), else its signature."""
    table = program.table
    index = table.index
    if index is None or not index.flat or index.version != table.graph.version:
        return node_signature
    position = {n: i for i, n in enumerate(table.graph.nodes)}
    node_class = index.node_class

    def classify(n: Node) -> Hashable | None:
        i = position.get(n)
        if i is None:
            return node_signature(n)
        c = node_class[i]
        return None if c < 0 else c
    return classify


_FIRST: list[int | None] = []
_CLASSES: WeakKeyDictionary[Program, list[int | None] | None] = WeakKeyDictionary()
