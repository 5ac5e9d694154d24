"""Tensor- and pipeline-parallel serving: the per-device program and the traffic between devices.

Tensor parallelism (Megatron-LM's layout, what vLLM and TensorRT-LLM run): q/k/v, gate and up are
split by output columns, o and down by input rows, so each device holds ``heads / tp`` query heads,
``kv_heads / tp`` KV heads (a KV head is replicated when there are fewer KV heads than devices, as
vLLM does), ``ffn / tp`` of the MLP and ``vocab / tp`` of the embedding and head; norms are
replicated. A device then runs the model builder's graph of that shard, and each layer ends its
attention and its MLP with an all-reduce of ``batch x tokens x hidden`` activations (one for a
parallel attention + MLP block), and the logits are all-gathered once. At small batch those
all-reduces are latency, not bandwidth: 2 x layers collectives of a few KB each.

Pipeline parallelism splits the layers into ``pp`` stages of ``ceil(layers / pp)`` layers; the first
stage also holds the embedding, the last the final norm and the head (vLLM's and Megatron's split;
:func:`stage_end` tells them apart by module). A step's rows (a decode's sequences, a
continuous-batching iteration's tokens) are cut into up to ``pp`` microbatches kept in flight
together (vLLM's and TensorRT-LLM's pipeline-parallel serving), so a step lasts the longer of one
microbatch's trip through every stage (``pp`` stages of layers, the embedding, the head, ``pp - 1``
hops of ``microbatch x hidden``) and the busiest stage's work on all microbatches (the last one's,
which runs the head on each); with one microbatch (batch 1) that is the trip. In a model whose layers
differ (dense layers among experts, sliding windows) a stage is the heaviest real one: the most weight
bytes on a device, its end (the embedding or the head) included, which binds both its memory and the
time of its decode steps (they read every weight), then the most full-attention layers (whose caches
grow with the context). DeepSeek-V3's 61 layers on two stages: the first holds 3 dense and 28 expert
layers and the embedding, the second 30 expert layers and the head, the heavier.

The collectives are priced by :class:`~narrowpipe.costmodel.execution.collectives.Topology` on the
target's own links (or a system file's), whose algorithm choice (ring, tree, NVLS, torus) is the
same everywhere in narrowpipe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from math import ceil

from ...backends import Target
from ...errors import NarrowpipeError
from ...ir import Op
from ...models.spec import TransformerSpec
from ..execution.collectives import Topology
from ..interpreter import interpret
from ..planner.blocks import layer_index
from ..sizes import value_bytes
from .formats import Formats
from .prepare import spec_graph

__all__ = ["tp_spec", "ep_check", "ep_all_to_all_s", "ep_dispatch_bytes",
           "pp_spec", "stage_weight_bytes", "tp_collectives_s", "pp_hop_s", "collective_s", "stage_end",
           "pipeline_s", "logits_gather_s"]


def tp_spec(spec: TransformerSpec, tp: int, ep: int = 1) -> TransformerSpec:
    """The architecture one of ``tp`` tensor-parallel devices holds: heads, the MLP and every expert's
    width split (an expert is split like a dense MLP, as vLLM's tensor-parallel MoE does); a latent
    attention's down-projections and latent cache are replicated (they have no head dim to split).
    With expert parallelism over ``ep`` devices (vLLM's ``--enable-expert-parallel``, :func:`ep_check`)
    the routed experts are not split by width but placed whole, ``experts / ep`` per device; the
    attention, dense MLPs and shared experts stay tensor-parallel."""
    if ep > 1:
        ep_check(spec, tp, ep)
    if tp == 1:
        return spec if ep == 1 else dataclasses.replace(spec, expert_parallel=(ep, ep))
    if spec.heads % tp:
        raise NarrowpipeError(f"tensor parallel {tp}: {spec.heads} attention heads do not split over {tp} devices")
    if spec.kv_heads % tp and tp % spec.kv_heads:
        raise NarrowpipeError(f"tensor parallel {tp}: {spec.kv_heads} KV heads neither split over nor replicate "
                              f"evenly on {tp} devices")
    split_experts = ep == 1 and spec.experts is not None
    expert_ffn = spec.expert_ffn if spec.expert_ffn is not None or ep == 1 else spec.ffn
    widths = {"ffn": spec.ffn, "expert_ffn": expert_ffn if split_experts else None, "shared_ffn": spec.shared_ffn}
    for name, width in widths.items():
        if width is not None and width % tp:
            raise NarrowpipeError(f"tensor parallel {tp}: the {name} width {width} does not split over {tp} devices")
    return dataclasses.replace(spec, heads=spec.heads // tp, kv_heads=max(spec.kv_heads // tp, 1),
                               vocab=ceil(spec.vocab / tp), ffn=spec.ffn // tp,
                               expert_ffn=expert_ffn if not split_experts or expert_ffn is None else expert_ffn // tp,
                               shared_ffn=None if spec.shared_ffn is None else spec.shared_ffn // tp,
                               expert_parallel=(ep, ep // tp) if ep > 1 else None)


def pp_spec(spec: TransformerSpec, pp: int, formats: Formats | None = None) -> TransformerSpec:
    """The slowest of ``pp`` pipeline stages of ``ceil(layers / pp)`` consecutive layers (the last
    may be shorter), built with the embedding and the head, which only the first and the last stage
    run (:func:`stage_end`): of the real stages, the one holding the most weight bytes per device in
    ``formats`` (:func:`stage_weight_bytes`), then the most full-attention layers, then the most
    expert layers (module doc), renumbered from 0."""
    if pp == 1:
        return spec
    if pp > spec.layers:
        raise NarrowpipeError(f"pipeline parallel {pp}: the model has only {spec.layers} layers")
    n = ceil(spec.layers / pp)
    stages = [range(start, min(start + n, spec.layers)) for start in range(0, spec.layers, n)]
    weigh = stage_weight_bytes(spec, formats or Formats())
    stage = max(stages, key=lambda r: (weigh(r), sum(spec.window(i) is None for i in r),
                                       sum(spec.layer_is_moe(i) for i in r)))
    sliding = None if spec.sliding_layers is None else tuple(j for j, i in enumerate(stage) if spec.window(i))
    dense = tuple(j for j, i in enumerate(stage) if i in spec.dense_layers)
    return dataclasses.replace(spec, layers=len(stage), sliding_layers=sliding, dense_layers=dense)


def stage_weight_bytes(spec: TransformerSpec, formats: Formats) -> Callable[[range], int]:
    """Weight bytes a stage of layers ``r`` holds: its layers' (a dense and an expert layer differ)
    and the embedding where it starts the model, the head and final norm where it ends it (a tied
    table: a copy each). Weighed on a graph of one layer of each kind built in ``formats`` (a weight
    format changes the linear layers, not the embedding), so a stage of 30 layers is not built."""
    kinds = sorted({spec.layer_is_moe(i) for i in range(spec.layers)})
    twin = dataclasses.replace(spec, layers=len(kinds), dense_layers=(0,) if kinds == [False, True] else (),
                               sliding_layers=None)
    g = spec_graph(twin, formats)
    table = interpret(g.graph, g.bindings(1, 1, 0))
    users = g.graph.users()
    per_layer = [0] * twin.layers
    ends = {"first": 0, "last": 0, "every": 0}
    for w in g.graph.weights:
        readers = users.get(w, [])
        layer = next((i for i in map(layer_index, readers) if i is not None), None)
        if layer is not None:
            per_layer[layer] += value_bytes(table, w)
            continue
        for end in {stage_end(n.source.scope) for n in readers} or {"every"}:
            ends[end] += value_bytes(table, w)
    layer_bytes = {twin.layer_is_moe(j): per_layer[j] for j in range(twin.layers)}

    def weigh(r: range) -> int:
        return (sum(layer_bytes[spec.layer_is_moe(i)] for i in r) + (ends["first"] if r.start == 0 else 0)
                + (ends["last"] if r.stop == spec.layers else 0))
    return weigh


def ep_check(spec: TransformerSpec, tp: int, ep: int) -> None:
    """Refuse an expert-parallel layout vLLM cannot run: a dense model, ``ep`` not a multiple of ``tp``
    (vLLM's EP group is every TP x DP rank: ``ep = tp x dp``), or ``ep`` not dividing the experts."""
    if spec.experts is None:
        raise NarrowpipeError(f"expert parallel {ep}: the model has no experts (a dense model has nothing to place "
                              "over an expert-parallel group)")
    if ep % tp:
        raise NarrowpipeError(f"expert parallel {ep}: vLLM spreads the experts over all tensor x data parallel ranks "
                              f"(ep = tp x dp), and {ep} is not a multiple of tp={tp}")
    if spec.experts % ep:
        raise NarrowpipeError(f"expert parallel {ep}: the {spec.experts} experts do not split over {ep} devices")


def ep_all_to_all_s(spec: TransformerSpec, tp: int, ep: int, tokens: int, act_bytes: float, topology: Topology,
                    target: Target) -> tuple[float, int]:
    """(seconds, count) of one step's expert-parallel exchanges for the ``tokens`` tokens of one
    data-parallel rank: per MoE layer a dispatch and a combine all-to-all over the ``ep`` devices, each
    device sending its ``ceil(tokens / tp)`` tokens' ``top_k`` rows of ``hidden`` activations
    (``tokens x top_k x hidden x bytes``, of which ``(ep - 1) / ep`` leave the device, the collective
    model's all-to-all). vLLM runs them only with data parallelism (``FusedMoEParallelConfig.
    use_all2all_kernels``: ``dp_size > 1 and use_ep``); with ``dp = 1`` every TP rank holds every
    token, runs its own experts on them and the tensor-parallel all-reduce sums the experts' outputs.
    assumption: with ``tp > 1`` and ``dp > 1`` each TP rank dispatches its ``1 / tp`` share of its
    rank's tokens (the sequence-parallel split), not a duplicate of them."""
    if ep <= 1 or ep == tp or spec.top_k is None:
        return 0.0, 0
    moe_layers = sum(spec.layer_is_moe(i) for i in range(spec.layers))
    one = collective_s(topology, Op.ALL_TO_ALL, ep_dispatch_bytes(spec, tp, tokens, act_bytes), ep, target)
    return 2 * moe_layers * one, 2 * moe_layers


def ep_dispatch_bytes(spec: TransformerSpec, tp: int, tokens: int, act_bytes: float) -> float:
    """One device's dispatch (and combine) buffer: its ``ceil(tokens / tp)`` tokens' ``top_k`` routed rows
    of ``hidden`` activations (:func:`ep_all_to_all_s`)."""
    return ceil(tokens / tp) * (spec.top_k or 0) * spec.hidden * act_bytes


def collective_s(topology: Topology, op: Op, size: float, group: int, target: Target) -> float:
    """Seconds of one collective on a ``size``-byte buffer: the fastest algorithm plus a launch."""
    if group <= 1 or size <= 0:
        return 0.0
    return topology.time(op, size, group).seconds + target.launch_overhead


def tp_collectives_s(spec: TransformerSpec, tp: int, tokens: int, act_bytes: float, topology: Topology,
                     target: Target, logit_rows: int | None = None) -> tuple[float, int]:
    """(seconds, count) of one step's tensor-parallel collectives for ``tokens`` tokens in all:
    all-reduces after attention and MLP of every layer, and the logits' all-gather of ``logit_rows``
    rows (default ``tokens``; one per sequence when the head runs on each sequence's last token)."""
    if tp == 1:
        return 0.0, 0
    per_layer = 1 if spec.parallel_block else 2
    hidden = tokens * spec.hidden * act_bytes
    n = per_layer * spec.layers
    total = n * collective_s(topology, Op.ALL_REDUCE, hidden, tp, target)
    total += logits_gather_s(spec, tp, tokens if logit_rows is None else logit_rows, act_bytes, topology, target)
    return total, n + 1


def logits_gather_s(spec: TransformerSpec, tp: int, rows: int, act_bytes: float, topology: Topology,
                    target: Target) -> float:
    """Seconds of the all-gather of ``rows`` rows of vocabulary-sharded logits (the last stage's)."""
    return collective_s(topology, Op.ALL_GATHER, rows * ceil(spec.vocab / tp) * tp * act_bytes, tp, target)


def pp_hop_s(spec: TransformerSpec, pp: int, tokens: int, act_bytes: float, topology: Topology,
             target: Target, devices: int) -> float:
    """Seconds of one stage-to-stage transfer of ``tokens`` hidden states; the link is the one a
    group of ``devices`` (the whole replica) spans."""
    if pp == 1:
        return 0.0
    return collective_s(topology, Op.SEND, tokens * spec.hidden * act_bytes, max(devices, 2), target)


def stage_end(scope: str) -> str:
    """Which stage runs a node of the model builder's module ``scope``: ``first`` (the embeddings),
    ``last`` (the final norm and the head, its soft-cap included) or ``every`` (the layers, and what
    each stage builds for its own layers: rotary tables, masks)."""
    if scope.startswith("model.embed"):
        return "first"
    return "last" if scope.startswith(("model.norm", "lm_head")) else "every"


def pipeline_s(pp: int, microbatches: int, layers: float, first: float, last: float, hop: float) -> float:
    """Seconds of a pipelined step: ``microbatches`` (at most ``pp``) in flight, each taking ``layers``
    seconds on every stage, ``first`` more on the first (the embedding), ``last`` more on the last (the
    head) and ``hop`` to pass its activations on. The step lasts the longer of one microbatch's trip
    and the busiest stage's work on them all (the module doc)."""
    if pp == 1:
        return layers + first + last
    trip = pp * layers + first + last + (pp - 1) * hop
    busiest = max(first + hop, last, hop) + layers
    return max(trip, microbatches * busiest)
