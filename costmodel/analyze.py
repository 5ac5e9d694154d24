"""``analyze``: bind dims, run the cost interpreter and assemble a :class:`Report`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from math import prod
from typing import Any

from ..errors import NarrowpipeError, UnboundDimError, as_integer
from ..ir import Graph, OpGroup, ValueKind
from ..ir.dim_spec import by_ir_name, describe_dims
from .costcache import graph_index, paused_gc
from .counter_gaps import flop_counter_notes
from .experts import ExpertBalance, routing_notes
from .interpreter import CostTable, interpret
from .kv_lengths import bind_windows, check_mask_length
from .lazy_rows import LazyRows
from .limits import range_warnings
from .report import OpRow, Report, Unmodeled
from .report_rows import class_rows, class_totals, node_rows
from .sizes import weight_bytes

__all__ = ["analyze", "resolve_bindings", "checked_sizes", "build_report", "merge_dims"]


def merge_dims(dims: Mapping[str, Any] | None, keyword_dims: Mapping[str, Any]) -> dict[str, Any]:
    """One dict of dim bindings from ``dims={...}`` and the keyword convenience (``batch=8``).

    Options and dims used to share one keyword namespace, so a dim named ``fusion`` or ``strict``
    could not be bound; ``dims=`` takes any name. Giving one name both ways is an error.
    """
    if dims is not None and not isinstance(dims, Mapping):
        raise NarrowpipeError(f"dims= takes a mapping of dim names to sizes (dims={{'batch': 1, 'seq': 128}}), "
                              f"got {type(dims).__name__}")
    out = dict(dims or {})
    both = sorted(k for k in keyword_dims if k in out and out[k] != keyword_dims[k])
    if both:
        raise NarrowpipeError(f"dim(s) {', '.join(both)} given both in dims= and as keywords, with different values")
    out.update(keyword_dims)
    return out


def checked_sizes(graph: Graph, dims: Mapping[str, Any]) -> dict[str, int]:
    """``dims`` keyed by the graph's dim names, each a dim of the graph (or a loop's trip count) bound
    to an integer it may take; a dim may be named as its source spelled it (ONNX's ``batch size``)."""
    index = graph_index(graph)   # symbols and trip-count names, walked once per graph
    dims = by_ir_name(graph.dims, dims)
    known = set(index.symbols) | set(graph.dims) | index.trip_names
    unknown = [k for k in dims if k not in known and not k.endswith("_trips")]
    if unknown:
        listed = describe_dims(graph.dims, sorted(known)) or "none (the graph is fully static)"
        raise NarrowpipeError(f"unknown dim(s) {', '.join(sorted(unknown))}; this graph's dims: {listed}")
    out: dict[str, int] = {}
    for k, v in dims.items():
        n = as_integer(f"dim {k}", v)
        if n < _least(graph, k, index.trip_names):
            raise NarrowpipeError(f"dim {k} must be >= {_least(graph, k, index.trip_names)}, got {n}")
        out[k] = n
    return out


def resolve_bindings(graph: Graph, dims: dict[str, Any]) -> dict[str, int]:
    """The graph's default dims overridden by ``dims``; every symbol used must end up bound."""
    index = graph_index(graph)
    symbols = index.symbols
    dims = checked_sizes(graph, dims)
    bindings = graph.default_bindings()
    bindings.update(dims)
    for k, spec in graph.dims.items():   # a default nobody overrode must be a size too (a file may say -3)
        if k not in dims and spec.default is not None and k in symbols:
            least = _least(graph, k, index.trip_names)
            if isinstance(spec.default, bool) or not isinstance(spec.default, int) or spec.default < least:
                raise NarrowpipeError(f"dim {k}'s default must be an integer >= {least}, got {spec.default!r}; "
                                      f"bind it with dims={{{k!r}: N}}")
    missing = sorted(s for s in symbols if s not in bindings)
    if missing:
        docs = [f"{k}: {graph.dims[k].doc}" for k in missing if k in graph.dims and graph.dims[k].doc]
        raise UnboundDimError(
            f"graph {graph.name!r} has unbound symbolic dim(s): {', '.join(missing)}; bind them with "
            f"--set {missing[0]}=VALUE (CLI) or analyze(graph, dims={{{missing[0]!r}: VALUE}})"
            + (" (" + "; ".join(docs) + ")" if docs else ""))
    bind_windows(graph, dims, bindings)
    check_mask_length(graph, bindings)
    return bindings


def _least(graph: Graph, name: str, trip_names: frozenset[str] | set[str]) -> int:
    """The smallest size a dim may take: a loop may run 0 times, else the dim's own rule
    (:attr:`~narrowpipe.ir.DimSpec.least`, which the graph-file loader applies too), 1 undeclared."""
    spec = graph.dims.get(name)
    if name in trip_names or name.endswith("_trips"):
        return 0
    return 1 if spec is None else spec.least


def build_report(table: CostTable) -> Report:
    graph = table.graph
    flops_by_group: dict[str, int] = {g.value: 0 for g in OpGroup}
    bytes_by_group: dict[str, int] = {g.value: 0 for g in OpGroup}
    rows: Sequence[OpRow]
    if table.index is None:
        rows, (flops, trans, nbytes, comm) = node_rows(table, flops_by_group, bytes_by_group)
    else:   # totals by class now; the hundred thousand rows only if someone reads them
        flops, trans, nbytes, comm = class_totals(table, flops_by_group, bytes_by_group)
        rows = LazyRows(partial(class_rows, table))
    counts: dict[str, int] = {}
    for node in table.unmodeled:
        counts[node.label] = counts.get(node.label, 0) + 1
    unmodeled = [Unmodeled(op, n) for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    params = sum(prod(table.shapes[v]) for v in graph.weights if v.kind is ValueKind.PARAM)
    return Report(graph=graph.name, dims=dict(table.bindings), flops=flops, transcendentals=trans,
                  bytes=nbytes, comm_bytes=comm, params=params, weight_bytes=weight_bytes(table),
                  peak_activation_bytes=table.peak_activation_bytes,
                  flops_by_group=flops_by_group, bytes_by_group=bytes_by_group,
                  ops=rows, unmodeled=unmodeled,
                  notes=list(table.notes) + routing_notes(graph.nodes, table.shapes, table.expert_balance)
                  + list(graph.meta.get("training", {}).get("gaps", ())) + flop_counter_notes(table))


def range_notes(graph: Graph, bindings: dict[str, int]) -> list[str]:
    """Bindings outside the range a dim was exported for (above it also warns: :mod:`.limits`)."""
    return range_warnings(graph, bindings)


def analyze(graph: Graph, target: Any = None, strict: bool = False, *, dims: Mapping[str, Any] | None = None,
            fusion: str | None = None, allow_tf32: bool = False, sparse: bool = False, price: float | None = None,
            expert_balance: str | ExpertBalance | None = None, eager_overhead: bool = True,
            fp32_matmul: str = "default", fp32_conv: str = "default", memory_reserve: float | None = None,
            **keyword_dims: Any) -> Report:
    """Count every op of ``graph`` under the bound dims and, given a target, time it there.

    ``dims`` binds symbolic dims by name (``dims={"batch": 8, "seq": 2048}``); unbound ones take the
    graph's defaults. Dims may also be given as keywords (``batch=8``) where the name is not one of
    this function's options.

    ``target`` is a catalog name or alias, a path to a target TOML file, or a ``Target``.
    ``fusion`` ("full" or "none") overrides the family default; ``allow_tf32`` runs fp32 matmuls
    on TF32 tensor cores (``fp32_matmul``: "default", the framework's: one bf16 pass on a TPU;
    "high": TF32 or 3 bf16 passes; "highest": full float32); ``fp32_conv`` is the same for fp32
    convolutions ("default": the target's library default, TF32 under cuDNN on Ampere and later as
    PyTorch leaves it, else the matmul level); ``sparse`` uses 2:4 sparse rates where
    the chip has them; ``price`` overrides the target's USD per device-hour. ``expert_balance``
    ("balanced", "zipf:S", "hot:F"; see :mod:`narrowpipe.costmodel.experts`) is how a mixture
    of experts' routed rows spread over its experts. ``eager_overhead=False`` leaves out a CPU's per-op
    host glue of eager runs (``eager_op_overhead``): for a bare op timed alone rather than a whole model.
    ``memory_reserve`` is the fraction of each device's memory the fit leaves to the runtime (a serving
    step's, ``backends.defaults.SERVING_MEMORY_RESERVE``, as ``serve`` holds it); ``None``, the default,
    leaves a plain run's ``RUNTIME_MEMORY_RESERVE`` (context, workspaces, fragmentation); 0 leaves none.
    """
    from ..loading import as_graph  # the loaders import the frontends; lazily, as analyze is imported by them
    graph = as_graph(graph, "analyze")
    balance = ExpertBalance.parse(expert_balance)
    with paused_gc():
        bindings = resolve_bindings(graph, merge_dims(dims, keyword_dims))
        table = interpret(graph, bindings, strict=strict, expert_balance=balance)
        report = build_report(table)
    report.notes.extend(range_notes(graph, bindings))
    if target is not None:
        from .targeted import apply_target  # the execution models, one per chip family
        report = apply_target(report, table, target, fusion=fusion, allow_tf32=allow_tf32, sparse=sparse,
                              price=price, eager_overhead=eager_overhead, fp32_matmul=fp32_matmul,
                              fp32_conv=fp32_conv, memory_reserve=memory_reserve)
    return report

