"""One pipeline stage's program: the layers a device holds, with the sends and receives between stages
as ops, so ``analyze`` shows pipeline communication like any other collective.

Why a separate cut rather than part of the sharding pass: a stage is a subset of the graph (its
layers in every chunk of the interleaved schedule, the embedding on the first device, the head and
the loss on the last), while sharding rewrites every node it keeps. The cut assigns layers to the
``pp * interleave`` chunks in equal runs (Megatron-LM's split; chunk ``c`` runs on device ``c % pp``),
turns every value that crosses into this stage into a ``RECV`` and every value leaving it into a
``SEND`` over a group of 2 at the pipeline stride, then shards what remains. In a training step the
backward crosses stages the other way and gets its own sends and receives.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...errors import PlanError
from ...ir import Graph, Node, Op, Source, Value, ValueKind
from .blocks import layer_index
from .sharding import PHASE, shard
from .strategy import Parallel

__all__ = ["pipeline_stage", "stage_of_nodes"]


def stage_of_nodes(graph: Graph, parallel: Parallel) -> dict[int, int]:
    """``id(node) -> pipeline device`` for every node: layers by equal chunks, nodes outside the
    layers with the embedding (first device) when their module also ran before the first layer,
    else with the head (the device of the last chunk)."""
    layers = sorted({i for n in graph.nodes if (i := layer_index(n)) is not None})
    chunks = parallel.pp * parallel.interleave
    if not layers:
        raise PlanError(f"pipeline: graph {graph.name!r} has no layers (module scopes like model.layers.N) to split")
    if len(layers) % chunks:
        raise PlanError(f"pipeline: {len(layers)} layers do not split evenly into pp={parallel.pp} x "
                        f"interleave={parallel.interleave} chunks")
    per = len(layers) // chunks
    device_of_layer = {layer: (k // per) % parallel.pp for k, layer in enumerate(layers)}
    first = next(k for k, n in enumerate(graph.nodes) if layer_index(n) is not None)
    before = {n.source.scope for n in graph.nodes[:first]}
    last_device = (chunks - 1) % parallel.pp
    out: dict[int, int] = {}
    for n in graph.nodes:
        i = layer_index(n)
        out[id(n)] = device_of_layer[i] if i is not None else 0 if n.source.scope in before else last_device
    return out


def pipeline_stage(graph: Graph, parallel: Parallel, stage: int, *, dims: Mapping[str, int] | None = None) -> Graph:
    """The sharded program of pipeline device ``stage`` (0-based), sends and receives included."""
    if not 0 <= stage < parallel.pp:
        raise PlanError(f"pipeline: stage {stage} is outside 0..{parallel.pp - 1}")
    where = stage_of_nodes(graph, parallel)
    _, stride = parallel.axis("pp")
    sub = Graph(f"{graph.name}.stage{stage}")
    for spec in graph.dims.values():
        sub.declare_dim(spec)
    sub.meta.update(graph.meta)
    env: dict[int, Value] = {}
    mine = [n for n in graph.nodes if where[id(n)] == stage]

    def get(v: Value, reader: Node) -> Value:
        got = env.get(id(v))
        if got is not None:
            return got
        if v.producer is None:                          # a model input or a weight
            kind = v.kind if v.kind.is_weight else ValueKind.INPUT
            got = sub.add_input(v.name, v.type, kind, v.source_name)
        else:                                           # made on another stage: received
            recv = sub.add_node(Op.RECV, [], [v.type], {"group_size": 2, "axis": "pp", "stride": stride,
                                                        PHASE: reader.attrs.get(PHASE, "forward"),
                                                        "purpose": "pipeline receive"},
                                name=f"{v.name}_recv", source=Source(op="narrowpipe.planner.recv",
                                                                     scope=reader.source.scope))
            got = recv.outputs[0]
        env[id(v)] = got
        return got

    outputs: list[Value] = []
    returned = {id(v) for v in graph.outputs}
    for node in mine:
        ins = [get(v, node) if v is not None else None for v in node.inputs]
        new = sub.add_node(node.op, ins, [o.type for o in node.outputs], dict(node.attrs), name=node.name,
                           source=node.source, out_names=[o.name for o in node.outputs])
        for o, n in zip(node.outputs, new.outputs):
            env[id(o)] = n
            if id(o) in returned:
                outputs.append(n)
            elif any(where[id(u.node)] != stage for u in o.uses):
                send = sub.add_node(Op.SEND, [n], [n.type], {"group_size": 2, "axis": "pp", "stride": stride,
                                                             PHASE: node.attrs.get(PHASE, "forward"),
                                                             "purpose": "pipeline send"},
                                    name=f"{n.name}_send", source=Source(op="narrowpipe.planner.send",
                                                                         scope=node.source.scope))
                outputs.append(send.outputs[0])
    sub.set_outputs(outputs)
    return shard(sub, parallel, dims=dims)
