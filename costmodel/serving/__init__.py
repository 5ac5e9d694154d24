"""LLM serving: prefill and decode with a KV cache, whole generations, batching under latency targets.

    from narrowpipe.costmodel.serving import serve
    r = serve(graph, "h100", mode="decode", batch=64, context=8192)   # r.tpot_s, r.max_batch, r.memory
    r = serve(graph, "h100", mode="generate", batch=8, input_len=2048, output_len=256, tp=2)

Any causal LM graph works (:mod:`.prepare`); the modules, in the order a question flows through them:
:mod:`.kvcache` (the cache found in the graph), :mod:`.inplace` (the bytes a serving runtime moves),
:mod:`.recognise` (rebuilding a cache-less export), :mod:`.formats`, :mod:`.step` (one step on a
target), :mod:`.parallel` and :mod:`.replica` (layouts), :mod:`.ws2d` (Pope et al.'s TPU layout on
the schedule of their released code: :mod:`.ws2d_graph`, :mod:`.ws2d_schedule`, :mod:`.ws2d_looped`),
:mod:`.memory`, :mod:`.generate` (whole requests, continuous batching), :mod:`.crossover`,
:mod:`.report` and :mod:`.serve`.
"""

from .crossover import Crossover, crossover
from .formats import Formats
from .kvcache import KvCache, find_kv_cache
from .memory import Memory
from .prepare import ServingGraph, serving_graph
from .replica import Layout, Replica
from .report import ServingReport
from .serve import MODES, replica_for, serve

__all__ = ["serve", "replica_for", "MODES", "ServingReport", "ServingGraph", "serving_graph", "KvCache",
           "find_kv_cache", "Formats", "Layout", "Replica", "Memory", "Crossover", "crossover"]
