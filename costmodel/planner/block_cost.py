"""One block (embedding, a layer, the head) under one sharding: its training step on one device, timed.

The chain is the one every other prediction uses, so a plan's numbers are explainable op by op:
the block's forward graph -> the runtime's form of it (:mod:`.runtime_form`: fused norms and gated
activations, the attention form, the padded vocabulary) -> one training
step (:func:`narrowpipe.costmodel.training.build_training_graph`: forward, loss seed, recomputation,
backward, optimizer) -> sharded with collectives (:func:`.sharding.shard`) -> counted, fused and
timed by the target's execution model on the system's topology. Kernel times are then summed by the
phase of the node they serve; nothing here has a formula of its own.

The result is per microbatch (the optimizer per step) and per device, and is what the planner
caches: one entry per distinct (block, strategy-that-changes-the-block), never one per candidate.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import prod
from typing import Any

from ...backends import Target
from ...ir import STRIDED_VIEW, VIEW_OPS, Graph, Node, Op, OpGroup, Value, ValueKind
from ..execution import DeviceGroup, TimingOptions
from ..experts import DEFAULT, ExpertBalance
from ..interpreter import interpret
from ..sizes import value_bytes
from ..timing import fused_program, time_program
from ..training.fp8_gemms import WEIGHT_CAST, fp8_linear_gemms
from .blocks import Block
from .runtime import Runtime
from .runtime_form import apply_runtime_form
from .sharding import PHASE, shard
from .strategy import Parallel

__all__ = ["BlockCost", "CollectiveUse", "block_cost", "block_key", "loss_outputs", "unique_params"]

#: Phases timed once per microbatch; the optimizer runs once per step.
PER_MICROBATCH = ("forward", "recompute", "backward")


@dataclass(frozen=True)
class CollectiveUse:
    """One kind of collective in a block: how many per microbatch, bytes each device sends, seconds."""

    purpose: str
    op: str
    phase: str
    axis: str
    group_size: int
    count: int
    comm_bytes: int
    seconds: float
    exposed_s: float


@dataclass(frozen=True)
class BlockCost:
    """A block's per-device cost. Times and FLOPs are per microbatch except ``optimizer_s`` and
    ``flops['optimizer']`` (per step); ``params`` and the byte counts are this device's shard."""

    name: str
    kind: str
    times: dict[str, float]
    comm_s: float                  # collective time inside forward + recompute + backward (in ``times``)
    hidden_s: float                # of which overlapped with compute (already taken out of ``times``)
    flops: dict[str, int]
    params: int
    param_bytes: int
    saved_bytes: int               # activations kept from forward to backward, one microbatch
    transient_bytes: int           # peak working activations of the step beyond the saved ones
    boundary_bytes: int            # the activation handed to the next block (a pipeline send)
    deferred: dict[str, int]       # partial gradient bytes settled with the data-parallel reduction
    collectives: tuple[CollectiveUse, ...] = field(default_factory=tuple)
    notes: tuple[str, ...] = ()
    #: ``(name, local elements, local bytes)`` of each parameter: a weight two blocks share (tied
    #: embeddings) is held once by a device that runs both.
    weights: tuple[tuple[str, int, int], ...] = ()
    #: Of ``params`` / ``param_bytes``, the experts' split over ``ep``: data-parallel over the
    #: ``edp`` group (``dp x cp / ep`` replicas) rather than ``dp x cp``.
    expert_params: int = 0
    expert_param_bytes: int = 0
    #: FP8 training: the resident FP8 copies of this device's weights (value and transposed copy),
    #: cast once per step (:mod:`..training.fp8_gemms`); 0 otherwise.
    fp8_weight_bytes: int = 0

    @property
    def forward_s(self) -> float:
        return self.times.get("forward", 0.0)

    @property
    def backward_s(self) -> float:
        """Backward plus recomputation: what the schedule's backward slot takes."""
        return self.times.get("backward", 0.0) + self.times.get("recompute", 0.0)

    @property
    def optimizer_s(self) -> float:
        return self.times.get("optimizer", 0.0)

    @property
    def weight_cast_s(self) -> float:
        """FP8 training: casting the weights to FP8, once per step (0 otherwise)."""
        return self.times.get(WEIGHT_CAST, 0.0)


def block_key(block: Block, parallel: Parallel, microbatch: int) -> tuple[Any, ...]:
    """What makes two block costs equal: the block and the strategy fields that reshape its program
    (pipeline and data-parallel degrees do not: they act between blocks)."""
    return (block.signature, parallel.tp, parallel.cp, parallel.ep, parallel.sequence_parallel,
            parallel.recompute, microbatch)


def block_cost(block: Block, parallel: Parallel, target: Target, runtime: Runtime, *, dims: dict[str, int],
               topology: Any = None, optimizer: str = "adam", expert_balance: ExpertBalance = DEFAULT,
               arrive_split: frozenset[str] = frozenset(), vocab: int | None = None) -> BlockCost:
    """Cost of one training step of ``block`` on one device of ``parallel`` (``dims`` binds batch =
    the microbatch and the sequence length; ``expert_balance`` spreads a mixture of experts' rows,
    and under expert parallelism the busiest device's program is the one costed; ``arrive_split``:
    the inputs that arrive sequence-split under sequence parallelism, see :func:`.sharding.shard`;
    ``vocab``: the model's vocabulary, padded as the runtime pads it, see :mod:`.vocab_pad`)."""
    from ..training import build_training_graph  # the training step (costmodel/training)

    forward = apply_runtime_form(block.graph, runtime, tp=parallel.tp, vocab=vocab)
    loss = "cross_entropy" if block.kind == "epilogue" and _ends_in_logits(forward) else "sum"
    # recomputation covers the repeated layers (Megatron-LM's --recompute-granularity applies to
    # transformer layers); the embedding and the head keep their activations
    recompute = parallel.recompute if block.kind == "layer" else "none"
    train = build_training_graph(forward, optimizer=optimizer, recompute=recompute, loss=loss,
                                 outputs=loss_outputs(forward, loss, block.grad_inputs),
                                 master="fp32" if runtime.master_weights else forward_dtype(forward),
                                 inputs=block.grad_inputs)
    local = shard(train, parallel, dims=dims, expert_balance=expert_balance, arrive_split=arrive_split)
    fp8_casts: list[Node] = []
    if runtime.fp8 and block.kind == "layer":
        # Transformer Engine's Linear modules are the layers' (Megatron-Core's output layer is a plain
        # tensor_parallel.ColumnParallelLinear, the embedding no GEMM): only they run FP8 GEMMs
        fp8_casts = fp8_linear_gemms(local).casts["weight"]
    table = interpret(local, {}, expert_balance=expert_balance)
    program = fused_program(table, target, TimingOptions(fusion=runtime.fusion, topology=topology))
    schedule = time_program(program, DeviceGroup(target))
    times: dict[str, float] = {}
    comm = hidden = 0.0
    uses: dict[tuple[str, str, str, str, int], list[float]] = {}
    attention_time = {k.anchor.name: t.time_s for k, t in zip(program.kernels, schedule.times) if k.kind == "attention"}
    for k, t in zip(program.kernels, schedule.times):
        phase = str(k.anchor.attrs.get(PHASE, "forward"))
        seconds = t.time_s
        if k.kind == "collective":
            node = k.anchor
            purpose = str(node.attrs.get("purpose", node.op.value))
            exposed = seconds
            if "key/value exchange" in purpose:       # ring attention hides the exchange behind the math
                consumer = next((u.node for o in node.outputs for u in o.uses), None)
                behind = attention_time.get(consumer.name, 0.0) if consumer is not None else 0.0
                exposed = max(0.0, seconds - behind)
                hidden += seconds - exposed
            if phase in PER_MICROBATCH:
                comm += seconds
            key = (purpose, node.op.value, phase, str(node.attrs.get("axis", "")), int(node.attrs.get("group_size", 1)))
            entry = uses.setdefault(key, [0, 0, 0.0, 0.0])
            entry[0] += 1
            entry[1] += k.cost.comm_bytes
            entry[2] += seconds
            entry[3] += exposed
            seconds = exposed
        times[phase] = times.get(phase, 0.0) + seconds
    flops: dict[str, int] = {}
    for node, cost in table.costs.items():
        if node.group is OpGroup.COLLECTIVE:
            continue
        phase = str(node.attrs.get(PHASE, "forward"))
        flops[phase] = flops.get(phase, 0) + cost.flops
    params = [w for w in local.weights if w.kind is ValueKind.PARAM]
    experts = [w for w in params if w.name in set(local.meta.get("expert_weights", ()))]
    saved = _saved_bytes(local, table)
    working = _working_peak(local, table)
    collectives = tuple(CollectiveUse(p, op, ph, ax, n, int(e[0]), int(e[1]), e[2], e[3])
                        for (p, op, ph, ax, n), e in uses.items())
    notes = tuple(local.meta.get("sharding_notes", ())) + tuple(train.meta.get("training", {}).get("notes", ()))
    return BlockCost(block.name, block.kind, times, comm, hidden, flops,
                     sum(prod(table.shapes[w]) for w in params), sum(value_bytes(table, w) for w in params),
                     saved, max(0, working - saved),
                     _boundary_bytes(local, table, forward.outputs[0].name if forward.outputs else None),
                     dict(local.meta.get("deferred_reductions", {})), collectives, notes,
                     tuple((w.name, prod(table.shapes[w]), value_bytes(table, w)) for w in params),
                     sum(prod(table.shapes[w]) for w in experts), sum(value_bytes(table, w) for w in experts),
                     sum(value_bytes(table, o) for n in fp8_casts for o in n.outputs))


def unique_params(blocks: list[BlockCost]) -> tuple[int, int]:
    """``(elements, bytes)`` of the parameters ``blocks`` hold, a weight that two different blocks
    share (tied embeddings in the embedding and the head) once. The same layer cost repeated stands
    for distinct layers and counts each time."""
    owner: dict[str, int] = {}
    numel = nbytes = 0
    for b in blocks:
        if not b.weights:
            numel += b.params
            nbytes += b.param_bytes
        for name, n, size in b.weights:
            if owner.setdefault(name, id(b)) != id(b):
                continue
            numel += n
            nbytes += size
    return numel, nbytes


def scaled(cost: BlockCost, k: float) -> BlockCost:
    """``cost`` with its times multiplied by ``k`` (what-if scaling in tests and sensitivities)."""
    return replace(cost, times={p: t * k for p, t in cost.times.items()}, comm_s=cost.comm_s * k,
                   hidden_s=cost.hidden_s * k)


def loss_outputs(forward: Graph, loss: str, grad_inputs: frozenset[str] = frozenset()) -> list[int] | None:
    """The outputs a block's training step differentiates: the logits for the head's cross entropy
    (its first output), else every output the next block returns a gradient for
    (:func:`~narrowpipe.costmodel.training.differentiable_outputs`: the residual stream, never an
    integer shape scalar or a parameter-free mask that the block hands on; ``grad_inputs``: the
    block's inputs that carry a gradient, :attr:`.blocks.Block.grad_inputs`)."""
    from ..training import differentiable_outputs
    return None if loss == "cross_entropy" else differentiable_outputs(forward, inputs=grad_inputs)


def _ends_in_logits(graph: Graph) -> bool:
    """The head block ends in a contraction whose output is the model's prediction (logits)."""
    out = graph.outputs[0] if graph.outputs else None
    return out is not None and out.producer is not None and out.producer.op is Op.DOT and out.dtype.is_float


def forward_dtype(graph: Graph) -> str:
    params = [w for w in graph.weights if w.kind is ValueKind.PARAM]
    return params[0].dtype.value if params else "fp32"


def _saved_bytes(graph: Graph, table: Any) -> int:
    """Bytes of forward values a later phase reads (what stays alive from forward to backward):
    with full recomputation only each block's input survives; views add nothing (a strided
    transpose included: its storage is its input's, :func:`_is_view`). A dropout mask
    that recomputation reads is regenerated from the saved random state (Megatron-LM's
    ``CheckpointFunction`` replays the RNG), so it is not kept."""
    seen: set[int] = set()
    total = 0
    for node in graph.nodes:
        if node.attrs.get(PHASE, "forward") != "forward":
            continue
        for o in node.outputs:
            if node.op is Op.RANDOM and any(u.node.attrs.get(PHASE) == "recompute" for u in _readers(o)):
                continue
            if any(u.node.attrs.get(PHASE) in ("backward", "recompute") for u in o.uses):
                base = _base(o)
                if id(base) not in seen and base.kind is ValueKind.ACTIVATION:
                    seen.add(id(base))
                    total += value_bytes(table, base)
    for v in graph.inputs:
        if any(u.node.attrs.get(PHASE) in ("backward", "recompute") for u in v.uses) and v.dtype.is_float:
            total += value_bytes(table, v)
    return total


def _working_peak(graph: Graph, table: Any) -> int:
    """Peak bytes of live activations over the forward, recomputation and backward of one microbatch
    (a last-use walk like the interpreter's): the optimizer updates its states in place once per
    step, after the activations are gone, so its temporaries are not part of this peak."""
    nodes = [n for n in graph.nodes if n.attrs.get(PHASE, "forward") in PER_MICROBATCH]
    last: dict[int, int] = {}
    for i, n in enumerate(nodes):
        for v in n.inputs:
            if v is not None:
                last[id(_base(v))] = i
    live: dict[int, int] = {id(v): value_bytes(table, v) for v in graph.inputs if v.dtype.is_float
                            and any(u.node.attrs.get(PHASE, "forward") in PER_MICROBATCH for u in v.uses)}
    cur = peak = sum(live.values())
    for i, n in enumerate(nodes):
        if not _is_view(n):
            for o in n.outputs:
                if id(o) not in live and last.get(id(o), -1) > i:
                    live[id(o)] = value_bytes(table, o)
                    cur += live[id(o)]
        peak = max(peak, cur)
        for v in n.inputs:
            if v is not None:
                b = id(_base(v))
                if last.get(b) == i and b in live:
                    cur -= live.pop(b)
    return peak


def _readers(v: Value) -> list[Any]:
    """The uses of ``v`` and of the views of it."""
    out: list[Any] = []
    for u in v.uses:
        if _is_view(u.node):
            out.extend(r for o in u.node.outputs for r in _readers(o))
        else:
            out.append(u)
    return out


def _boundary_bytes(graph: Graph, table: Any, name: str | None) -> int:
    """The local bytes of the block's first forward output (what a pipeline stage sends on)."""
    if name is None:
        return 0
    v = next((v for v in graph.values() if v.name == name), None)
    return value_bytes(table, v) if v is not None else 0


def _is_view(node: Node) -> bool:
    """A node whose output shares its input's storage: a view op, or a transpose the framework makes
    as a view of its input (``STRIDED_VIEW``: torch's ``transpose``; the runtime form marks the one
    after an attention that writes the projection's layout, :mod:`.attention_form`)."""
    return node.op in VIEW_OPS or (node.op is Op.PERMUTE and bool(node.attrs.get(STRIDED_VIEW)))


def _base(v: Value) -> Value:
    """The value whose storage a chain of views reads."""
    while v.producer is not None and _is_view(v.producer) and v.producer.inputs:
        src = v.producer.inputs[0]
        if src is None:
            break
        v = src
    return v
