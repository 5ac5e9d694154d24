"""``serve``: one serving question (prefill, decode or a whole generation) on one deployment.

    r = serve(graph, "h100", mode="decode", batch=64, context=8192)
    r.tpot_s, r.output_tokens_per_s, r.max_batch, r.memory.explain()
    r = serve(graph, "h100", mode="generate", batch=8, input_len=2048, output_len=256, tp=2)
    r.ttft_s, r.e2e_s, r.output_tokens_per_s

The graph may be any causal LM (:mod:`.prepare` says what is done to it); formats, layout and the
system whose links price the collectives are options. Definitions of every figure: :mod:`.report`.
"""

from __future__ import annotations

from typing import Any

from ...backends import Target, get_system
from ...backends.registry import chip_and_system, chip_on_system
from ...errors import NarrowpipeError, as_integer
from ...ir import Graph
from ..execution import TimingOptions
from ..execution.collectives import Topology
from ..prices import checked_price
from .crossover import crossover
from .formats import Formats
from .generate import generate
from .prepare import ServingGraph, serving_graph
from .replica import Layout, Replica
from .report import ServingReport

__all__ = ["serve", "replica_for", "MODES"]

MODES = ("prefill", "decode", "generate")
#: Lengths used when a question leaves them out: a 2k prompt, 256 output tokens.
DEFAULT_INPUT, DEFAULT_OUTPUT = 2048, 256


def replica_for(model: Graph | ServingGraph, target: Target | str, *, tp: int = 1, pp: int = 1, ep: int = 1,
                weights: Any = None, activations: Any = None, kv: Any = None, system: Any = None,
                fusion: str | None = None, gemm_inputs: Any = None, mla_decode: str = "absorbed",
                peer_all_reduce: bool = True) -> Replica:
    """The :class:`Replica` a question runs on (reuse it to ask many questions of one deployment);
    ``ep``: expert-parallel devices of a mixture of experts (vLLM's ``--enable-expert-parallel``: ``ep = tp x dp``,
    :mod:`.layout`); ``gemm_inputs``: the format GEMMs read their activations in (FP8 W8A8, :mod:`.formats`);
    ``mla_decode``: a latent-attention model's decode form (:data:`.replica.MLA_DECODE`; default the
    absorbed form serving engines run); ``peer_all_reduce`` False: the engine all-reduces with NCCL
    alone, not its own one-shot/two-shot kernels (:class:`.replica.Replica`)."""
    if system is None:       # a system's file as the target: its chip, on it
        t, system = chip_and_system(target)
    else:
        t, system = chip_on_system(target, system)
    formats = Formats.of(weights, activations, kv, gemm_inputs)
    if isinstance(model, ServingGraph):
        sg = model if formats == model.formats or formats == Formats() else serving_graph(model.graph, formats)
    else:
        sg = serving_graph(model, formats)
    found = get_system(system) if system is not None else None
    topology = Topology.of_system(found) if found is not None else None
    # a dataflow layout may use the system's chips and no more (without one: the largest system)
    chips = found.devices if found is not None and t.family == "dataflow" else None
    return Replica(sg, t, Layout(tp, pp, ep), options=TimingOptions(fusion=fusion), topology=topology, chips=chips,
                   system=found.name if found is not None else "", mla_decode=mla_decode,
                   peer_all_reduce=peer_all_reduce)


def serve(model: Graph | ServingGraph | Replica, target: Target | str | None = None, *, mode: str = "decode",
          batch: int = 1, context: int | None = None, input_len: int | None = None, output_len: int | None = None,
          tp: int = 1, pp: int = 1, ep: int = 1, weights: Any = None, activations: Any = None, kv: Any = None,
          system: Any = None, price: float | None = None, fusion: str | None = None,
          with_crossover: bool = True, gemm_inputs: Any = None, mla_decode: str = "absorbed",
          peer_all_reduce: bool = True) -> ServingReport:
    """Time ``mode`` for ``batch`` sequences (see the module doc); ``context`` is the KV cache's
    length for decode (default: ``input_len``, else 2048); ``mla_decode`` as :func:`replica_for`'s
    (DeepSeek's latent attention decodes absorbed unless ``"as-built"``); ``peer_all_reduce`` as
    :func:`replica_for`'s."""
    if mode not in MODES:
        raise NarrowpipeError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    price = checked_price(price)
    batch, tp, pp, ep = (as_integer(n, x) for n, x in (("batch", batch), ("tp", tp), ("pp", pp), ("ep", ep)))
    context, input_len, output_len = (None if x is None else as_integer(n, x) for n, x in
                                      (("context", context), ("input_len", input_len), ("output_len", output_len)))
    for name, count in (("batch", batch), ("tp", tp), ("pp", pp), ("ep", ep)):
        if count < 1:
            raise NarrowpipeError(f"{name} must be >= 1, got {count}")
    for name, value in (("input_len", input_len), ("output_len", output_len)):
        if value is not None and value < 1:   # 0 read as "not given" and took the default
            raise NarrowpipeError(f"{name} must be >= 1 token, got {value}")
    if context is not None and context < 0:
        raise NarrowpipeError(f"context must be >= 0 tokens, got {context}")
    if isinstance(model, Replica):
        replica = model
    else:
        if not isinstance(model, ServingGraph):
            from ...loading import as_graph
            model = as_graph(model, "serve")
        if target is None:
            raise NarrowpipeError("serve: name a target")
        replica = replica_for(model, target, tp=tp, pp=pp, ep=ep, weights=weights, activations=activations, kv=kv,
                              system=system, fusion=fusion, gemm_inputs=gemm_inputs, mla_decode=mla_decode,
                              peer_all_reduce=peer_all_reduce)
    t = replica.target
    sg = replica.source
    longest = (context if context is not None else (input_len or DEFAULT_INPUT)) + 1 if mode == "decode" else \
        (input_len or context or DEFAULT_INPUT) + (output_len or DEFAULT_OUTPUT if mode == "generate" else 0)
    sg.check_context(longest)
    price_h = price if price is not None else t.price_per_hour
    notes = list(replica.notes)
    ttft = tpot = e2e = out_rate = prompt_rate = None
    prefill_step = decode_step = None
    n_in: int | None
    n_out: int | None
    if mode == "prefill":
        n_in = input_len or context or DEFAULT_INPUT
        prefill_step = replica.step(batch, n_in, 0)
        ttft = prefill_step.time_s
        prompt_rate = batch * n_in / ttft
        ctx, n_out = n_in, None
        held, prefill = n_in, {"prefill_tokens": n_in}
        max_batch = replica.max_batch(n_in, prefill_tokens=n_in)
        bound = prefill_step.bound
    elif mode == "decode":
        ctx = context if context is not None else (input_len or DEFAULT_INPUT)
        n_in, n_out = input_len, output_len
        decode_step = replica.step(batch, 1, ctx)
        tpot = decode_step.time_s
        out_rate = batch / tpot
        held, prefill = ctx + 1, {}
        max_batch = replica.max_batch(ctx + 1)
        bound = decode_step.bound
    else:
        n_in = input_len or context or DEFAULT_INPUT
        n_out = output_len or DEFAULT_OUTPUT
        ctx = n_in + n_out
        gen = generate(replica, batch, n_in, n_out)
        prefill_step, decode_step = gen.prefill, gen.decode_last
        ttft, e2e = gen.ttft_s, gen.e2e_s
        tpot = gen.decode_s / (n_out - 1) if n_out > 1 else None     # one token: the prefill's, no decode step
        out_rate = batch * n_out / e2e
        held, prefill = ctx, {"prefill_tokens": n_in}
        max_batch = replica.max_batch(ctx, prefill_tokens=n_in)
        bound = gen.decode_first.bound
        notes.append(f"decode: {gen.how}; TPOT is their mean")
    memory = replica.memory(batch, held, **prefill)
    # the cache per device, as the budget counts it: a dataflow layout's is the model's over its chips
    share = replica.kv_devices(batch, held, **prefill)
    if share > 1:
        notes.append(f"KV cache and memory per device: the layout's over its {share:,} chips, each holding its layers' "
                     f"share (the model's cache takes {replica.kv_bytes_per_token:,} B per token per sequence)")
    notes += [n for n in replica.notes if n not in notes]    # what the memory budget found
    too_many = replica.over_limit(batch, ctx + 1 if mode == "decode" else ctx)
    if too_many:
        notes.append(too_many)
    ran = decode_step or prefill_step
    devices = ran.devices if ran is not None else 1
    cross = crossover(replica, ctx) if with_crossover and mode != "prefill" and not replica.dataflow else None
    return ServingReport(
        model=sg.graph.name, target=t.name, mode=mode, layout=replica.layout.label if not replica.dataflow
        else f"dataflow layout ({devices} chips)", devices=devices, batch=batch, context=ctx, input_len=n_in,
        output_len=n_out, formats=sg.formats.to_dict(), ttft_s=ttft, tpot_s=tpot, e2e_s=e2e,
        output_tokens_per_s=out_rate, tokens_per_s_per_device=(out_rate or prompt_rate or 0.0) / devices,
        prompt_tokens_per_s=prompt_rate, max_batch=max_batch, memory=memory,
        kv_bytes_per_token=round(replica.kv_bytes_per_token / share),
        kv_bytes_per_sequence=round(replica.kv_bytes_per_sequence(held) / share),
        bound=bound, price_per_hour=price_h, crossover=cross,
        prefill=prefill_step, decode=decode_step, notes=notes)
