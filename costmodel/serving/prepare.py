"""Any causal LM graph to the graph serving times: one with a KV cache, moving serving's bytes.

What happens to a graph, said in :attr:`ServingGraph.origin` and its notes:

* **It has a cache** (inputs with a ``KV_LENGTH`` dim: the builder with ``past``, a torch export
  with cache inputs, an ONNX decoder-with-past; or a static cache the torch frontend recognised):
  used as it is.
* **It has none** (a prefill-only export, the builder without ``past``): its architecture is
  recognised (:mod:`.recognise`) and rebuilt by the model builder with a ``past`` dim; the rebuilt
  graph must match the original's parameters and matmul/attention FLOPs, else a clear error.

Then cache appends become in-place writes and ``repeat_kv`` becomes GQA (:mod:`.inplace`), and
a KV format other than the graph's own retypes the cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import NarrowpipeError, UnboundDimError
from ...ir import IN_PLACE, VIEW_OPS, DimRole, DType, Graph, Op, TensorType, Value
from ...models.decoder import build
from ...models.spec import TransformerSpec
from ..costcache import forget
from .formats import Formats
from .inplace import serving_rewrites
from .kvcache import KvCache, find_kv_cache
from .recognise import check_twin, spec_from_graph, why_not_recognised

__all__ = ["ServingGraph", "serving_graph", "spec_graph"]

#: ``graph.meta`` key where the ONNX frontend records the positions a model's rotary caches hold
#: (``frontends/onnx/contrib.py`` spells it too).
POSITIONS_META = "max_positions"


@dataclass
class ServingGraph:
    """A decode-capable graph, its cache, the architecture when known, and how it was obtained."""

    graph: Graph
    cache: KvCache
    origin: str
    spec: TransformerSpec | None = None
    notes: list[str] = field(default_factory=list)
    formats: Formats = field(default_factory=Formats)

    @property
    def batch_dims(self) -> list[str]:
        return self.graph.dims_with_role(DimRole.BATCH)

    @property
    def sequence_dims(self) -> list[str]:
        return self.graph.dims_with_role(DimRole.SEQUENCE)

    @property
    def head_on_last_token(self) -> bool:
        """The logits are one row per sequence (:func:`.inplace.head_on_last_token` ran): what a
        prefill computes, and what tensor parallelism gathers, is ``batch x vocab``."""
        out = self.graph.outputs
        return bool(out) and out[0].type.rank == 3 and out[0].type.shape[1] == 1

    def check_context(self, tokens: int) -> None:
        """Refuse a sequence longer than the model's positions (GPT-2's learned table, a config's
        ``max_position_embeddings``, the rows of an ONNX export's rotary ``cos_cache``, which
        onnxruntime refuses to run past): the model cannot run it, so no figure would be an answer."""
        limit = self.spec.max_positions if self.spec is not None else None
        cached = self.graph.meta.get(POSITIONS_META)
        if cached and (not limit or int(cached) < limit):
            limit = int(cached)
        if limit and tokens > limit:
            raise NarrowpipeError(f"{self.graph.name} handles at most {limit:,} positions; this question needs "
                                  f"{tokens:,} (prompt + output, or the decode context + 1)")

    def bindings(self, batch: int, tokens: int, past: int) -> dict[str, int]:
        """Dims for ``batch`` sequences each adding ``tokens`` to a cache holding ``past``."""
        c = self.cache
        if c.is_static:
            if batch != c.static_batch or past + tokens > (c.static_length or 0):
                raise NarrowpipeError(
                    f"this graph has a static KV cache for batch {c.static_batch} and {c.static_length} tokens "
                    f"(exported with transformers' StaticCache); batch {batch} at {past} + {tokens} tokens needs "
                    f"a re-export, or an export with cache inputs (symbolic batch and length)")
            return {}
        out = {n: batch for n in self.batch_dims}
        out.update({n: tokens for n in self.sequence_dims})
        out.update(c.length_bindings(past))
        total = self.graph.meta.get("kv_total_length")   # an ONNX export's total_sequence_length
        if total:
            out.setdefault(total["dim"], past + tokens)
        for n in self.graph.dims_with_role(DimRole.KV_LENGTH):   # on no cache tensor: the span attended
            out.setdefault(n, past + tokens)
        return out


def _rebuild(graph: Graph, spec: TransformerSpec) -> Graph:
    seq = 1   # the rebuilt graph's default only: serving binds its own prompt lengths
    if graph.dims_with_role(DimRole.SEQUENCE):
        try:
            seq = graph.role_size(DimRole.SEQUENCE)
        except UnboundDimError:   # a dim_param with no default (a dynamo export's 'sequence')
            pass
    return build(spec, seq=max(1, seq), past=0, name=graph.name)


def _retype_kv(graph: Graph, cache: KvCache, dtype: DType) -> None:
    """The cache's storage in ``dtype``: its inputs, every value an in-place append returns, and the
    views of them (an ONNX export's ``bnsh -> bsd`` layout adapters and window slices between the
    present concat and the attention), so every reader of the cache, the attention above all, reads
    the stored format's bytes."""
    names = {t.name for t in cache.tensors}
    storage: set[Value] = {v for v in graph.inputs if v.name in names}
    stored = {v.type.dtype for v in storage}
    for node in graph.nodes:
        if not any(v in storage for v in node.inputs if v is not None):
            continue
        if IN_PLACE in node.attrs:
            storage.update(node.outputs)
        elif node.op in VIEW_OPS and node.op is not Op.SHAPE_OF and node.inputs[0] in storage:
            storage.update(v for v in node.outputs if v.type.dtype in stored)
    for v in storage:
        v.type = TensorType(dtype, v.type.shape)


def serving_graph(graph: Graph, formats: Formats | None = None) -> ServingGraph:
    """``graph`` made ready for prefill and decode timing (see the module doc)."""
    formats = formats or Formats()
    cache = find_kv_cache(graph)
    spec = spec_from_graph(graph)
    if cache is not None:
        origin = "static (a StaticCache export)" if cache.is_static else "the graph's own cache inputs"
        source = graph
    else:
        if spec is None:
            raise NarrowpipeError(
                f"graph {graph.name!r} has no KV cache (no input with a KV-length dim), so a decode step has no "
                f"cache to read, and serving cannot rebuild it with one: {why_not_recognised(graph)}. Export it with "
                "its cache as inputs (past key/value inputs and present outputs: use_cache=True with "
                "past_key_values in torch.onnx.export, or Optimum's text-generation-with-past task) or build it "
                "with narrowpipe.transformer(..., past=N)")
        source = _rebuild(graph, spec)
        if graph.meta.get("builder") != "narrowpipe.models.transformer":
            problem = check_twin(graph, source)
            if problem is not None:
                raise NarrowpipeError(f"graph {graph.name!r} has no KV cache and rebuilding it failed: {problem}")
            origin = "none in the graph; recognised (Llama/GPT-2 layout) and rebuilt with one by narrowpipe.transformer"
        else:
            origin = "rebuilt from the graph's narrowpipe.transformer spec"
        cache = find_kv_cache(source)
        assert cache is not None
    return _finish(formats.apply(source), cache, origin, spec, formats)


def spec_graph(spec: TransformerSpec, formats: Formats | None = None, *, origin: str = "",
               name: str = "shard") -> ServingGraph:
    """The serving graph of an architecture (a parallel layout's per-device shard)."""
    formats = formats or Formats()
    graph = formats.apply(build(spec, seq=1, past=0, name=name))
    cache = find_kv_cache(graph)
    assert cache is not None
    return _finish(graph, cache, origin or "built by narrowpipe.transformer", spec, formats)


def _finish(source: Graph, cache: KvCache, origin: str, spec: TransformerSpec | None,
            formats: Formats) -> ServingGraph:
    formats = formats.applied_to(source)
    out, notes = serving_rewrites(source, find_kv_cache(source) or cache)
    cache = find_kv_cache(out) or cache
    if formats.kv is not None:
        _retype_kv(out, cache, formats.kv)
        forget(out)
        cache = find_kv_cache(out) or cache
        notes.append(f"KV cache stored as {formats.kv.value}")
    if formats.gemm_inputs is not None:
        notes.append(f"GEMM inputs in {formats.gemm_inputs.value} (quantized by the op that writes them); other "
                     "activations, the GEMMs' outputs and the collectives in the activations' format")
    return ServingGraph(out, cache, origin, spec, notes, formats)
