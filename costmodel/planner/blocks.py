"""A model cut into its repeated layers, plus what runs before (embeddings) and after (final norm, head).

Why: a 100-layer transformer has one distinct layer, and the planner must cost each distinct
(layer, sharding) once and combine the rest by arithmetic, or the search would re-interpret the
whole graph for every candidate. Layers are found from module scopes (``model.layers.7``,
``transformer.h.7``, ``encoder.layer.7``: the index after a ``layers``/``layer``/``h``/``blocks``
segment), and two layers are the same when their nodes compute the same thing on the same shapes
(names and indices aside). Each block becomes a standalone graph whose inputs are the values it
reads from outside (the residual stream, rotary tables) and whose outputs are the values read after
it, so it can be sharded, differentiated and timed on its own. An input that needs a gradient in the
whole model (the residual stream an earlier block computed from its parameters; never the model's
own inputs, pixels or token ids, nor a parameter-free rotary table or mask) is listed in
``Block.grad_inputs``, so that the block's backward computes its readers' data gradients as the
whole model's backward does (BERT's q/k/v input gradients, a bottleneck's first convolutions').
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...ir import Graph, Node, Value, ValueKind
from ...ir.verifier import maybe_verify
from ..training.backward import requires_grad, trainable

__all__ = ["Block", "Blocks", "split_blocks"]

_LAYER = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks|block)\.(\d+)(?:\.|$)")


@dataclass(frozen=True, eq=False)
class Block:
    """One piece of the model: ``kind`` is ``prologue``, ``layer`` or ``epilogue``."""

    name: str
    kind: str
    signature: str
    graph: Graph
    params: int
    #: names of ``graph``'s activation inputs that get a gradient (see the module docstring)
    grad_inputs: frozenset[str] = frozenset()


@dataclass
class Blocks:
    """The model's pieces in order. ``layers`` may repeat one :class:`Block` object many times."""

    prologue: Block | None
    layers: list[Block]
    epilogue: Block | None
    distinct: dict[str, Block] = field(default_factory=dict)

    @property
    def all(self) -> list[Block]:
        return [b for b in (self.prologue, *self.layers, self.epilogue) if b is not None]


def layer_index(node: Node) -> int | None:
    m = _LAYER.search(node.source.scope or "")
    return int(m.group(1)) if m else None


def split_blocks(graph: Graph) -> Blocks:
    """``graph`` cut at its layer boundaries. A graph without layer scopes is one prologue block."""
    groups: list[tuple[str, str, list[Node]]] = []
    seen_layer = False
    for node in graph.nodes:
        idx = layer_index(node)
        if idx is not None:
            seen_layer = True
            key, kind = f"layer.{idx}", "layer"
        else:
            kind = "epilogue" if seen_layer else "prologue"
            key = kind
            if kind == "epilogue" and groups and groups[-1][1] == "layer" and _feeds_only_layers(node, graph):
                key, kind = groups[-1][0], "layer"
        if groups and groups[-1][0] == key:
            groups[-1][2].append(node)
        else:
            groups.append((key, kind, [node]))
    need = requires_grad(graph.nodes, trainable(graph))
    blocks: list[Block] = []
    cache: dict[str, Block] = {}
    for key, kind, nodes in groups:
        signature = _signature(nodes, need)
        if kind == "layer" and signature in cache:
            blocks.append(cache[signature])
            continue
        sub, with_grad = _extract(graph, nodes, f"{graph.name}.{key}", need)
        block = Block(key, kind, signature, sub, sub.param_count(), with_grad)
        if kind == "layer":
            cache[signature] = block
        blocks.append(block)
    pro = blocks[0] if blocks and blocks[0].kind == "prologue" else None
    epi = blocks[-1] if blocks and blocks[-1].kind == "epilogue" else None
    layers = [b for b in blocks if b.kind == "layer"]
    return Blocks(pro, layers, epi, cache)


def _feeds_only_layers(node: Node, graph: Graph) -> bool:
    """An unscoped node between layers (a shared helper) travels with the layer before it."""
    return bool(node.outputs) and all(
        u.node.source.scope and layer_index(u.node) is not None for o in node.outputs for u in o.uses) and not any(
        o is v for o in node.outputs for v in graph.outputs)


def _signature(nodes: list[Node], need: set[Value]) -> str:
    """What the nodes compute, names and indices aside: ops, attributes, operand and result types,
    and which operand each node reads (by position in the block, or as an outside value, marked
    when the whole model gives it a gradient: a first layer after a parameter-free prologue differs
    from the next one)."""
    pos: dict[int, int] = {}
    parts: list[str] = []
    for i, node in enumerate(nodes):
        for o in node.outputs:
            pos[id(o)] = i
        reads = []
        for v in node.inputs:
            if v is None:
                reads.append("-")
            elif id(v) in pos:
                reads.append(f"n{pos[id(v)]}.{v.index}")
            else:
                reads.append(f"{v.kind.value}:{v.type}{'+grad' if v in need and not v.kind.is_weight else ''}")
        attrs = sorted((k, repr(a)) for k, a in node.attrs.items() if isinstance(a, (int, float, str, bool, tuple)))
        parts.append(f"{node.op.value}({','.join(reads)}){attrs}->{[str(o.type) for o in node.outputs]}")
    return "|".join(parts)


def _extract(graph: Graph, nodes: list[Node], name: str, need: set[Value]) -> tuple[Graph, frozenset[str]]:
    """A standalone graph of ``nodes``: outside activations become inputs, weights stay weights,
    values read after the block (or returned by the model) become outputs; with the names of the
    inputs whose outside value is in ``need`` (needs a gradient in the whole model)."""
    inside = {id(n) for n in nodes}
    sub = Graph(name)
    for spec in graph.dims.values():
        sub.declare_dim(spec)
    sub.meta.update(graph.meta)
    env: dict[int, Value] = {}
    with_grad: set[str] = set()

    def get(v: Value) -> Value:
        got = env.get(id(v))
        if got is None:
            kind = v.kind if v.kind.is_weight else ValueKind.INPUT
            got = env[id(v)] = sub.add_input(v.name, v.type, kind, v.source_name)
            if v in need and not v.kind.is_weight:
                with_grad.add(got.name)
        return got

    returned = {id(v) for v in graph.outputs}
    outputs: list[Value] = []
    for node in nodes:
        ins = [get(v) if v is not None else None for v in node.inputs]
        new = sub.add_node(node.op, ins, [o.type for o in node.outputs], dict(node.attrs), name=node.name,
                           source=node.source, out_names=[o.name for o in node.outputs])
        for o, n in zip(node.outputs, new.outputs):
            env[id(o)] = n
            if id(o) in returned or any(id(u.node) not in inside for u in o.uses):
                outputs.append(n)
    sub.set_outputs(outputs)
    return maybe_verify(sub, "narrowpipe.planner.split_blocks"), frozenset(with_grad)
