"""Fusion: group the nodes of a counted graph into the kernels a real compiler or runtime launches.

What fuses follows what production stacks do (torch.compile/Inductor, XLA, serving engines):

* views are free and launch nothing;
* elementwise epilogues fuse into their producer (bias, activation, residual add after a matmul);
* chains of elementwise ops fuse, and fuse into a following reduction or normalization; a
  concatenation fuses as the pointwise copy it is;
* a value several nodes read fuses with them when they all end up in one kernel (a norm's ``x``
  read by ``pow`` and ``mul``, RoPE's ``q`` by both branches, a tanh GELU's input): Inductor and XLA
  run such a diamond as one kernel (:mod:`.shared_fusion`), reading each outside input once;
* an inference batch norm (running statistics) is a per-channel affine and fuses as an elementwise
  op: into the convolution or matmul before it and on into the activation and residual add after
  (:func:`is_affine_norm`); a training-mode batch norm reduces and stays a normalization;
* layout changes (permute, copy, cast) feeding a matmul are absorbed by it, and so are a stored
  weight's dequantization (weight-only kernels) and both operands' of a QDQ integer GEMM
  (:mod:`.dequant_fusion` says why);
* eager attention (QK^T, scale/mask, softmax, an exporter's NaN guard, PV) becomes one fused
  attention kernel, with the scalar scales and transposes feeding QK^T (:mod:`.attention_fusion`);
* at most one heavy op (matmul, conv, attention) per kernel; collectives never fuse;
* in a training step, nodes of different phases never fuse (AOTAutograd compiles the forward and the
  backward as separate graphs), and each parameter's optimizer update is one kernel (torch's fused
  AdamW, apex's FusedAdam): it reads the gradient and states once and writes the states back.

A kernel's bytes are its external traffic only: inputs produced outside it and outputs used outside
it (or returned). ``mode="none"`` gives one kernel per op (eager PyTorch); ``mode="no-epilogue"`` fuses as ``full``
except into matmuls and attention (library GEMMs called from an eager framework, whose hand-written
fused kernels cover the elementwise chains: Megatron-LM's bias-GeLU and bias-dropout-add).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from math import prod

from ..ir import IN_PLACE, STRIDED_VIEW, VIEW_OPS, Graph, Node, Op, OpGroup, Value, ValueKind
from .attention_fusion import LAYOUT, OWN_KERNEL, fuse_attention
from .cost import Cost
from .costcache import graph_index
from .dequant_fusion import runs_in_gemm
from .interpreter import CostTable
from .shared_fusion import join_shared_producers

__all__ = ["Kernel", "fuse", "FUSION_MODES", "OWN_KERNEL", "is_affine_norm"]

FUSION_MODES = ("full", "no-epilogue", "none")

_HEAVY = frozenset({Op.DOT, Op.GROUPED_DOT, Op.CONV, Op.ATTENTION, Op.ATTENTION_BACKWARD})
_PHASE = "phase"   # a training step's phase attr (costmodel.training.phases.PHASE)


@dataclass
class Kernel:
    """One launched unit of work: a group of nodes, its summed work and its external traffic."""

    name: str
    kind: str                       # matmul, conv, attention, elementwise, reduction, ..., view
    nodes: list[Node]
    anchor: Node                    # the node whose shape defines the kernel (the heavy op if any)
    cost: Cost
    inputs: list[Value] = field(default_factory=list)    # external inputs (after looking through views)
    outputs: list[Value] = field(default_factory=list)   # values leaving the kernel

    @property
    def is_free(self) -> bool:
        return self.kind == "view"


def _kind(node: Node) -> str:
    op = node.op
    if op in VIEW_OPS:
        return "view"
    if op is Op.DOT or op is Op.GROUPED_DOT:
        return "matmul"
    if op is Op.CONV:
        return "conv"
    if op in (Op.ATTENTION, Op.ATTENTION_BACKWARD):
        return "attention"
    return {OpGroup.ELEMENTWISE: "elementwise", OpGroup.REDUCTION: "reduction",
            OpGroup.NORMALIZATION: "normalization", OpGroup.DATA_MOVEMENT: "copy",
            OpGroup.GATHER_SCATTER: "gather_scatter", OpGroup.COLLECTIVE: "collective"}.get(node.group, "other")


class _Groups:
    """Union-find over node indices, tracking each group's first index, heavy-op count and members."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))
        self.first = list(range(n))
        self.heavy = [0] * n
        self.members: list[list[int]] = [[i] for i in range(n)]

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> int:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return ra
        self.parent[rb] = ra
        self.first[ra] = min(self.first[ra], self.first[rb])
        self.heavy[ra] += self.heavy[rb]
        self.members[ra].extend(self.members[rb])
        self.members[rb] = []
        return ra


def fuse(table: CostTable, mode: str = "full") -> list[Kernel]:
    """Partition the top-level nodes of ``table.graph`` into kernels, in program order, each with
    the cost of its nodes under the table's binding. The partition is structural and kept with the
    graph's cost index (rebuilt when the graph changes); only the costs are per binding."""
    if mode not in FUSION_MODES:
        raise ValueError(f"unknown fusion mode {mode!r}; choose from {', '.join(FUSION_MODES)}")
    graph = table.graph
    partitions = graph_index(graph).partitions
    part = partitions.get(mode)
    if part is None:
        part = partitions[mode] = _partition(graph, mode)
    return _kernels(table, graph.nodes, *part)


def _partition(graph: Graph, mode: str) -> tuple[list[list[int]], dict[Value, Value], dict[Value, list[Node]],
                                                  set[Value]]:
    """The kernels of ``graph`` under ``mode`` as lists of node positions, in program order, with the
    view bases, consumers and graph outputs the kernels' traffic is counted from."""
    nodes = graph.nodes
    index = {n: i for i, n in enumerate(nodes)}
    base = _view_bases(graph)
    consumers = _consumers(graph, base)
    groups = _Groups(len(nodes))
    for i, n in enumerate(nodes):
        groups.heavy[i] = 1 if n.op in _HEAVY else 0
    outputs = {base.get(v, v) for v in graph.outputs}
    # in every mode: the runtime runs the quantized format that way (dequant_fusion.py), not a compiler;
    # and a framework's strided view is read by its consumer, eager or compiled
    in_gemm = _fuse_gemm_dequants(nodes, index, base, consumers, groups, outputs)
    _join_strided_views(nodes, index, base, consumers, groups, outputs)
    if mode in ("full", "no-epilogue"):
        if mode == "full":
            fuse_attention(nodes, index, base, consumers, groups)
        _fuse_optimizer_updates(nodes, groups)

        def takes_fusion(node: Node) -> bool:
            """A node that fuses with what it reads (not a view, a collective, an unmodeled op, a
            kernel of its own, or a GEMM that already took its dequantizations)."""
            return not (node.op in VIEW_OPS or node.group is OpGroup.COLLECTIVE or node.op is Op.UNKNOWN or
                        node.attrs.get(OWN_KERNEL) or node in in_gemm)

        def pair_fuses(p: Node, reader: Node) -> bool:
            """The producer side of the rule (library GEMMs take no epilogue in no-epilogue mode)."""
            return not p.attrs.get(OWN_KERNEL) and not (mode == "no-epilogue" and p.op in _HEAVY) and \
                _fusable(p, reader)

        for i, node in enumerate(nodes):
            if not takes_fusion(node):
                continue
            for v in node.inputs:
                if v is None:
                    continue
                b = base.get(v, v)
                p = b.producer
                if p is None or p not in index or p.op in VIEW_OPS:
                    continue
                j = index[p]
                if b in outputs or len(consumers.get(b, ())) != 1 or p.attrs.get(_PHASE) != node.attrs.get(_PHASE):
                    continue
                if pair_fuses(p, node) and _acyclic(node, j, i, groups, index, base) and \
                        groups.heavy[groups.find(j)] + groups.heavy[groups.find(i)] <= 1:
                    groups.union(j, i)

        def can_join(p: Node, reader: Node) -> bool:
            """The single-reader rule above, for one reader of a value several nodes read."""
            return takes_fusion(reader) and pair_fuses(p, reader)
        join_shared_producers(nodes, index, base, consumers, groups, outputs, can_join)
    members: dict[int, list[int]] = {}
    for i in range(len(nodes)):
        members.setdefault(groups.find(i), []).append(i)
    return [members[r] for r in sorted(members, key=lambda r: groups.first[r])], base, consumers, outputs


def _fuse_gemm_dequants(nodes: list[Node], index: dict[Node, int], base: dict[Value, Value],
                        consumers: dict[Value, list[Node]], groups: _Groups, outputs: set[Value]) -> set[Node]:
    """Each dequantization a GEMM runs in its operand load (:mod:`.dequant_fusion`) joins that GEMM,
    first, so a QDQ GEMM takes both operands' (its activation's QUANTIZE then fuses into the op
    before it, not into the GEMM); returns those dequantizations. Acyclic: each has the GEMM as its
    only consumer, so no path leaves it but into the GEMM."""
    joined: set[Node] = set()
    for i, node in enumerate(nodes):
        if node.op not in _HEAVY:
            continue
        for v in node.inputs[:2]:
            if v is None:
                continue
            b = base.get(v, v)
            p = b.producer
            if p is None or p not in index or b in outputs or len(consumers.get(b, ())) != 1 or \
                    p.attrs.get(_PHASE) != node.attrs.get(_PHASE) or not runs_in_gemm(p, node):
                continue
            groups.union(i, index[p])
            joined.add(p)
    return joined


def _join_strided_views(nodes: list[Node], index: dict[Node, int], base: dict[Value, Value],
                        consumers: dict[Value, list[Node]], groups: _Groups, outputs: set[Value]) -> None:
    """A ``STRIDED_VIEW`` permute (torch's ``transpose``: a view) joins its one consumer's kernel, which
    reads the input through the swapped strides: eager PyTorch launches no kernel for it (QA: a
    transpose of [8, 1024, 1024] fp32 measured 1.5 us; it was timed as a 134 MB copy), and a
    ``contiguous()`` after it is the one copy. Acyclic: the consumer is the view's only reader."""
    for j, node in enumerate(nodes):
        if node.op is not Op.PERMUTE or not node.attrs.get(STRIDED_VIEW) or not node.outputs:
            continue
        out = node.outputs[0]
        readers = consumers.get(base.get(out, out), ())
        if out in outputs or len(readers) != 1:
            continue
        reader = readers[0]
        if reader.op in VIEW_OPS or reader.group is OpGroup.COLLECTIVE or reader.op is Op.UNKNOWN or \
                reader not in index or reader.attrs.get(_PHASE) != node.attrs.get(_PHASE):
            continue
        groups.union(index[reader], j)


def _fuse_optimizer_updates(nodes: list[Node], groups: _Groups) -> None:
    """One kernel per parameter's optimizer update (its nodes share the parameter's source name)."""
    first: dict[str, int] = {}
    for i, node in enumerate(nodes):
        if node.attrs.get(_PHASE) == "optimizer" and node.op not in VIEW_OPS:
            j = first.setdefault(node.source.name, i)
            if j != i:
                groups.union(j, i)


def is_affine_norm(node: Node) -> bool:
    """An inference batch norm (running statistics: ``training`` false, as the frontends set it from
    ONNX ``training_mode``/its output count and torch's ``training`` argument) is a per-channel
    ``x * a + b``: no reduction over its input, so compilers fuse it like any elementwise epilogue
    (XLA into the convolution's output fusion; onnxruntime and TensorRT fold it into the weights).
    Training-mode batch norm reduces over N and spatial dims, and its backward is a reduction too."""
    return node.op is Op.BATCH_NORM and not node.attrs.get("training", False) and node.attrs.get("role") != "grad"


def _group(node: Node) -> OpGroup:
    """The group a node fuses as: an inference batch norm as the elementwise affine it is, and a
    concatenation as the pointwise copy it is (each output element one input element at a shifted
    index: Inductor lowers a ``cat`` among pointwise ops as a pointwise loop, XLA fuses
    ``concatenate`` into loop fusions), so RoPE's ``rotate_half`` fuses with its ``neg`` and ``mul``.
    Not a cache append: one done in place writes a slice of a storage that outlives the kernel, and
    one onto a program input (an eager step's ``cat(past, new)``) is the append the serving path runs
    in place as a copy of its own (vLLM's ``reshape_and_cache``), so both paths time one program."""
    pointwise_cat = node.op is Op.CONCAT and IN_PLACE not in node.attrs and not _onto_input(node)
    return OpGroup.ELEMENTWISE if is_affine_norm(node) or pointwise_cat else node.group


def _onto_input(node: Node) -> bool:
    """Whether a node reads a program input (looking through views): a cache's past."""
    for v in node.inputs:
        while v is not None and v.producer is not None and v.producer.op in VIEW_OPS and v.producer.inputs:
            v = v.producer.inputs[0]
        if v is not None and v.producer is None and v.kind is ValueKind.INPUT:
            return True
    return False


def _fusable(producer: Node, consumer: Node) -> bool:
    pg, cg = _group(producer), _group(consumer)
    if cg is OpGroup.ELEMENTWISE:
        return pg in (OpGroup.ELEMENTWISE, OpGroup.CONTRACTION, OpGroup.CONVOLUTION, OpGroup.ATTENTION,
                      OpGroup.NORMALIZATION, OpGroup.REDUCTION) or producer.op in LAYOUT
    if cg in (OpGroup.REDUCTION, OpGroup.NORMALIZATION):
        return pg is OpGroup.ELEMENTWISE or producer.op in LAYOUT
    if consumer.op in _HEAVY:
        return producer.op in LAYOUT            # a layout change absorbed by the matmul's operand load
    if consumer.op in LAYOUT:
        return pg is OpGroup.ELEMENTWISE or producer.op in LAYOUT
    return False


def _acyclic(consumer: Node, j: int, i: int, groups: _Groups, index: dict[Node, int],
             base: dict[Value, Value]) -> bool:
    """Merging is safe if the consumer's other inputs come from before the producer's group."""
    gi, gj = groups.find(i), groups.find(j)
    start = groups.first[gj]
    for v in consumer.inputs:
        if v is None:
            continue
        p = base.get(v, v).producer
        if p is None or p not in index:
            continue
        k = index[p]
        gk = groups.find(k)
        if gk in (gi, gj):
            continue
        if k > start:
            return False
    return True


def _view_bases(graph: Graph) -> dict[Value, Value]:
    """Map each view's output to the value whose storage it aliases."""
    base: dict[Value, Value] = {}
    for node in graph.nodes:
        if node.op in VIEW_OPS and node.inputs and node.inputs[0] is not None:
            src = node.inputs[0]
            b = base.get(src, src)
            for v in node.outputs:
                base[v] = b
    return base


def _distinct_bases(node: Node, base: dict[Value, Value]) -> Iterator[Value]:
    """The storages a node reads, each once, looking through views."""
    seen: set[Value] = set()
    for v in node.inputs:
        if v is None:
            continue
        b = base.get(v, v)
        if b not in seen:
            seen.add(b)
            yield b


def _consumers(graph: Graph, base: dict[Value, Value]) -> dict[Value, list[Node]]:
    """Non-view nodes reading each base value (views are looked through)."""
    out: dict[Value, list[Node]] = {}
    for node in graph.nodes:
        if node.op not in VIEW_OPS:
            for b in _distinct_bases(node, base):
                out.setdefault(b, []).append(node)
    return out


def _kernels(table: CostTable, nodes: list[Node], partition: list[list[int]], base: dict[Value, Value],
             consumers: dict[Value, list[Node]], graph_outputs: set[Value]) -> list[Kernel]:
    kernels: list[Kernel] = []
    for idx in partition:
        group_nodes = [nodes[i] for i in idx]
        ids = {n for n in group_nodes}
        if len(group_nodes) == 1 and group_nodes[0].op in VIEW_OPS:
            n = group_nodes[0]
            kernels.append(Kernel(n.name, "view", group_nodes, n, table.costs[n]))
            continue
        anchor = next((n for n in group_nodes if n.op in _HEAVY), None) or \
            next((n for n in group_nodes if not n.attrs.get(STRIDED_VIEW)), group_nodes[0])
        kind = "attention" if sum(n.op is Op.DOT for n in group_nodes) > 1 and \
            any(n.op is Op.SOFTMAX for n in group_nodes) else _kind(anchor)
        total = Cost()
        for n in group_nodes:
            total = total + table.costs[n]
        produced = {v for n in group_nodes for v in n.outputs}
        ext_inputs: dict[Value, Value] = {b: b for n in group_nodes for b in _distinct_bases(n, base)
                                          if b not in produced}
        internal_reads = _unpaid_reads(table, group_nodes, base, produced) if len(group_nodes) > 1 else 0
        written = 0
        outs: list[Value] = []
        for n in group_nodes:
            for v in n.outputs:
                users = consumers.get(v, [])
                if v in graph_outputs or any(u not in ids for u in users) or len(group_nodes) == 1:
                    outs.append(v)
                    written += v.type.dtype.nbytes(prod(table.shapes[v])) if len(group_nodes) > 1 else 0
        if len(group_nodes) > 1:
            read = max(total.bytes_read - internal_reads, 0)
            cost = Cost(total.flops, total.transcendentals, read, written, total.comm_bytes)
        else:
            cost = total
        kernels.append(Kernel(anchor.name, kind, group_nodes, anchor, cost, list(ext_inputs.values()), outs))
    return kernels



def _unpaid_reads(table: CostTable, group: list[Node], base: dict[Value, Value], produced: set[Value]) -> int:
    """Bytes the group's nodes count as read that the kernel does not read from memory: every read
    of a value produced inside it, and the repeats of an outside storage several of its nodes read
    (the kernel loads it once: RMSNorm's ``x`` feeds ``pow`` and ``mul``). A node reads a storage
    through the views it names (RoPE's halves of ``q``); a storage read whole counts its bytes once."""
    unpaid = 0
    outside: dict[Value, list[int]] = {}
    for n in group:
        seen: dict[Value, int] = {}
        for v in n.inputs:
            if v is not None and v not in seen:
                seen[v] = v.type.dtype.nbytes(prod(table.shapes[v]))
        for v, nbytes in seen.items():
            b = base.get(v, v)
            if b in produced:
                unpaid += nbytes
            else:
                outside.setdefault(b, []).append(nbytes)
    for b, reads in outside.items():
        if len(reads) > 1:
            whole = b.type.dtype.nbytes(prod(table.shapes[b]))
            unpaid += sum(reads) - max(max(reads), min(sum(reads), whole))
    return unpaid
