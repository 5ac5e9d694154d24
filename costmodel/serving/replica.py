"""One serving replica: a model on a layout of devices, asked for step times and memory budgets.

A layout is how one copy of the model is spread: one device; ``tp`` tensor-parallel devices times
``pp`` pipeline stages (:mod:`.parallel`); or, on a dataflow target, the chips the family's own
layout takes (its schedule is the plan). Every question serving asks (a prefill, a decode step, a
mixed continuous-batching step, whether a batch fits) goes through :meth:`Replica.step` and
:meth:`Replica.memory`, so the metrics above never ask which layout they are talking to.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from math import ceil
from typing import Any

from ...backends import Target
from ...backends.defaults import SERVING_MEMORY_RESERVE
from ...errors import NarrowpipeError
from ...ir import DType
from ..execution import TimingOptions
from ..execution.collectives import Topology
from .layout import Layout
from .memory import Memory, memory_budget
from .parallel import (
    ep_all_to_all_s,
    logits_gather_s,
    pipeline_s,
    pp_hop_s,
    pp_spec,
    stage_end,
    tp_collectives_s,
    tp_spec,
)
from .prepare import ServingGraph, spec_graph
from .step import StepTime, activation_bytes, time_step

_DEFAULT_OPTIONS = TimingOptions()
_ONE_DEVICE = Layout()
__all__ = ["Layout", "Replica", "MLA_DECODE"]
#: How a latent-attention (MLA) model's decode steps are timed: ``absorbed``, as serving engines run
#: decode (vLLM's and SGLang's MLA kernels fold ``kv_b_proj`` into the query and the output and attend
#: over the cached latent; :mod:`narrowpipe.models.mla`), or ``as-built``, the graph's own formulation.
MLA_DECODE = ("absorbed", "as-built")


#: The largest batch :meth:`Replica.max_batch` looks for: a result equal to it is the search's cap,
#: not a memory limit (a dataflow layout adds chips for its KV cache until the system has no more).
BATCH_SEARCH_LIMIT = 1 << 16


class Replica:
    """``sg`` on ``target`` in ``layout``; ``topology`` prices the collectives (default: the target's
    own links); ``reserve`` is the fraction of memory the runtime keeps; ``chips`` the chips a
    dataflow layout may use (``system`` names them: a system's devices; default: the target's
    largest system, ``max_chips``, or no limit where the catalog gives none); ``mla_decode`` one of
    :data:`MLA_DECODE` (a model without latent attention ignores it); ``peer_all_reduce``: the engine
    all-reduces small buffers with its own one-shot/two-shot kernels (vLLM, SGLang and TensorRT-LLM do
    by default on NVLink), False for NCCL alone (:attr:`.collectives.Topology.peer_all_reduce`)."""

    def __init__(self, sg: ServingGraph, target: Target, layout: Layout = _ONE_DEVICE, *,
                 options: TimingOptions = _DEFAULT_OPTIONS, topology: Topology | None = None,
                 reserve: float = SERVING_MEMORY_RESERVE, chips: int | None = None, system: str = "",
                 mla_decode: str = "absorbed", peer_all_reduce: bool = True) -> None:
        if mla_decode not in MLA_DECODE:
            raise NarrowpipeError(f"mla_decode must be one of {', '.join(MLA_DECODE)}, got {mla_decode!r}")
        self.source = sg
        self.target = target
        self.layout = layout
        self.options = options
        self.topology = replace(topology or Topology.of(target), peer_all_reduce=peer_all_reduce)
        self.dataflow = target.family == "dataflow"
        # a dataflow compiler places every tensor ahead of time: no allocator, so no runtime reserve
        self.reserve = 0.0 if self.dataflow else reserve
        self.notes: list[str] = [f"KV cache: {sg.origin}", *sg.notes, *_format_fallbacks(sg, target, options)]
        self.chips_given = chips if self.dataflow else None
        most = getattr(target, "max_chips", None)
        self.chip_limit: int | None = chips or most if self.dataflow else None
        self.chip_where = (f"the {chips:,} chips of {system or 'the system given'}" if chips else
                           f"the largest {target.name} system ({most:,} chips)" if most else "")
        if layout.devices > 1:
            if self.dataflow:
                raise NarrowpipeError(f"{target.name} is a dataflow chip: it lays the model out over its chips "
                                      "itself; leave tp and pp at 1")
            if sg.spec is None:
                raise NarrowpipeError("tensor/pipeline parallel serving needs the model's architecture: this graph "
                                      "was not recognised (Llama/GPT-2 layout or narrowpipe.transformer)")
            shard = pp_spec(tp_spec(sg.spec, layout.tp, layout.ep), layout.pp, sg.formats)
            self.device_graph = spec_graph(shard, sg.formats, origin=f"per-device shard ({layout.label})")
            self.notes.append(f"{layout.label}: each device runs the model builder's graph of its shard "
                              f"({_count(shard.heads, 'head')}, {_kv_heads(shard)}, MLP {shard.ffn}, "
                              f"{shard.layers} layers, vocab {shard.vocab})")
            if layout.ep > 1:
                self.notes.append(_ep_note(sg.spec, layout))
        else:
            self.device_graph = sg
        self.mla_decode = mla_decode
        self.decode_graph = self._decode_graph(mla_decode)
        self._step = lru_cache(maxsize=512)(self._compute_step)
        self._weight_bytes: int | None = None

    def _decode_graph(self, mla_decode: str) -> ServingGraph:
        """The graph a one-token step runs: for latent attention built decompressed (transformers'
        form, what ``from_config`` builds by default), its absorbed twin unless ``as-built`` is asked
        for. Prefill stays as built: engines prefill decompressed (expanding the latent once per
        prompt token is cheaper than attending over it). Same weights and cache, so only FLOPs move."""
        g = self.device_graph
        spec = g.spec
        if spec is None or not spec.is_mla:
            return g
        if spec.mla_absorb:
            self.notes.append("latent attention (MLA): the graph is built absorbed; prefill and decode are both "
                              "timed absorbed")
            return g
        if mla_decode == "as-built":
            self.notes.append("latent attention (MLA): decode timed decompressed, as built (kv_b_proj expands the "
                              "whole cache every step; serving engines decode absorbed: --mla-decode absorbed)")
            return g
        self.notes.append("latent attention (MLA): decode timed in the absorbed form serving engines run (kv_b_proj "
                          "folded into the query and output, attention over the cached latent), prefill "
                          "decompressed as built; --mla-decode as-built (mla_decode='as-built') times decode "
                          "decompressed")
        return spec_graph(replace(spec, mla_absorb=True), g.formats, origin=g.origin, name=g.graph.name)

    def graph_for(self, tokens: int) -> ServingGraph:
        """The per-device graph a step adding ``tokens`` per sequence runs (decode: one token)."""
        return self.decode_graph if tokens == 1 else self.device_graph

    # -- facts ------------------------------------------------------------------------------------
    @property
    def devices_hint(self) -> int:
        """Devices of the layout (a dataflow layout's chip count is known after a step)."""
        return self.layout.devices

    @property
    def act_bytes(self) -> float:
        spec = self.source.spec
        dt = self.source.formats.activations or (spec.dtype if spec is not None else DType.BF16)
        return dt.nbytes(1000) / 1000

    @property
    def kv_bytes_per_token(self) -> int:
        """Cache bytes one token of one sequence takes on one device of a TP/PP layout, whose devices
        each run their shard's graph; on a dataflow layout the whole model's, which its chips share
        (:meth:`kv_devices`). Every layer's: a sliding-window layer's only until its window fills
        (:meth:`kv_bytes_per_sequence` caps it)."""
        return self.device_graph.cache.bytes_per_token

    def kv_bytes_per_sequence(self, tokens: int) -> int:
        """Cache bytes one sequence of ``tokens`` tokens holds on one device, windows capped (the
        memory budget's count)."""
        return self.device_graph.cache.resident_bytes(1, tokens)

    # -- steps ------------------------------------------------------------------------------------
    def step(self, batch: int, tokens: int, past: int) -> StepTime:
        """One step for ``batch`` sequences of ``tokens`` new tokens on a cache of ``past``; with
        pipeline stages, its sequences are cut into microbatches (:mod:`.parallel`)."""
        return self._step(batch, tokens, past, False)

    def mixed_step(self, tokens: int) -> StepTime:
        """One continuous-batching iteration's ``tokens`` tokens (decodes and prompt chunks from many
        sequences) on an empty cache: its dense layers (``dense_s``; the caller adds each request's
        attention). With pipeline stages its tokens, not its one sequence, are cut into microbatches,
        as a decode step's sequences are: the engine keeps ``pp`` iterations' worth in flight."""
        return self._step(1, tokens, 0, True)

    def _compute_step(self, batch: int, tokens: int, past: int, split_tokens: bool) -> StepTime:
        tp, pp, dp = self.layout.tp, self.layout.pp, self.layout.dp
        # data-parallel ranks (expert parallelism) each run their share of the sequences (or tokens)
        batch, tokens = (batch, ceil(tokens / dp)) if split_tokens else (ceil(batch / dp), tokens)
        micro, micro_tokens = (batch, ceil(tokens / pp)) if split_tokens else (ceil(batch / pp), tokens)
        microbatches = ceil(tokens / micro_tokens) if split_tokens else ceil(batch / micro)
        graph = self.graph_for(tokens)
        base = time_step(graph, self.target, batch=micro, tokens=micro_tokens, past=past, options=self.options,
                         devices=self.chips_given)
        if self.layout.devices == 1:
            return base
        spec = graph.spec
        full = self.source.spec
        assert spec is not None and full is not None
        rows = micro if graph.head_on_last_token else micro * micro_tokens   # the logits the head made
        stage_spec = replace(full, layers=spec.layers)
        comm, count = tp_collectives_s(stage_spec, tp, micro * micro_tokens, self.act_bytes, self.topology,
                                       self.target, logit_rows=0)
        gather = logits_gather_s(stage_spec, tp, rows, self.act_bytes, self.topology, self.target) if tp > 1 else 0.0
        a2a, a2a_count = ep_all_to_all_s(spec, tp, self.layout.ep, micro * micro_tokens, self.act_bytes,
                                         self.topology, self.target)
        comm, count = comm + a2a, count + a2a_count
        hop = pp_hop_s(full, pp, micro * micro_tokens, self.act_bytes, self.topology, self.target,
                       self.layout.devices)
        first, last = base.ends
        layers = base.time_s - first.time_s - last.time_s + comm
        time = pipeline_s(pp, microbatches, layers, first.time_s, last.time_s + gather, hop) if pp > 1 \
            else base.time_s + (comm + gather)
        notes = [*base.notes, f"{count - a2a_count} tensor-parallel collectives per stage "
                 f"({(comm - a2a + gather) * 1e6:.1f} us)"] if tp > 1 else list(base.notes)
        if a2a_count:
            notes.append(f"{a2a_count} expert-parallel all-to-alls per stage (dispatch and combine over "
                         f"{self.layout.ep} devices, {a2a * 1e6:.1f} us)")
        if pp > 1:
            what = f"{micro_tokens} tokens" if split_tokens else f"{micro} sequences"
            notes.append(f"{pp} stages, {microbatches} microbatch(es) of {what} in flight, {hop * 1e6:.1f} us "
                         "per hop; the embedding on the first stage, the head on the last")

        def whole(total: int, ends: tuple[int, int]) -> int:
            """Over the replica: every microbatch through every stage, each end run once per microbatch."""
            return tp * dp * microbatches * (pp * (total - sum(ends)) + sum(ends))
        # the time terms are one microbatch's trip through the stages (pp x one stage's)
        return StepTime(
            time_s=time, compute_s=base.compute_s * pp, memory_s=base.memory_s * pp,
            comm_s=(comm + gather if pp == 1 else comm * pp + gather + (pp - 1) * hop), overhead_s=base.overhead_s * pp,
            attention_s=base.attention_s * pp, dense_s=time - base.attention_s * pp,
            flops=whole(base.flops, (first.flops, last.flops)), bytes=whole(base.bytes, (first.bytes, last.bytes)),
            traffic=whole(base.traffic, (first.traffic, last.traffic)),
            kernels=base.kernels * pp + count * pp, devices=self.layout.devices,
            bound="interconnect" if comm + gather + hop > max(base.memory_s, base.compute_s) else base.bound,
            activation_bytes=base.activation_bytes, weight_bytes=base.weight_bytes, notes=tuple(notes),
            ends=base.ends)

    def devices(self, batch: int = 1, context: int = 1) -> int:
        """Devices one replica uses. A dataflow layout decides its own chip count for the weights
        and activations; serving adds chips until the KV cache fits too (their hops are not timed)."""
        if not self.dataflow:
            return self.layout.devices
        return self._chips(batch, context, activation_bytes(self.decode_graph, batch, 1, context))

    def _chips(self, batch: int, context: int, activations: float) -> int:
        step = self.step(batch, 1, context)
        weights = 0 if step.weight_streaming else self._weights()     # streamed weights take no fast memory
        total = weights + activations + self.device_graph.cache.resident_bytes(batch, context + 1)
        return max(step.devices, ceil(total / self.target.memory_capacity))

    def note_once(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # -- memory -----------------------------------------------------------------------------------
    def memory(self, batch: int, context: int, *, prefill_tokens: int | None = None,
               prefill_batch: int | None = None) -> Memory:
        """Per-device budget for ``batch`` sequences holding ``context`` tokens each. Activations
        are the larger of the decode step's and, given ``prefill_tokens``, a prefill's of
        ``prefill_batch`` sequences (default ``batch``: static batching prefills them together)."""
        acts = self._activations(batch, context, prefill_tokens, prefill_batch)
        kv = self.device_graph.cache.resident_bytes(ceil(batch / self.layout.dp), context)
        if not self.dataflow:
            return memory_budget(self.target.memory_capacity, weights=self._weights(), activations=acts,
                                 kv_cache=kv, reserve_fraction=self.reserve)
        return self._chip_memory(batch, context, acts, kv)

    def _activations(self, batch: int, context: int, prefill_tokens: int | None, prefill_batch: int | None) -> float:
        """The activations :meth:`memory` budgets (its doc)."""
        pp = self.layout.pp * self.layout.dp      # a device holds its data-parallel rank's, stage's share
        # the decode step that fills the cache to ``context`` tokens: it runs on ``context - 1``
        acts = activation_bytes(self.decode_graph, ceil(batch / pp), 1, max(context - 1, 0))
        if prefill_tokens:
            acts = max(acts, activation_bytes(self.device_graph, ceil((prefill_batch or batch) / pp), prefill_tokens))
        return acts

    def over_limit(self, batch: int, context: int) -> str:
        """Why ``batch`` sequences at ``context`` tokens do not fit the chips there are ('' when they
        do, or the target is not a dataflow chip); the budget of :meth:`memory` overflows then too."""
        if not self.dataflow or not self.chip_limit:
            return ""
        g = self.decode_graph
        need = max(self._chips(batch, max(context - 1, 0), activation_bytes(g, batch, 1, max(context - 1, 0))),
                   self.step(batch, 1, max(context - 1, 0)).devices)
        return (f"the layout needs {need:,} chips, more than {self.chip_where}: it does not fit"
                if need > self.chip_limit else "")

    def _chip_memory(self, batch: int, context: int, acts: float, kv: float) -> Memory:
        """A dataflow layout's budget per chip: the layout's bytes (weights, activations, KV cache) over
        the chips it takes, the average chip, as a TP layout's is each device's. Which chip holds what
        varies with the batch (the fullest one, once reported, held weights at batch 8 and KV at
        batch 64: the "KV/dev" it gave fell from 8.34 MB to 441 kB as the batch grew), the average
        does not, and the fit is the same: the layout cuts the program so that no chip holds more than
        its capacity (:func:`..execution.dataflow_layout.cuts`) and takes at least ``total / capacity``
        chips (:meth:`_chips`), so every chip fits exactly when the average does. Over more chips
        than the limit, the bytes over the chips there are: the average overflows, as some chip does."""
        n = self._spread(batch, context, acts)
        step = self.step(batch, 1, max(context - 1, 0))
        streamed = step.weight_streaming
        if streamed:
            self.note_once("the weights stream from the external tier: the budget is the KV cache and activations")
        if n > step.devices and n <= (self.chip_limit or n):
            self.note_once("the dataflow layout gets more chips to hold the KV cache; their hops are not timed")
        weights = 0.0 if streamed else self._weights()
        return memory_budget(self.target.memory_capacity, weights=weights / n, activations=acts / n,
                             kv_cache=kv / n, reserve_fraction=self.reserve)

    def _spread(self, batch: int, context: int, acts: float) -> int:
        """Chips a dataflow layout's bytes are spread over in the memory budget: those it takes for
        ``batch`` sequences holding ``context`` tokens, at most the chips there are."""
        need = max(self._chips(batch, max(context - 1, 0), acts), self.step(batch, 1, max(context - 1, 0)).devices)
        return min(need, self.chip_limit) if self.chip_limit else need

    def kv_devices(self, batch: int, context: int, *, prefill_tokens: int | None = None,
                   prefill_batch: int | None = None) -> int:
        """What :meth:`memory` (same arguments) divides the replica's cache by to give each device's: 1
        where each device runs its own shard's graph (:attr:`kv_bytes_per_token` is already that
        device's), a dataflow layout's chips (the model's cache, averaged over them)."""
        if not self.dataflow:
            return 1
        return self._spread(batch, context, self._activations(batch, context, prefill_tokens, prefill_batch))

    def _weights(self) -> int:
        if self._weight_bytes is None:
            self._weight_bytes = graph_weight_bytes(self.device_graph, self.layout.pp)
        return self._weight_bytes

    def max_batch(self, context: int, *, prefill_tokens: int | None = None, prefill_batch: int | None = None,
                  limit: int = BATCH_SEARCH_LIMIT) -> int:
        """The largest batch whose budget fits at ``context`` tokens (0 when not even one fits; ``limit``
        when the search stops there, as it does on a dataflow target that adds chips for its KV cache)."""
        def fits(b: int) -> bool:
            return self.memory(b, context, prefill_tokens=prefill_tokens, prefill_batch=prefill_batch).fits
        if not fits(1):
            return 0
        if self.dataflow and self.chip_limit and not self.chips_given:
            self.note_once(f"largest batch that fits: the dataflow layout adds chips for the KV cache as the batch "
                           f"grows, up to {self.chip_where}, not on the chips of this batch's layout")
        lo, hi = 1, 2
        while hi <= limit and fits(hi):
            lo, hi = hi, hi * 2
        if hi > limit:
            return lo
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo


def _format_fallbacks(sg: ServingGraph, target: Target, options: TimingOptions) -> list[str]:
    """A note per quantized GEMM format the chip has no matrix rate for: the bytes shrink, the
    GEMMs run at a wider format's rate (fp8 on TPU v5e ran at bf16 and only said "GEMM inputs in
    fp8_e4m3")."""
    from ..execution.common import matrix_rate
    out = []
    for flag, dtype in (("gemm-inputs", sg.formats.gemm_inputs), ("activations", sg.formats.activations)):
        if dtype is None or not (dtype.is_float or dtype.is_int) or dtype.bits > 8:
            continue
        rate = matrix_rate(target, dtype, options)
        if rate.dtype != dtype.value:
            out.append(f"{target.name} has no {dtype.value} matrix rate: the {dtype.value} GEMMs (--{flag}) run at "
                       f"its {rate.dtype} rate ({rate.flops_per_s / 1e12:,.0f} TFLOP/s); their {dtype.value} bytes "
                       "still count")
    return out


def graph_weight_bytes(g: ServingGraph, pp: int = 1) -> int:
    """Bytes of the per-device graph's weights (KV cache tensors are inputs, not weights). A pipeline
    stage's graph is built with the embedding and the head, but the first stage holds only the one and
    the last only the other (a tied table: both, a copy each): the fullest stage holds its layers and
    the larger of the two (:func:`.parallel.stage_end`)."""
    from ..interpreter import interpret
    from ..sizes import value_bytes, weight_bytes
    table = interpret(g.graph, g.bindings(1, 1, 0))
    if pp == 1:
        return weight_bytes(table)
    users = g.graph.users()
    held = {"every": 0, "first": 0, "last": 0}
    for w in g.graph.weights:
        ends = {stage_end(n.source.scope) for n in users.get(w, [])} or {"every"}
        for end in ({"every"} if "every" in ends else ends):
            held[end] += value_bytes(table, w)
    return held["every"] + max(held["first"], held["last"])


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _kv_heads(shard: Any) -> str:
    """The shard's KV heads as its cache holds them: latent attention (DeepSeek's MLA) caches one
    latent per token that every query head reads (absorbed or expanded), whole on every device,
    not the ``num_key_value_heads`` its config lists (128 for DeepSeek-V3, which a TP8 split called 16)."""
    if getattr(shard, "kv_lora_rank", None) is not None:
        return (f"one latent KV of {shard.kv_lora_rank} + {shard.qk_rope_head_dim} values a token shared by the heads "
                "(whole on every device)")
    return _count(shard.kv_heads, "KV head")


def _ep_note(spec: Any, layout: Layout) -> str:
    """What expert parallelism places where (:mod:`.layout`)."""
    dp = f"{layout.dp} data-parallel ranks of TP{layout.tp} attention, each with its share of the sequences and its " \
         "own KV cache; " if layout.dp > 1 else ""
    how = ("dispatch and combine all-to-alls per MoE layer" if layout.dp > 1 else
           "no all-to-all (vLLM runs them only with data parallelism: every TP rank holds every token and the "
           "tensor-parallel all-reduce sums the experts' outputs)")
    return (f"expert parallel {layout.ep} (vLLM --enable-expert-parallel): {dp}{spec.experts // layout.ep} of the "
            f"{spec.experts} experts whole on each device, the busiest device's routed rows per grouped GEMM; {how}")
