"""The planner's working state for one question: a model on ``devices`` chips of a system, at a
sequence length and global batch. It cuts the model into blocks once, costs each distinct (block,
sharding) once on demand, and evaluates any strategy from those costs by arithmetic.

Why a stateful object: the search evaluates thousands of strategies, and every one of them reuses
the few block costs that differ only in tensor/context parallelism, recomputation and microbatch
size (:func:`.block_cost.block_key`). Everything else (pipeline, data parallelism, ZeRO,
interleaving) is :mod:`.step` and :mod:`.memory` arithmetic over cached numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from ...backends.defaults import runtime_memory_reserve
from ...errors import PlanError, as_integer
from ...ir import DimRole, Graph, Op, Value
from ...ir.attention import attention_dims, attention_window, is_causal
from ..execution.collectives import Topology
from ..experts import ExpertBalance
from ..interpreter import CostTable, interpret
from .block_cost import BlockCost, block_cost, block_key, loss_outputs
from .blocks import Blocks, split_blocks
from .ep_overlap import applies as ep_overlap_applies
from .expert_parallel import expert_param_numel
from .fp8_plan import check_fp8_target
from .machine import resolve_machine
from .memory import DeviceMemory, device_memory
from .runtime import Runtime, get_runtime
from .runtime_form import apply_runtime_form
from .shard_api import heads_split
from .step import CollectiveTimer, Layout, StepTime, layout, step_time
from .strategy import Parallel
from .vocab_pad import padded_vocab, vocab_rows
from .weight_layout import _symbols

__all__ = ["Planner", "Evaluation", "resolve_machine"]


@dataclass(frozen=True)
class Evaluation:
    """One strategy evaluated: its step time, every pipeline device's memory, and whether all fit."""

    parallel: Parallel
    step: StepTime
    memory: list[DeviceMemory]
    capacity: float

    @property
    def fits(self) -> bool:
        return all(m.total <= self.capacity for m in self.memory)

    @property
    def fullest(self) -> DeviceMemory:
        return max(self.memory, key=lambda m: m.total)


class Planner:
    """Costs and evaluates training strategies of ``graph`` on ``devices`` devices."""

    def __init__(self, graph: Graph, target: Any, devices: int, *, global_batch: int, seq: int | None = None,
                 system: Any = None, runtime: str | Runtime | None = None, optimizer: str = "adam",
                 expert_balance: str | ExpertBalance | None = None) -> None:
        devices, global_batch = as_integer("devices", devices), as_integer("global_batch", global_batch)
        seq = None if seq is None else as_integer("seq", seq)   # "8" was a raw TypeError comparing with 1
        if devices < 1:
            raise PlanError(f"devices must be at least 1, got {devices}")
        if global_batch < 1:
            raise PlanError(f"global batch must be at least 1 sequence, got {global_batch}")
        if seq is not None and seq < 1:
            raise PlanError(f"seq must be at least 1 token, got {seq}")
        self.graph = graph
        self.devices = devices
        self.target, self.system = resolve_machine(target, system, devices)
        if self.target.family == "dataflow":
            raise PlanError(f"{self.target.name} is a dataflow chip: plan searches GPU/TPU parallel strategies "
                            "(tensor, pipeline, data parallelism over HBM devices) and would treat its on-chip "
                            "SRAM as HBM; its training step is laid out by the dataflow training model: run "
                            f"`narrowpipe analyze MODEL --train --target {self.target.name}`")
        self.global_batch = global_batch
        self.runtime = get_runtime(runtime, self.target)
        if self.runtime.fp8:
            check_fp8_target(self.target, self.runtime.name)
        self.optimizer = optimizer
        self.expert_balance = ExpertBalance.parse(expert_balance)
        #: the experts of a mixture of experts: how many (0 for a dense model), and their parameters
        self.experts = max((w.type.shape[0] for n in graph.nodes if n.op is Op.GROUPED_DOT and len(n.inputs) > 1
                            for w in n.inputs[1:2] if w is not None and w.kind.is_weight
                            and isinstance(w.type.shape[0], int)), default=0)
        self.expert_params = expert_param_numel(graph)
        self.batch_dim = _role_dim(graph, DimRole.BATCH)
        self.seq_dim = _role_dim(graph, DimRole.SEQUENCE)
        defaults = graph.default_bindings()
        self.seq = int(seq if seq is not None else defaults.get(self.seq_dim or "", 1))
        self.topology = self._topology()
        if devices > 1 and self.topology.link(devices).bandwidth <= 0:
            raise PlanError(f"{self.system_name} has no interconnect between devices (no link bandwidth in its "
                            "spec), so no collective can be timed: plan on 1 device, or name a system whose "
                            "chips are linked")
        self._check_positions()
        self.timer = CollectiveTimer(self.topology)
        self.blocks: Blocks = split_blocks(graph)
        self._costs: dict[tuple[Any, ...], BlockCost] = {}
        self._flops: dict[int, tuple[float, float, float]] = {}
        self._forward: dict[int, CostTable] = {}
        self._by_strategy: dict[tuple[Any, ...], tuple[list[BlockCost], BlockCost | None, BlockCost | None]] = {}
        self._layouts: dict[tuple[Any, ...], Layout] = {}
        self._pbytes = _param_dtype_bytes(graph)
        #: the token embedding's rows (None: no token lookup), padded per ``tp`` as the runtime pads them
        self.vocab = vocab_rows(graph)

    def _check_positions(self) -> None:
        """Refuse a sequence longer than the model's positions (GPT-2's 1,024 learned rows): the model
        cannot train on it, so no plan (nor the launch settings emitted from one) would be an answer."""
        from ..serving.recognise import spec_from_graph
        #: the transformer's spec when recognised (heads, KV heads, positions), else None
        self.spec = spec = spec_from_graph(self.graph)
        limit = spec.max_positions if spec is not None else None
        if limit and self.seq > limit:
            raise PlanError(f"{self.graph.name} handles at most {limit:,} positions; seq {self.seq:,} is past them")

    @property
    def capacity(self) -> float:
        """Bytes a plan may fill on a device: its memory less the share that no planned term counts, by
        the one rule analyze and compare hold the chip to (``runtime_memory_reserve``: XLA's 4% on a
        TPU, 6% for a GPU's context, workspaces and fragmentation), so one chip has one usable capacity."""
        return float(self.target.memory_capacity) * (1.0 - runtime_memory_reserve(self.target.family))

    @cached_property
    def param_count(self) -> int:
        """The model's parameters (asked once per candidate by the search's memory bound)."""
        return self.graph.param_count()

    @cached_property
    def narrowest_param_bytes(self) -> int:
        """2 when any weight is 16-bit, else 4: the bytes of a parameter in the search's memory bound."""
        return 2 if any(w.dtype.nbytes(1) == 2 for w in self.graph.weights) else 4

    # -- machine -------------------------------------------------------------------------------------
    def _topology(self) -> Topology:
        """The system's topology with the plan's ``devices`` as its world, so that each axis's groups
        are timed in the domains the launcher's rank order puts them in (:mod:`..execution.placement`)."""
        if self.system is None:
            chip = self.target
            # (a chip with no links at all is refused below, for having none)
            if self.devices > chip.scale_up_domain and chip.scale_up_bandwidth and not chip.scale_out_bandwidth:
                raise PlanError(f"{self.devices} x {chip.name}: its scale-up domain holds {chip.scale_up_domain} "
                                "devices and neither its spec nor a catalog system gives a scale-out level to join "
                                f"more (the chip fields would time every collective on the scale-up links): plan on "
                                f"at most {chip.scale_up_domain} devices, or name a system file with a scale-out "
                                "level (--system)")
            return replace(Topology.of(chip), world=self.devices)
        sys_ = self.system
        if self.devices > sys_.devices:
            if sys_.scale_out is None:
                raise PlanError(f"{self.devices} devices do not fit {sys_.name} ({sys_.devices} devices), which has no "
                                f"scale-out level to join more: plan on at most {sys_.devices}, or name a larger "
                                "system")
            sys_ = sys_.replicate(-(-self.devices // sys_.devices))
        return replace(Topology.of_system(sys_), world=self.devices)

    @property
    def system_name(self) -> str:
        """The catalog system planned on, or "chip fields" where the chip's own link fields stand for one
        (the text prints it beside the chip's name: "tpu-v6e (chip fields)")."""
        return self.system.name if self.system is not None else "chip fields"

    # -- costs ---------------------------------------------------------------------------------------
    def dims(self, microbatch: int) -> dict[str, int]:
        out = {}
        if self.batch_dim:
            out[self.batch_dim] = microbatch
        if self.seq_dim:
            out[self.seq_dim] = self.seq
        return out

    def cost(self, block: Any, parallel: Parallel) -> BlockCost:
        key = block_key(block, parallel, parallel.microbatch)
        hit = self._costs.get(key)
        if hit is None:
            hit = self._costs[key] = block_cost(block, parallel, self.target, self.runtime,
                                                dims=self.dims(parallel.microbatch), topology=self.topology,
                                                optimizer=self.optimizer, expert_balance=self.expert_balance,
                                                arrive_split=self._stream_inputs(block), vocab=self.vocab)
        return hit

    def _stream_inputs(self, block: Any) -> frozenset[str]:
        """The block's inputs that are the residual stream: activations shaped like a layer's output
        (with the sequence dim). Under sequence parallelism the block before leaves the stream split
        over ``tp`` on the sequence, so it arrives that way (:func:`.sharding.shard`'s
        ``arrive_split``); position tables and masks, shaped otherwise, arrive whole."""
        stream = self._stream_shapes
        return frozenset(v.name for v in block.graph.inputs if not v.kind.is_weight and tuple(v.shape) in stream)

    @cached_property
    def _stream_shapes(self) -> frozenset[tuple[Any, ...]]:
        """The shapes of a layer's outputs that carry the sequence dim (the residual stream's)."""
        if not self.blocks.layers or self.seq_dim is None:
            return frozenset()
        return frozenset(tuple(o.shape) for o in self.blocks.layers[0].graph.outputs
                         if any(self.seq_dim in _symbols(d) for d in o.shape))

    def _key(self, parallel: Parallel) -> tuple[Any, ...]:
        return (parallel.tp, parallel.cp, parallel.ep, parallel.sequence_parallel, parallel.recompute,
                parallel.microbatch)

    def costs(self, parallel: Parallel) -> tuple[list[BlockCost], BlockCost | None, BlockCost | None]:
        key = self._key(parallel)
        hit = self._by_strategy.get(key)
        if hit is None:
            b = self.blocks
            distinct = {id(x): self.cost(x, parallel) for x in b.layers}
            layers = [distinct[id(x)] for x in b.layers]
            pro = self.cost(b.prologue, parallel) if b.prologue is not None else None
            epi = self.cost(b.epilogue, parallel) if b.epilogue is not None else None
            hit = self._by_strategy[key] = (layers, pro, epi)
        return hit

    @property
    def cached_costs(self) -> int:
        return len(self._costs)

    def require_layers(self) -> None:
        """Refuse a model in which no repeated layer was found, saying so: every strategy places
        layers on pipeline stages and costs each distinct layer once, so with none there is nothing
        to plan, and blaming the constraints would send the user after the wrong thing."""
        if self.blocks.layers:
            return
        file = self.graph.meta.get("file")
        where = f"{self.graph.name!r}" + (f" (file {file!r})" if file else "")
        scoped = sum(1 for n in self.graph.nodes if n.source.scope)
        raise PlanError(
            f"no layers found in {where}: the planner cuts a model at its repeated layers, read from module "
            "scopes (model.layers.N, transformer.h.N, encoder.layer.N, blocks.N), to place them on pipeline "
            f"stages and cost each distinct layer once; {scoped} of its {len(self.graph.nodes)} nodes carry a "
            "scope and none names a numbered layer (an ONNX file keeps scopes in its node names, "
            "/model/layers.0/..., or in metadata_props pkg.torch.onnx.name_scopes; a graph built by hand needs "
            "Source.scope set)")

    # -- one strategy ----------------------------------------------------------------------------------
    def check(self, parallel: Parallel) -> None:
        if parallel.devices != self.devices:
            raise PlanError(f"tp x pp x dp x cp = {parallel.tp} x {parallel.pp} x {parallel.dp} x {parallel.cp} "
                            f"= {parallel.devices} devices, but the plan is for {self.devices}")
        if parallel.global_batch != self.global_batch:
            raise PlanError(f"parallel.global_batch {parallel.global_batch} differs from the plan's "
                            f"{self.global_batch}")
        self.require_layers()
        if len(self.blocks.layers) < parallel.pp * parallel.interleave:
            raise PlanError(f"{len(self.blocks.layers)} layers cannot fill pp={parallel.pp} x "
                            f"interleave={parallel.interleave} pipeline chunks")
        self.check_experts(parallel.ep, parallel.cp)
        refused = self.runtime.moe_tp_refusal(parallel.tp, parallel.sequence_parallel) if self.experts else None
        if refused:
            raise PlanError(refused)
        heads = self.heads_split(parallel.tp)
        if heads is not None:
            raise PlanError(heads)
        if parallel.cp > 1 and self.seq % (2 * parallel.cp if parallel.cp > 1 else 1):
            raise PlanError(f"seq={self.seq} does not split into 2 x cp={parallel.cp} chunks (load-balanced "
                            "causal context parallelism)")

    def heads_split(self, tp: int) -> str | None:
        """None when ``tp`` divides the attention and KV heads, else why not (:func:`.shard_api.heads_split`)."""
        return heads_split(self.spec, tp)

    def check_experts(self, ep: int, cp: int = 1) -> None:
        """Expert parallelism needs experts that ``ep`` divides, and no context parallelism."""
        if ep < 1:
            raise PlanError(f"ep={ep}: ep must be >= 1 (the expert-parallel group size; 1: no expert parallelism)")
        if ep > 1 and (not self.experts or self.experts % ep or cp > 1):
            raise PlanError(f"ep={ep}: " + ("the model has no experts to split" if not self.experts else
                                            f"does not divide the model's {self.experts} experts"
                                            if self.experts % ep else
                                            "expert parallelism with context parallelism is not modelled"))

    def evaluate(self, parallel: Parallel, chunks: list[list[int]] | None = None) -> Evaluation:
        """``parallel`` evaluated with its blocks split as :func:`.step.device_chunks` does, or as
        ``chunks`` say (a split the schedule refined; not cached)."""
        self.check(parallel)
        lay = self.layout(parallel) if chunks is None else layout(parallel, *self.costs(parallel), self.runtime, chunks)
        step = step_time(parallel, lay, self.timer, self.runtime)
        memory = [device_memory(parallel, d, self.runtime, self.optimizer, self._pbytes) for d in lay.devices]
        return Evaluation(parallel, step, memory, self.capacity)

    def layout(self, parallel: Parallel) -> Layout:
        """The blocks placed on pipeline devices (cached: shared by every strategy that differs only
        in data parallelism, ZeRO or the microbatch count)."""
        key: tuple[Any, ...] = (self._key(parallel), parallel.pp, parallel.interleave)
        if ep_overlap_applies(parallel, self.runtime):   # the hidden share follows the microbatch count
            key += (parallel.microbatches,)
        hit = self._layouts.get(key)
        if hit is None:
            hit = self._layouts[key] = layout(parallel, *self.costs(parallel), self.runtime)
        return hit

    # -- model FLOPs -------------------------------------------------------------------------------------
    def model_flops(self, tp: int = 1) -> tuple[float, float, float]:
        """``(model FLOPs, executed FLOPs, recomputed-forward FLOPs of full recomputation)`` per
        sequence, from the unsharded training graph of each distinct block counted once, times how
        often the block occurs. Model FLOPs are three times the forward's (PaLM's MFU, Chowdhery et
        al. 2022, Appendix B: ``6N + 12 L H Q T`` per token, the backward taken as twice the forward
        and nothing recomputed, causal masking not discounted), so that MFU does not rise when a kernel
        recomputes: fused (flash) attention's backward runs the scores' matmul again, which the
        executed FLOPs (forward + backward as the graph runs them; hardware FLOPs) keep. Model FLOPs
        count the model's vocabulary; executed FLOPs the vocabulary the runtime pads at ``tp``
        (:mod:`.vocab_pad`: the head computes the padding rows' logits too)."""
        hit = self._flops.get(tp)
        if hit is None:
            model = executed = recompute = 0.0
            counted: dict[int, tuple[float, float, float]] = {}
            for block in self.blocks.all:
                if id(block) not in counted:
                    f, b = self._block_flops(block, None)
                    padded = self._block_flops(block, tp) if self._padded(block, tp) else (f, b)
                    if self.runtime.moe_capacity_factor:    # model FLOPs: the dropless arithmetic
                        f = self._block_flops(block, None, dropless=True)[0]
                    counted[id(block)] = (3 * f, padded[0] + padded[1],
                                          padded[0] if block.kind == "layer" else 0.0)
                model += counted[id(block)][0]
                executed += counted[id(block)][1]
                recompute += counted[id(block)][2]
            hit = self._flops[tp] = (model, executed, recompute)
        return hit

    @cached_property
    def causal_masked_flops(self) -> float:
        """Model FLOPs per sequence (three times the forward's, as :meth:`model_flops`) of the score
        entries causal attentions mask: the query-key pairs above the diagonal (outside the window),
        which the PaLM/Megatron convention of the model FLOPs counts and MaxText's (causal attention
        halved, since July 2025) does not; 0 without causal attention. For the plan's note that
        states the MFU in both conventions."""
        counted: dict[int, float] = {}
        for block in self.blocks.all:
            if id(block) not in counted:
                table = self.forward_table(block)
                counted[id(block)] = 3 * sum(cost.flops * masked_fraction(node, table.shapes)
                                             for node, cost in table.costs.items() if node.op is Op.ATTENTION)
        return sum(counted[id(block)] for block in self.blocks.all)

    def forward_table(self, block: Any) -> CostTable:
        """One sequence's forward through ``block`` as the runtime forms it, unsharded, interpreted once
        per distinct block: what the plan's shares of the model FLOPs (causal attention's masked part,
        an FP8 plan's GEMMs) are read from."""
        hit = self._forward.get(id(block))
        if hit is None:
            hit = self._forward[id(block)] = interpret(apply_runtime_form(block.graph, self.runtime, tp=1),
                                                       self.dims(1))
        return hit

    def _padded(self, block: Any, tp: int) -> bool:
        """Whether the runtime pads a vocabulary dim of ``block`` at ``tp``."""
        v = self.vocab
        return v is not None and padded_vocab(v, self.runtime.vocab_multiple, tp) != v and \
            any(isinstance(d, int) and d == v for w in block.graph.weights for d in w.shape)

    def _block_flops(self, block: Any, tp: int | None, *, dropless: bool = False) -> tuple[float, float]:
        """Forward and backward FLOPs of one sequence through ``block``'s training graph, unsharded,
        with the vocabulary padded as at ``tp`` (None: the model's own); ``dropless``: a mixture of
        experts as its routed rows need, without a capacity runtime's buckets and einsums (model
        FLOPs, as MaxText counts them: ``calculate_tflops_training_per_device`` has no capacity term)."""
        from ..training import build_training_graph
        runtime = replace(self.runtime, moe_capacity_factor=0.0) if dropless else self.runtime
        fwd = apply_runtime_form(block.graph, runtime, tp=tp or 1, vocab=self.vocab if tp else None)
        train = build_training_graph(fwd, optimizer=self.optimizer, recompute="none",
                                     outputs=loss_outputs(fwd, "sum", block.grad_inputs), inputs=block.grad_inputs)
        table = interpret(train, self.dims(1))
        f = sum(float(c.flops) for n, c in table.costs.items() if n.attrs.get("phase") == "forward")
        b = sum(float(c.flops) for n, c in table.costs.items() if n.attrs.get("phase") == "backward")
        return f, b


def masked_fraction(node: Any, shapes: Mapping[Value, tuple[int, ...]]) -> float:
    """The share of an attention node's query-key pairs its causal mask hides: query ``i`` of ``sq``
    (the last ``sq`` of ``sk`` positions) sees keys up to its own, the last ``window`` of them where
    there is a window; 0 for an attention that is not causal."""
    q, k = node.inputs[0], node.inputs[1]
    if not is_causal(node) or q is None or k is None or q not in shapes or k not in shapes:
        return 0.0
    dims = attention_dims(node.attrs, shapes[q], shapes[k], shapes[k])
    w = attention_window(node) or dims.sk

    def seen(n: int) -> int:          # keys seen by the queries at positions 1..n together
        return n * (n + 1) // 2 if n <= w else w * (w + 1) // 2 + (n - w) * w
    pairs = dims.sq * dims.sk
    return 1 - (seen(dims.sk) - seen(max(dims.sk - dims.sq, 0))) / pairs if pairs else 0.0


def _role_dim(graph: Graph, role: DimRole) -> str | None:
    names = graph.dims_with_role(role)
    return names[0] if names else None


def _param_dtype_bytes(graph: Graph) -> int:
    params = [w for w in graph.weights if w.kind.value == "param"]
    return params[0].dtype.nbytes(1) if params else 4
