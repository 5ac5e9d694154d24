"""``narrowpipe.shard``: the sharding pass behind the checks a user's call needs.

:func:`.sharding.shard` is the pass the planner runs on blocks it has already vetted (dims bound,
heads split); a user calling it directly gets the same refusals :func:`narrowpipe.plan` gives, so a
strategy the planner rejects is never silently turned into a whole or half-sharded program."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...errors import PlanError, UnboundDimError
from ...ir import Graph
from ...ir.dim_spec import by_ir_name
from . import sharding
from .strategy import Parallel

if TYPE_CHECKING:
    from ..serving.recognise import TransformerSpec

__all__ = ["shard", "heads_split"]


def heads_split(spec: TransformerSpec | None, tp: int) -> str | None:
    """None when ``tp`` divides the attention heads and the KV heads (query groups), else why not.
    Megatron asserts both (num_attention_heads and num_query_groups divisible by the tensor-parallel
    size), torch's tensor parallelism splits k/v projections by whole heads, and the cost model
    shards a weight's columns without regard to heads (it would cost half a KV head per device)."""
    if tp == 1 or spec is None:
        return None
    if spec.heads % tp:
        return f"{spec.heads} attention heads do not split over tp={tp}"
    if spec.kv_heads % tp:
        return (f"{spec.kv_heads} KV heads (query groups) do not split over tp={tp} (Megatron needs "
                "num_query_groups divisible by the tensor-parallel size)")
    return None


def shard(graph: Graph, parallel: Parallel, *, dims: Mapping[str, Any] | None = None, **options: Any) -> Graph:
    """The program one device runs under ``parallel``; see :func:`.sharding.shard` for ``dims`` and
    the options. ``dims`` are resolved as :func:`narrowpipe.analyze` resolves them (an unknown name or
    a size that is not an integer >= 1 is refused, naming it), and a ``tp`` that does not divide a
    recognised transformer's attention or KV heads is refused as the planner refuses it."""
    from ..analyze import resolve_bindings
    from ..serving.recognise import spec_from_graph

    if not isinstance(parallel, Parallel):
        raise PlanError(f"shard: parallel must be a narrowpipe.Parallel, got {type(parallel).__name__}")
    try:
        bindings = resolve_bindings(graph, dict(dims or {}))
    except UnboundDimError:
        given = by_ir_name(graph.dims, dims or {})
        missing = sorted(s for s in graph.symbols() if s not in graph.default_bindings() and s not in given)
        raise PlanError(f"shard: bind the dims {', '.join(missing)} (dims={{...}}) before sharding "
                        f"{graph.name!r}") from None
    why = heads_split(spec_from_graph(graph), parallel.tp)
    if why is not None:
        raise PlanError(f"shard {graph.name!r}: {why}")
    return sharding.shard(graph, parallel, dims=bindings, **options)
